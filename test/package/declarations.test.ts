/**
 * The published declarations of `gyre/embedded` name no TensorFlow.js type: gyre's
 * declarations are emitted as `npm run build` emits them, and a consumer that checks its
 * dependencies' declarations (`skipLibCheck: false`) typechecks against them. With the DOM
 * lib it has no error at all; without it, only Effect's own declarations report the
 * browser types they name (a project that imports only `effect` gets the same), and none
 * of tfjs, WebGPU or gyre.
 */
import { spawnSync } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"

const ROOT = Path.resolve(import.meta.dirname, "../..")
const TSC = Path.join(ROOT, "node_modules", ".bin", "tsc")

const tsc = (args: ReadonlyArray<string>, cwd: string) => {
  const r = spawnSync(TSC, args, { cwd, encoding: "utf8" })
  return { code: r.status, out: `${r.stdout ?? ""}${r.stderr ?? ""}` }
}

/** A consumer's use of the entry point: its layers and its option types. */
const CONSUMER = `import type { LocalOptions, LoraConfig, ModelConfig } from "../decl/src/entry/embedded.js"
import { layer, Local, Serve, shippedModel } from "../decl/src/entry/embedded.js"

const lora: LoraConfig = { rank: 4, alpha: 8, targets: ["q", "v"] }
const options: LocalOptions = { modelDir: shippedModel("base"), lora, seed: 1 }
const config: ModelConfig = Serve.RANDOM_CONFIG
export const layers = [layer(options), Local.layer({ config }), Serve.layer({ port: 0 })]
`

/** The files a `tsc` output reports errors in. */
const filesWithErrors = (out: string) => [...new Set(out.split("\n").filter((l) => l.includes("error TS")).map((l) => l.replace(/\(\d+,\d+\).*$/, "")))]

describe("gyre/embedded declarations", () => {
  it("typecheck in a consumer with skipLibCheck false, without tfjs, WebGPU or DOM declarations", () => {
    const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-decl-"))
    try {
      const emit = tsc(["-p", Path.join(ROOT, "tsconfig.build.json"), "--emitDeclarationOnly", "--outDir", Path.join(dir, "decl")], ROOT)
      assert.strictEqual(emit.code, 0, emit.out)
      // the declarations' imports of effect resolve to this repo's packages
      Fs.symlinkSync(Path.join(ROOT, "node_modules"), Path.join(dir, "node_modules"), "dir")
      const consumer = Path.join(dir, "consumer")
      Fs.mkdirSync(consumer)
      Fs.writeFileSync(Path.join(consumer, "package.json"), JSON.stringify({ type: "module" }))
      Fs.writeFileSync(Path.join(consumer, "main.ts"), CONSUMER)
      const options = { target: "ES2022", module: "NodeNext", moduleResolution: "NodeNext", strict: true, noEmit: true, skipLibCheck: false, allowImportingTsExtensions: true, types: ["node"] }
      Fs.writeFileSync(Path.join(consumer, "tsconfig.json"), JSON.stringify({ compilerOptions: { ...options, lib: ["ES2022", "DOM"] }, include: ["main.ts"] }))
      Fs.writeFileSync(Path.join(consumer, "tsconfig.nodom.json"), JSON.stringify({ compilerOptions: { ...options, lib: ["ES2022"] }, include: ["main.ts"] }))

      const withDom = tsc(["-p", "tsconfig.json"], consumer)
      assert.strictEqual(withDom.code, 0, withDom.out)
      const noDom = tsc(["-p", "tsconfig.nodom.json"], consumer)
      const outside = filesWithErrors(noDom.out).filter((f) => !f.includes("node_modules/effect/dist/"))
      assert.deepStrictEqual(outside, [], noDom.out)
    } finally {
      Fs.rmSync(dir, { recursive: true, force: true })
    }
  })
})

/**
 * The README's TypeScript examples compile as written, against gyre's entry points.
 */
import { execFileSync } from "node:child_process"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"

const root = Path.resolve(import.meta.dirname, "..")

describe("README", () => {
  it("every ```ts block typechecks", () => {
    const readme = Fs.readFileSync(Path.join(root, "README.md"), "utf8")
    const blocks = [...readme.matchAll(/^( *)```ts\n([\s\S]*?)^\1```/gm)].map(([, indent, body]) =>
      body!.split("\n").map((l) => (l.startsWith(indent!) ? l.slice(indent!.length) : l)).join("\n")
    )
    assert.isAtLeast(blocks.length, 5)
    // inside the repo (tmp/ is git-ignored), so "gyre" resolves through the same paths as envs/
    const dir = Path.join(root, "tmp", `readme-${process.pid}`)
    Fs.rmSync(dir, { recursive: true, force: true })
    Fs.mkdirSync(Path.join(dir, "blocks"), { recursive: true })
    try {
      blocks.forEach((b, i) => Fs.writeFileSync(Path.join(dir, "blocks", `block${i}.ts`), b))
      const rel = (p: string) => Path.relative(dir, Path.join(root, p))
      Fs.writeFileSync(Path.join(dir, "tsconfig.json"), JSON.stringify({
        extends: rel("tsconfig.json"),
        compilerOptions: {
          noUnusedLocals: false,
          paths: {
            gyre: [rel("src/index.ts")],
            "gyre/testing": [rel("src/testing/index.ts")],
            "gyre/rewards": [rel("rewards/index.ts")],
            "gyre/runner": [rel("src/entry/runner.ts")],
            "gyre/embedded": [rel("src/entry/embedded.ts")],
            "gyre/http": [rel("src/entry/http.ts")],
            "gyre/mcp": [rel("src/mcp/index.ts")],
          },
        },
        include: ["blocks"],
      }))
      let output = ""
      try {
        execFileSync(process.execPath, [Path.join(root, "node_modules/typescript/bin/tsc"), "--noEmit", "-p", dir], { encoding: "utf8" })
      } catch (e) {
        output = String((e as { stdout?: string }).stdout ?? e)
      }
      assert.strictEqual(output, "", `README examples do not compile:\n${output}`)
    } finally {
      Fs.rmSync(dir, { recursive: true, force: true })
    }
  }, 120_000)
})

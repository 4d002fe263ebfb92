/**
 * `gyre/http` is the protocol client and server only: importing it in a fresh `node`
 * process loads no TensorFlow.js module. Every module the child resolves (ESM, through a
 * loader hook) and every CommonJS module it requires (`require.cache`) is listed; the same
 * listing of `gyre/embedded` shows TensorFlow.js, so the check sees it when it is there.
 */
import { spawnSync } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"

const ROOT = Path.resolve(import.meta.dirname, "../..")

/** A resolve hook that appends each resolved URL to the file named by `GYRE_LOADED_LOG`. */
const HOOK = `import { appendFileSync } from "node:fs"
export async function resolve(specifier, context, next) {
  const resolved = await next(specifier, context)
  appendFileSync(process.env.GYRE_LOADED_LOG, resolved.url + "\\n")
  return resolved
}`

/** The modules a child `node` loads when it imports `entry` (a path from the repo root). */
const modulesLoadedBy = (entry: string): Array<string> => {
  const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-entry-"))
  const log = Path.join(dir, "loaded.log")
  try {
    const script = [
      `import { createRequire, register } from "node:module"`,
      `register(${JSON.stringify(`data:text/javascript,${encodeURIComponent(HOOK)}`)})`,
      `await import(${JSON.stringify(`./${entry}`)})`,
      `const fs = await import("node:fs")`,
      `fs.appendFileSync(process.env.GYRE_LOADED_LOG, Object.keys(createRequire(import.meta.url).cache).join("\\n") + "\\n")`,
    ].join("\n")
    const r = spawnSync("node", ["--import", "tsx", "--input-type=module", "-e", script], {
      cwd: ROOT,
      encoding: "utf8",
      env: { ...process.env, GYRE_LOADED_LOG: log },
    })
    assert.strictEqual(r.status, 0, `${r.stdout}${r.stderr}`)
    return Fs.readFileSync(log, "utf8").split("\n").filter((l) => l.length > 0)
  } finally {
    Fs.rmSync(dir, { recursive: true, force: true })
  }
}

describe("entry points", () => {
  it("gyre/http loads no TensorFlow.js module", () => {
    const loaded = modulesLoadedBy("src/entry/http.ts")
    assert.isTrue(loaded.some((m) => m.endsWith("/src/backends/http/client/Client.ts")), "the listing holds the client the entry exports")
    assert.deepStrictEqual(loaded.filter((m) => m.includes("@tensorflow")), [])
    assert.deepStrictEqual(loaded.filter((m) => /\/src\/(backends\/local|cli)\//.test(m)), [], "no embedded backend and no command")
  })

  it("gyre/embedded does load TensorFlow.js (the listing sees it)", () => {
    const loaded = modulesLoadedBy("src/entry/embedded.ts")
    assert.isTrue(loaded.some((m) => m.includes("@tensorflow")))
  })
})

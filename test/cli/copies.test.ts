/**
 * An env that would load another copy of gyre or effect than the command runs on is
 * reported by name, with both folders and the fix.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { duplicateCopies, loadEnv } from "../../src/app/LoadEnv.ts"

/** A folder with its own node_modules/<name> (a stand-in package, just a package.json and an index). */
const projectWith = (names: ReadonlyArray<string>) => {
  const dir = Fs.realpathSync(Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-copies-")))
  for (const name of names) {
    const pkg = Path.join(dir, "node_modules", name)
    Fs.mkdirSync(pkg, { recursive: true })
    Fs.writeFileSync(Path.join(pkg, "package.json"), JSON.stringify({ name, version: "0.0.0", main: "index.js" }))
    Fs.writeFileSync(Path.join(pkg, "index.js"), "module.exports = {}\n")
  }
  const file = Path.join(dir, "env.js")
  Fs.writeFileSync(file, "module.exports = require('gyre')\n")
  return { dir, file }
}

describe("two copies of gyre or effect", () => {
  it.effect("are named with both folders and the fix", () => Effect.gen(function* () {
    const { dir, file } = projectWith(["effect", "gyre"])
    const found = yield* duplicateCopies(file)
    assert.strictEqual(found.length, 2)
    assert.include(found[0]!, `loads gyre from ${Path.join(dir, "node_modules", "gyre")}`)
    assert.include(found[0]!, "two copies of gyre do not mix")
    assert.include(found[1]!, `loads effect from ${Path.join(dir, "node_modules", "effect")}`)
    assert.include(found[1]!, "npm dedupe")
  }))

  it.effect("none when the env resolves the command's own copies", () => Effect.gen(function* () {
    assert.deepStrictEqual(yield* duplicateCopies(Path.resolve(import.meta.dirname, "../envs/vowels.ts")), [])
  }))

  it.effect("an env loaded from such a project fails with that message", () =>
    Effect.gen(function* () {
      const { file } = projectWith(["effect"])
      const error = yield* Effect.flip(loadEnv(file))
      assert.include(error.message, "two copies of effect do not mix")
    }))
})

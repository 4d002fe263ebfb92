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
import { installAdvice, missingPackageOf } from "../../src/app/MissingPackage.ts"

/** A folder with its own node_modules/<name> (a stand-in package, just a package.json and an index). */
const projectWith = (names: ReadonlyArray<string>) => {
  const dir = Fs.realpathSync(Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-copies-")))
  for (const name of names) {
    const pkg = Path.join(dir, "node_modules", name)
    Fs.mkdirSync(pkg, { recursive: true })
    Fs.writeFileSync(Path.join(pkg, "package.json"), JSON.stringify({ name, version: "0.0.7", main: "index.js" }))
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
    assert.include(found[0]!, `loads gyre 0.0.7 from ${Path.join(dir, "node_modules", "gyre")}`)
    assert.include(found[0]!, "two copies of gyre do not mix")
    assert.include(found[1]!, `loads effect 0.0.7 from ${Path.join(dir, "node_modules", "effect")}`)
    // both versions are named: the project's and the command's
    const mine = JSON.parse(Fs.readFileSync(Path.resolve(import.meta.dirname, "../../node_modules/effect/package.json"), "utf8")) as { version: string }
    assert.include(found[1]!, `runs on effect ${mine.version} from`)
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

  it.effect("an env that imports a package the project lacks is told the command that installs it", () =>
    Effect.gen(function* () {
      const dir = Fs.realpathSync(Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-missing-")))
      const file = Path.join(dir, "other.mjs")
      Fs.writeFileSync(file, "import 'left-pad-not-here/sub'\nexport default 1\n")
      assert.include((yield* Effect.flip(loadEnv(file))).message, "left-pad-not-here is not installed: install it in your project: npm install left-pad-not-here")
    }))

  it("a missing optional peer of gyre (an agent env's library) is advised with gyre's range", () => {
    const error = Object.assign(new Error("Cannot find package 'ai' imported from /x/envs/calculator-agent.js"), { code: "ERR_MODULE_NOT_FOUND" })
    assert.strictEqual(missingPackageOf(error), "ai")
    assert.match(installAdvice("ai"), /optional peer of gyre.*npm install "ai@\^6[^"]*"/)
    const scoped = Object.assign(new Error("Cannot find module '@ai-sdk/openai-compatible/dist'"), { code: "MODULE_NOT_FOUND" })
    assert.strictEqual(missingPackageOf(scoped), "@ai-sdk/openai-compatible")
    assert.strictEqual(missingPackageOf(Object.assign(new Error("Cannot find module './local.ts'"), { code: "MODULE_NOT_FOUND" })), undefined)
  })
})

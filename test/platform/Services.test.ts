/**
 * The services gyre's Node platform gives `effect/cli`: a command whose flags name
 * files parses through them (FileSystem, Path), `Stdio.args` reads `process.argv` when
 * asked, the file system works on real files, and spawning a process is refused by name.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as NodePath from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, FileSystem, Path, Ref, Stdio } from "effect"
import { Command, Flag } from "effect/cli"
import { ChildProcess, ChildProcessSpawner } from "effect/process"
import * as Services from "../../src/platform/Services.ts"

describe("platform services", () => {
  it.effect("a command with a file flag and a text-file flag parses through them", () =>
    Effect.gen(function* () {
      const dir = Fs.mkdtempSync(NodePath.join(Os.tmpdir(), "gyre-services-"))
      yield* Effect.addFinalizer(() => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true })))
      const file = NodePath.join(dir, "settings.txt")
      Fs.writeFileSync(file, "lr=0.1")
      const seen = yield* Ref.make<Array<string>>([])
      const command = Command.make("demo", { config: Flag.File("config", { mustExist: true }), text: Flag.FileText("text") }, ({ config, text }) =>
        Ref.set(seen, [config, text]),
      )
      yield* Command.runWith(command, { version: "1", renderErrors: false })(["--config", file, "--text", file])
      assert.deepStrictEqual(yield* Ref.get(seen), [file, "lr=0.1"])
      const missing = NodePath.join(dir, "missing.txt")
      const error = yield* Effect.flip(Command.runWith(command, { version: "1", renderErrors: false })(["--config", missing, "--text", file]))
      assert.include(JSON.stringify(error), missing)
    }).pipe(Effect.scoped, Effect.provide(Services.layer)))

  it.effect("Stdio.args reads process.argv when asked, after the program rewrote it", () =>
    Effect.gen(function* () {
      const stdio = yield* Stdio.Stdio
      const saved = process.argv
      process.argv = [saved[0]!, saved[1]!, "serve", "--port", "0"]
      const args = yield* stdio.args
      process.argv = saved
      assert.deepStrictEqual(args, ["serve", "--port", "0"])
    }).pipe(Effect.provide(Services.layer)))

  it.effect("the file system and paths work on real files", () =>
    Effect.gen(function* () {
      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      const dir = yield* fs.makeTempDirectoryScoped({ prefix: "gyre-fs-" })
      const file = path.join(dir, "a", "b.txt")
      yield* fs.makeDirectory(path.dirname(file), { recursive: true })
      yield* fs.writeFileString(file, "hello")
      assert.strictEqual(yield* fs.readFileString(file), "hello")
      assert.strictEqual((yield* fs.stat(file)).type, "File")
      assert.strictEqual(Number((yield* fs.stat(file)).size), 5)
      assert.deepStrictEqual((yield* fs.readDirectory(dir, { recursive: true })).sort(), ["a", path.join("a", "b.txt")])
      assert.isTrue(yield* fs.exists(file))
      const gone = yield* Effect.flip(fs.readFile(path.join(dir, "nope")))
      assert.strictEqual(gone.reason._tag, "NotFound")
      assert.strictEqual(yield* path.fromFileUrl(new URL(`file://${file}`)), file)
      yield* fs.remove(path.join(dir, "a"), { recursive: true })
      assert.isFalse(yield* fs.exists(file))
    }).pipe(Effect.scoped, Effect.provide(Services.layer)))

  it.effect("spawning a process is refused, saying it is not supported", () =>
    Effect.gen(function* () {
      const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
      const error = yield* Effect.flip(spawner.spawn(ChildProcess.make("ls")))
      assert.include(error.message, "not supported")
    }).pipe(Effect.scoped, Effect.provide(Services.layer)))
})

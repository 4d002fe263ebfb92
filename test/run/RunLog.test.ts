/**
 * Durable run files: the order of file-system calls that makes a write survive a power
 * loss. `node:fs/promises` is wrapped by a recording double (the real calls still run) so
 * the test sees when each file and folder is synced relative to the rename.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { vi } from "vitest"
import * as Checkpoint from "../../src/backends/local/Checkpoint.ts"
import * as RunLog from "../../src/folder/RunLog.ts"

const trace = vi.hoisted(() => [] as Array<string>)

vi.mock("node:fs/promises", async (importOriginal) => {
  const real = await importOriginal<typeof import("node:fs/promises")>()
  const open = async (path: string, flags?: string) => {
    const fh = await real.open(path, flags)
    return new Proxy(fh, {
      get(target, key) {
        if (key === "sync") {
          return async () => {
            await target.sync()
            trace.push(`sync ${path}`)
          }
        }
        const value = Reflect.get(target, key)
        return typeof value === "function" ? value.bind(target) : value
      },
    })
  }
  const rename = async (from: string, to: string) => {
    await real.rename(from, to)
    trace.push(`rename ${from} -> ${to}`)
  }
  return { ...real, open, rename, default: { ...real, open, rename } }
})

const tmp = () => Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-runlog-"))
const index = (prefix: string) => {
  const i = trace.findIndex((t) => t.startsWith(prefix))
  assert.isAtLeast(i, 0, `${prefix} in\n${trace.join("\n")}`)
  return i
}

describe("RunLog durability", () => {
  it.effect("writeAtomic syncs the temp file before the rename and the folder after it", () =>
    Effect.gen(function* () {
      const dir = tmp()
      const file = Path.join(dir, "config.json")
      trace.length = 0
      yield* RunLog.writeAtomic(file, "{}\n")
      assert.strictEqual(Fs.readFileSync(file, "utf8"), "{}\n")
      const synced = index(`sync ${file}.`)
      const renamed = index(`rename ${file}.`)
      assert.isTrue(trace[renamed]!.endsWith(`-> ${file}`))
      assert.isBelow(synced, renamed, "the data reaches the disk before the name points at it")
      assert.isAbove(trace.lastIndexOf(`sync ${dir}`), renamed, "the rename itself is synced")
      assert.deepStrictEqual(Fs.readdirSync(dir), ["config.json"])
    }))

  it.effect("checkpoint files are written by the same durable write", () =>
    Effect.gen(function* () {
      const dir = Path.join(tmp(), "state")
      const file = Path.join(dir, "step-1.ckpt")
      trace.length = 0
      yield* Effect.promise(() => Checkpoint.write(file, { kind: "test" }, { w: new Float32Array([1, 2, 3]) }))
      assert.isBelow(index(`sync ${file}.`), index(`rename ${file}.`))
      assert.isAbove(trace.lastIndexOf(`sync ${dir}`), index(`rename ${file}.`))
      // The new state/ folder's own entry is synced in the run folder.
      assert.isAtLeast(trace.indexOf(`sync ${Path.dirname(dir)}`), 0, trace.join("\n"))
      const back = yield* Effect.promise(() => Checkpoint.read(file))
      assert.deepStrictEqual([...back.tensors["w"]!], [1, 2, 3])
    }))

  it.effect("appendJsonl syncs each append, and the folder when it creates the file", () =>
    Effect.gen(function* () {
      const dir = tmp()
      const file = Path.join(dir, "checkpoints.jsonl")
      trace.length = 0
      yield* RunLog.appendJsonl(file, [{ step: 1 }])
      assert.deepStrictEqual(trace, [`sync ${file}`, `sync ${dir}`])
      trace.length = 0
      yield* RunLog.appendJsonl(file, [{ step: 2 }, { step: 3 }])
      assert.deepStrictEqual(trace, [`sync ${file}`])
      assert.deepStrictEqual((yield* RunLog.readJsonl(file)).map((r) => r["step"]), [1, 2, 3])
    }))

  it.effect("removeTempFiles deletes only the temp files writeAtomic names", () =>
    Effect.gen(function* () {
      const dir = tmp()
      const names = ["metrics.jsonl.123.abc9.tmp", "step-2.ckpt.77.0z.tmp", "notes.tmp", "metrics.jsonl"]
      for (const n of names) Fs.writeFileSync(Path.join(dir, n), "x")
      const removed = yield* RunLog.removeTempFiles([dir, Path.join(dir, "missing")])
      assert.deepStrictEqual(removed.map((f) => Path.basename(f)).sort(), ["metrics.jsonl.123.abc9.tmp", "step-2.ckpt.77.0z.tmp"])
      assert.deepStrictEqual(Fs.readdirSync(dir).sort(), ["metrics.jsonl", "notes.tmp"])
    }))
})

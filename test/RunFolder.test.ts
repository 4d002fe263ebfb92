/**
 * The run folder's Schemas at work: a row that does not decode names the file, the line
 * and the field; a torn last line is skipped; a resume keeps the rows up to its step; a
 * row that does not fit its Schema is never written; config.json reads older keys.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as RunFolder from "../src/folder/RunFolder.ts"

const folder = () => RunFolder.paths(Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-runfolder-")))

const row = (step: number) => ({ step, name: `step-${step}`, path: `state/step-${step}.ckpt`, time: "2026-12-01T00:00:00.000Z" })

describe("RunFolder", () => {
  it.effect("a checkpoint row that does not decode names the file, the line and the field", () =>
    Effect.gen(function* () {
      const files = folder()
      Fs.writeFileSync(files.checkpoints, [row(1), { ...row(2), path: 2 }].map((r) => JSON.stringify(r)).join("\n") + "\n")
      const e = yield* Effect.flip(RunFolder.readCheckpoints(files))
      assert.strictEqual(e.reason, "Decode")
      assert.strictEqual(e.path, files.checkpoints)
      assert.strictEqual(e.line, 2)
      assert.strictEqual(e.field, "path")
      assert.strictEqual(e.message, `${files.checkpoints} line 2: field path must be string, got 2`)
    }))

  it.effect("a line torn by a crash is skipped; keepThrough keeps the rows up to a step, none for step 0", () =>
    Effect.gen(function* () {
      const files = folder()
      Fs.writeFileSync(files.metrics, [0, 1, 2, 3].map((step) => JSON.stringify({ step, "env/all/reward/total": step / 4 })).join("\n") + "\n{\"step\":4,\"env/a")
      assert.deepStrictEqual((yield* RunFolder.readMetrics(files)).map((m) => m.step), [0, 1, 2, 3])
      yield* RunFolder.keepThrough(files.metrics, 2)
      assert.deepStrictEqual((yield* RunFolder.readMetrics(files)).map((m) => m.step), [0, 1, 2])
      yield* RunFolder.keepThrough(files.metrics, 0)
      assert.deepStrictEqual(yield* RunFolder.readMetrics(files), [])
    }))

  it.effect("a row that does not fit its Schema is not written", () =>
    Effect.gen(function* () {
      const files = folder()
      yield* RunFolder.appendCheckpoint(files, row(1))
      const e = yield* Effect.flip(RunFolder.appendMetrics(files, { step: 1.5 }))
      assert.strictEqual(e.reason, "Decode")
      assert.strictEqual(e.field, "step")
      assert.isFalse(Fs.existsSync(files.metrics))
      assert.deepStrictEqual(yield* RunFolder.readCheckpoints(files), [row(1)])
    }))

  it.effect("config.json: a missing file, a field that does not fit, and an older run's adam keys", () =>
    Effect.gen(function* () {
      const files = folder()
      assert.strictEqual((yield* Effect.flip(RunFolder.readConfig(files))).reason, "Missing")
      const config = JSON.parse(Fs.readFileSync(Path.join(import.meta.dirname, "fixtures", "run-folder-v1", "config.json"), "utf8"))
      Fs.writeFileSync(files.config, JSON.stringify({ ...config, groups: 0 }))
      const e = yield* Effect.flip(RunFolder.readConfig(files))
      assert.strictEqual(e.field, "groups")
      assert.match(e.message, new RegExp(`^${files.config} is not a run's config: field groups `))
      const { learningRate, weightDecay, gradClipNorm, ...adam } = config.adam
      Fs.writeFileSync(files.config, JSON.stringify({ ...config, adam: { ...adam, learning_rate: learningRate, weight_decay: weightDecay, grad_clip_norm: gradClipNorm } }))
      assert.deepStrictEqual((yield* RunFolder.readConfig(files)).adam, config.adam)
      // export and the report read only some fields, each optional
      Fs.writeFileSync(files.config, JSON.stringify({ name: "x", env: "math" }))
      assert.deepStrictEqual((yield* RunFolder.readConfigHints(files)).hints, { name: "x", env: "math" })
    }))

  it.effect("a moved run folder finds a checkpoint's state file in its own state/", () =>
    Effect.gen(function* () {
      const files = folder()
      Fs.mkdirSync(files.state)
      Fs.writeFileSync(Path.join(files.state, "step-3.ckpt"), "")
      assert.strictEqual(yield* RunFolder.statePath(files, row(3)), Path.join(files.state, "step-3.ckpt"))
      assert.strictEqual(yield* RunFolder.statePath(files, { ...row(3), path: "tinker://run/weights/step-3" }), "tinker://run/weights/step-3")
    }))
})

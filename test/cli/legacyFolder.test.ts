/**
 * A run folder written by an earlier version still reports, exports, evaluates and
 * resumes. `test/fixtures/run-folder-v1/` is `npx tsx run math --steps 6 --save-every 3
 * --eval-every 3 --eval-size 16` as gyre wrote it before the run folder had Schemas
 * (commit 3aa8838), trimmed to its newest checkpoint: its rollout rows have no problem,
 * its paths are those of the folder it was written in (`runs/legacy-fixture/...`).
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { evaluateModel } from "../../src/app/Evaluation.ts"
import { train } from "../../src/app/Training.ts"
import * as Export from "../../src/app/Export.ts"
import * as Report from "../../src/app/Report.ts"
import * as RunFolder from "../../src/folder/RunFolder.ts"

const FIXTURE = Path.join(import.meta.dirname, "..", "fixtures", "run-folder-v1")

/** A fresh copy of the fixture: every use below changes the folder. */
const copy = () => {
  const dir = Path.join(Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-legacy-")), "legacy-fixture")
  Fs.cpSync(FIXTURE, dir, { recursive: true })
  return dir
}

const lines = (file: string) => Fs.readFileSync(file, "utf8").trim().split("\n").map((l) => JSON.parse(l) as unknown)

describe("a run folder written before the run folder had Schemas", () => {
  it.effect("its files decode with this version's Schemas", () =>
    Effect.gen(function* () {
      const files = RunFolder.paths(FIXTURE)
      const config = yield* RunFolder.readConfig(files)
      assert.strictEqual(config.env, "math")
      assert.deepStrictEqual(config.trainer?.loraRank, 8)
      assert.deepStrictEqual((yield* RunFolder.readCheckpoints(files)).map((c) => c.step), [6])
      assert.deepStrictEqual((yield* RunFolder.readMetrics(files)).map((m) => m.step), [0, 1, 2, 3, 4, 5, 6])
      const rollouts = yield* RunFolder.readRollouts(files)
      assert.lengthOf(rollouts, 128)
      assert.isUndefined(rollouts[0]!.problem)
    }))

  it.effect("reports: the charts, and the rollout table's problem column shows each row's key", () =>
    Effect.gen(function* () {
      const dir = copy()
      const file = yield* Report.writeOrFail(dir)
      const html = Fs.readFileSync(file, "utf8")
      assert.include(html, "reward component: correct (weight 1)")
      assert.include(html, "held-out correct 0.063 (step 6)")
      assert.include(html, "<th>problem</th>")
      assert.include(html, `<code title="math/train/0/47">math/train/0/47</code>`)
    }))

  it.effect("exports its newest checkpoint, found in its state folder although the recorded path is elsewhere", () =>
    Effect.gen(function* () {
      const dir = copy()
      const out = Path.join(dir, "..", "adapter")
      const result = yield* Export.exportRun(dir, { out })
      assert.strictEqual(result.step, 6)
      assert.strictEqual(result.checkpoint, Path.join(dir, "state", "step-6.ckpt"))
      for (const f of result.files) assert.isTrue(Fs.statSync(f).size > 0, f)
      const config = JSON.parse(Fs.readFileSync(Path.join(out, "adapter_config.json"), "utf8"))
      assert.strictEqual(config.r, 8)
    }))

  it.effect("evaluates its checkpoint with eval --from (the env and settings from its config.json)", () =>
    Effect.gen(function* () {
      const dir = copy()
      const summary = yield* evaluateModel({ from: dir, size: 8 })
      assert.strictEqual(summary.checkpoint, "step-6")
      assert.strictEqual(summary.file, Path.join(dir, "eval.jsonl"))
      assert.strictEqual(summary.splits[0]!.problems, 8)
      assert.deepStrictEqual(summary.splits[0]!.episodes, [], "math is single-turn")
      const rows = lines(summary.file).map((r) => Schema.decodeUnknownSync(RunFolder.EvalRow)(r))
      assert.lengthOf(rows, 8)
      for (const r of rows) assert.strictEqual(r.checkpoint, "step-6")
    }))

  it.effect("resumes after its last checkpoint, and what it appends decodes", () =>
    Effect.gen(function* () {
      const dir = copy()
      const resumed = yield* train({ env: "math", resume: dir, steps: 7 })
      assert.deepStrictEqual(resumed.metrics.map((m) => m["step"]), [7])
      const files = RunFolder.paths(dir)
      assert.deepStrictEqual((yield* RunFolder.readMetrics(files)).map((m) => m.step), [0, 1, 2, 3, 4, 5, 6, 7])
      assert.deepStrictEqual((yield* RunFolder.readCheckpoints(files)).map((c) => c.step), [6, 7])
      const config = yield* RunFolder.readConfig(files)
      assert.strictEqual(config.steps, 7)
      assert.strictEqual(config.outDir, dir)
      // the rows of step 7 carry their problem; the older rows stay as they were
      const rollouts = yield* RunFolder.readRollouts(files)
      assert.isDefined(rollouts.find((r) => r.step === 7)?.problem)
      assert.isUndefined(rollouts.find((r) => r.step === 6)?.problem)
    }))
})

/**
 * GSPO over the wire: on a trainer that does not compute `gspo` itself, the runner trains
 * it as `CustomLoss.gspo` (a forward, then a linear surrogate through
 * `importance_sampling`). Checked against the embedded trainer's own `gspo`: one update
 * each from the same weights gives the same weights (the learner's log-probs after it),
 * with and without clipping; and a run on a trainer that hides its `gspo` (a test double
 * wrapping the embedded trainer) trains as the native run does.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { Local } from "../../src/backends/local/index.ts"
import { adamParams, type Datum, float32 } from "../../src/contract/Contract.ts"
import * as CustomLoss from "../../src/vocabulary/CustomLoss.ts"
import { aggregationWeights, forwardBackwardChunked } from "../../src/loss/MicroBatch.ts"
import * as RunLog from "../../src/folder/RunLog.ts"
import * as Runner from "../../src/Runner.ts"
import { Trainer } from "../../src/services/Trainer.ts"
import { Rng } from "../../src/backends/local/Rng.ts"
import { rlDatum, tinyConfig, tinyLora } from "../backends/local/helpers.ts"
import vowels, { quiet, TINY, toySettings } from "../envs/vowels.ts"

const tmp = () => fs.mkdtempSync(path.join(os.tmpdir(), "gyre-gspo-"))
const backend = () => Layer.fresh(Local.layer({ config: tinyConfig, lora: tinyLora, seed: 4, stateDir: tmp() }))

/** Test double: the embedded trainer, saying it computes no gspo (as a remote service would not), counting its forward calls. */
const forwards = { count: 0 }
const withoutGspo = (dir: string) =>
  Layer.effect(Trainer, Effect.gen(function* () {
    const t = yield* Trainer
    return Trainer.of({ ...t, losses: undefined, forward: (data, lossFn, options) => Effect.andThen(Effect.sync(() => forwards.count++), t.forward(data, lossFn, options)) })
  })).pipe(
    Layer.provideMerge(Layer.fresh(Local.layer({ config: TINY, seed: 0, stateDir: RunLog.paths(dir).state, lora: { rank: 4, alpha: 8, targets: ["q", "k", "v", "o", "w1", "w2"] } }))),
  )

const data = (() => {
  const rng = new Rng(21)
  return [rlDatum(rng, 4, 6), rlDatum(rng, 3, 9), rlDatum(rng, 6, 4)].map((d, k): Datum => ({
    ...d,
    lossFnInputs: { ...d.lossFnInputs, advantages: float32(d.lossFnInputs["advantages"]!.data.map((a) => (a === 0 ? 0 : [0.9, -1.3, 0.4][k]!))) },
  }))
})()

/** One update on fresh embedded weights, then the learner's log-probs of `data`. */
const afterUpdate = (train: Effect.Effect<unknown, unknown, Trainer>) =>
  Effect.gen(function* () {
    const trainer = yield* Trainer
    yield* train
    yield* trainer.optimStep(adamParams({ learningRate: 0.05 }))
    const out = yield* trainer.forward(data, "importance_sampling")
    return out.lossFnOutputs.map((o) => o.logprobs)
  }).pipe(Effect.provide(backend()))

describe("gspo as a custom loss", () => {
  for (const [label, config] of [["clipped at the paper's range", {}], ["unclipped", { clip_low_threshold: 0, clip_high_threshold: 100 }]] as const) {
    it.effect(`updates the weights as the embedded gspo does (sequence_mean weights; ${label})`, () =>
      Effect.gen(function* () {
        const weights = aggregationWeights(data, "gspo", { kind: "sequence_mean" })
        const native = yield* afterUpdate(forwardBackwardChunked(data, "gspo", { chunk: 0, weights, lossFnConfig: config }))
        const custom = yield* afterUpdate(CustomLoss.forwardBackward(data, CustomLoss.gspo(config, weights)))
        const untouched = yield* afterUpdate(Effect.void)
        let worst = 0
        let moved = 0
        native.forEach((row, k) => row.forEach((lp, i) => {
          worst = Math.max(worst, Math.abs(lp - custom[k]![i]!))
          moved = Math.max(moved, Math.abs(lp - untouched[k]![i]!))
        }))
        assert.isBelow(worst, 1e-4)
        if (label === "unclipped") assert.isAbove(moved, 1e-3, "the update moved the log-probs")
      }))
  }

  it.effect("a run on a trainer without gspo trains it as the custom loss, as the embedded gspo trains", () =>
    Effect.gen(function* () {
      const settings = (dir: string) => toySettings(dir, { steps: 3, loss: "gspo", lossConfig: { clip_low_threshold: 0, clip_high_threshold: 100 }, lossAggregation: { kind: "sequence_mean" }, evalEvery: 0 })
      const a = tmp()
      const native = yield* Runner.run(settings(a), vowels).pipe(Effect.provide(Layer.fresh(Local.layer({ config: TINY, seed: 0, stateDir: RunLog.paths(a).state, lora: { rank: 4, alpha: 8, targets: ["q", "k", "v", "o", "w1", "w2"] } }))), quiet)
      const b = tmp()
      const custom = yield* Runner.run(settings(b), vowels).pipe(Effect.provide(withoutGspo(b)), quiet)
      // the custom loss reads the learner's log-probs with one forward per step
      assert.strictEqual(forwards.count, 3)
      assert.deepStrictEqual(custom.map((r) => r["env/all/reward/total"]), native.map((r) => r["env/all/reward/total"]))
      custom.forEach((r, s) => assert.isBelow(Math.abs(r["train/loss"]! - native[s]!["train/loss"]!), 1e-4, `step ${s + 1}`))
    }))
})

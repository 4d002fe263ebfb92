/**
 * Loss aggregation by hand on the tiny embedded model. Each datum's gradient is measured
 * alone (one call: the token mean over that datum's active tokens, `g_d`), and the step's
 * gradient for each aggregation is then combined by hand from them:
 * - token_mean: `sum_d n_d g_d / N`
 * - sequence_mean: `1/S * sum_s (sum_{d in s} n_d g_d) / n_s` (a sample cut into two datums is one sequence)
 * - constant: `sum_d n_d g_d / C`
 * The runner's path (weights from `aggregationWeights`, scaled calls in 1, 2 or 4 chunks)
 * must give that gradient and report that loss, for ppo, dro (whose beta is per call) and
 * cross_entropy.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { Local } from "../../src/backends/local/index.ts"
import { Rng } from "../../src/backends/local/Rng.ts"
import type { Datum, LossFn, LossFnConfig } from "../../src/contract/Contract.ts"
import { activeCount } from "../../src/vocabulary/Datum.ts"
import { resolveLoss } from "../../src/loss/Loss.ts"
import { type Aggregation, aggregationWeights, forwardBackwardChunked } from "../../src/loss/MicroBatch.ts"
import { aggregationOf } from "../../src/run/Settings.ts"
import * as RunLog from "../../src/folder/RunLog.ts"
import * as Runner from "../../src/Runner.ts"
import { Trainer } from "../../src/services/Trainer.ts"
import { ceDatum, makeEngines, rlDatum } from "../backends/local/helpers.ts"
import vowels, { toySettings } from "../envs/vowels.ts"

type Grads = Record<string, Float32Array>

const rlBatch = (): Array<Datum> => {
  const rng = new Rng(21)
  // lengths differ a lot, so the three aggregations weigh tokens very differently
  return [[2, 3], [3, 11], [2, 6], [4, 2], [2, 9]].map(([P, T]) => rlDatum(rng, P!, T!, { zeroSome: true }))
}
const ceBatch = (): Array<Datum> => {
  const rng = new Rng(22)
  return [[2, 3], [3, 10], [2, 6], [3, 2], [2, 8]].map(([P, T], i) => ceDatum(rng, P!, T!, { weights: i % 2 === 0 }))
}
// datums 3 and 4 are two turns of one sample (an episode cut into one datum per turn)
const SEQUENCES = ["a", "b", "c", "d", "d"]

const combine = (parts: ReadonlyArray<readonly [number, Grads]>): Grads => {
  const out: Grads = {}
  for (const [c, g] of parts) {
    for (const [k, v] of Object.entries(g)) {
      const acc = (out[k] ??= new Float32Array(v.length))
      for (let i = 0; i < v.length; i++) acc[i] = acc[i]! + c * v[i]!
    }
  }
  return out
}

/** max |a - b| / max |b| over every tensor */
const relDiff = (a: Grads, b: Grads) => {
  let diff = 0
  let scale = 0
  for (const [k, v] of Object.entries(b)) {
    const x = a[k]!
    for (let i = 0; i < v.length; i++) {
      diff = Math.max(diff, Math.abs(x[i]! - v[i]!))
      scale = Math.max(scale, Math.abs(v[i]!))
    }
  }
  return diff / scale
}

/** The step's gradient and loss, computed by hand from each datum's own call. */
const byHand = (
  engine: Awaited<ReturnType<typeof makeEngines>>["trainer"],
  data: ReadonlyArray<Datum>,
  lossFn: LossFn,
  config: LossFnConfig,
  aggregation: Aggregation,
) => {
  const resolved = resolveLoss(lossFn, config)
  if (!resolved.ok) throw new Error(resolved.message)
  const n = data.map((d) => activeCount([d], lossFn))
  const own = data.map((d) => {
    engine.zeroGrad()
    const out = engine.run([d], resolved.value, { backward: true })
    return { grads: engine.gradients(), sum: out.metrics["loss:sum"]! }
  })
  engine.zeroGrad()
  const N = n.reduce((a, b) => a + b, 0)
  // the weight of each of datum d's tokens
  let w: Array<number>
  if (aggregation.kind === "token_mean") w = data.map(() => 1 / N)
  else if (aggregation.kind === "constant") w = data.map(() => 1 / aggregation.constant)
  else {
    const perSeq = new Map<string, number>()
    data.forEach((_, i) => perSeq.set(SEQUENCES[i]!, (perSeq.get(SEQUENCES[i]!) ?? 0) + n[i]!))
    const S = [...perSeq.values()].filter((x) => x > 0).length
    w = data.map((_, i) => 1 / (S * perSeq.get(SEQUENCES[i]!)!))
  }
  // g_d is the mean over d's n_d tokens: its tokens' summed gradient is n_d g_d
  const grads = combine(own.map((o, i) => [w[i]! * n[i]!, o.grads] as const))
  const loss = own.reduce((s, o, i) => s + w[i]! * o.sum, 0)
  return { grads, loss }
}

const cases: ReadonlyArray<readonly [string, () => Array<Datum>, LossFn, LossFnConfig]> = [
  ["ppo", rlBatch, "ppo", {}],
  ["dro", rlBatch, "dro", { beta: 0.3 }],
  ["cross_entropy", ceBatch, "cross_entropy", {}],
]
const aggregations: ReadonlyArray<Aggregation> = [{ kind: "token_mean" }, { kind: "sequence_mean" }, { kind: "constant", constant: 50 }]

describe("loss aggregation", () => {
  for (const [name, batch, lossFn, config] of cases) {
    for (const aggregation of aggregations) {
      it.effect(`${name}, ${aggregation.kind}: the gradient and loss of the by-hand combination, in 1, 2 and 4 chunks`, () =>
        Effect.gen(function* () {
          const engines = yield* Effect.promise(() => makeEngines({ seed: 3, randomB: true }))
          const services = yield* Local.makeServices(engines.trainer, engines.sampler, { modelName: "tiny", stateDir: "/nonexistent" })
          const data = batch()
          const expected = byHand(engines.trainer, data, lossFn, config, aggregation)
          const weights = aggregationWeights(data, lossFn, aggregation, SEQUENCES)
          assert.strictEqual(weights === undefined, aggregation.kind === "token_mean")
          for (const chunk of [0, 3, 2]) {
            engines.trainer.zeroGrad()
            const out = yield* forwardBackwardChunked(data, lossFn, { chunk, lossFnConfig: config, weights }).pipe(
              Effect.provideService(Trainer, services.trainer),
            )
            const got = engines.trainer.gradients()
            assert.isBelow(relDiff(got, expected.grads), 2e-5, `chunk ${chunk}`)
            assert.closeTo(out.loss, expected.loss, 1e-5 * Math.max(1, Math.abs(expected.loss)), `chunk ${chunk}`)
          }
          // the three aggregations really differ on this batch
          if (aggregation.kind !== "token_mean") {
            const tokenMean = byHand(engines.trainer, data, lossFn, config, { kind: "token_mean" })
            assert.isAbove(relDiff(tokenMean.grads, expected.grads), 0.05)
          }
          engines.trainer.dispose()
          engines.sampler.dispose()
          engines.model.dispose()
        }))
    }
  }

  it("weights by hand: token counts per sample, samples that train nothing count in no denominator", () => {
    const rng = new Rng(5)
    const data = [rlDatum(rng, 2, 4), rlDatum(rng, 2, 2), rlDatum(rng, 2, 3)]
    const n = data.map((d) => activeCount([d], "ppo"))
    // datums 0 and 1 are one sample; datum 2 another
    const w = aggregationWeights(data, "ppo", { kind: "sequence_mean" }, ["x", "x", "y"])!
    assert.deepStrictEqual(w, [1 / (2 * (n[0]! + n[1]!)), 1 / (2 * (n[0]! + n[1]!)), 1 / (2 * n[2]!)])
    assert.deepStrictEqual(aggregationWeights(data, "ppo", { kind: "constant", constant: 8 }), [1 / 8, 1 / 8, 1 / 8])
    assert.isUndefined(aggregationWeights(data, "ppo", { kind: "token_mean" }))
    // a sample with no active token: weight 0, and not counted in S
    const inactive = { ...data[2]!, lossFnInputs: { ...data[2]!.lossFnInputs, advantages: { ...data[2]!.lossFnInputs["advantages"]!, data: data[2]!.lossFnInputs["advantages"]!.data.map(() => 0) } } }
    const w2 = aggregationWeights([data[0]!, inactive], "ppo", { kind: "sequence_mean" })!
    assert.deepStrictEqual(w2, [1 / n[0]!, 0])
  })

  it("the default constant is samples per step x maxTokens (groups x maxTokens for SFT)", () => {
    const s = Runner.defaults("x", { groups: 3, groupSize: 4, lossAggregation: { kind: "constant" } })
    assert.deepStrictEqual(aggregationOf(s, 10), { kind: "constant", constant: 120 })
    assert.deepStrictEqual(aggregationOf({ ...s, sft: true }, 10), { kind: "constant", constant: 30 })
    assert.deepStrictEqual(aggregationOf({ ...s, lossAggregation: { kind: "constant", constant: 7 } }, 10), { kind: "constant", constant: 7 })
    assert.deepStrictEqual(aggregationOf(Runner.defaults("x")), { kind: "token_mean" })
  })

  /** Test double: the embedded trainer, recording every datum it is sent. */
  const recording = (dir: string, sent: Array<Datum>) =>
    Layer.effect(
      Trainer,
      Effect.gen(function* () {
        const inner = yield* Trainer
        return Trainer.of({
          ...inner,
          forwardBackward: (data, lossFn, options) => Effect.sync(() => sent.push(...data)).pipe(Effect.andThen(inner.forwardBackward(data, lossFn, options))),
        })
      }),
    ).pipe(
      Layer.provideMerge(Layer.fresh(Local.layer({ config: { vocabSize: 98, contextLength: 32, nLayers: 1, dModel: 32, nHeads: 2, mlpRatio: 2 }, seed: 0, stateDir: RunLog.paths(dir).state, lora: { rank: 4, alpha: 8, targets: ["q", "k", "v", "o", "w1", "w2"] } }))),
    )
  const quiet = Effect.provideService(Runner.Progress, { onStep: () => Effect.void, onPhase: () => Effect.void })

  for (const aggregation of [{ kind: "sequence_mean" }, { kind: "constant" }] as const) {
    it.effect(`the runner: ${aggregation.kind} scales each sample's advantages by hand, and config.json shows it`, () =>
      Effect.gen(function* () {
        const dir = Path.join(Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-aggregation-")), "r")
        const sent: Array<Datum> = []
        // micro-batches of 3: the scale of a datum is w_d * (active tokens of its call)
        const settings = toySettings(dir, { steps: 1, groups: 4, groupSize: 8, microBatch: 3, lossAggregation: aggregation })
        yield* Runner.run(settings, vowels).pipe(Effect.provide(recording(dir, sent)), quiet)
        const config = JSON.parse(Fs.readFileSync(RunLog.paths(dir).config, "utf8"))
        // Dr. GRPO's default divisor: 4 groups x 8 samples x 3 tokens, recorded
        assert.deepStrictEqual(config.lossAggregation, aggregation.kind === "constant" ? { kind: "constant", constant: 96 } : { kind: "sequence_mean" })
        // the trained samples, in the order the runner cuts their datums
        const rows = (yield* RunLog.readJsonl(RunLog.paths(dir).rollouts)).filter((r) => r["advantage"] !== 0)
        assert.isAbove(rows.length, 3)
        assert.strictEqual(sent.length, rows.length)
        const n = sent.map((d) => activeCount([d], "ppo"))
        const S = rows.length
        for (let from = 0; from < sent.length; from += 3) {
          const call = n.slice(from, from + 3).reduce((a, b) => a + b, 0)
          for (let d = from; d < Math.min(sent.length, from + 3); d++) {
            const w = aggregation.kind === "constant" ? 1 / 96 : 1 / (S * n[d]!)
            const adv = sent[d]!.lossFnInputs["advantages"]!.data
            const a = adv.find((x) => x !== 0)!
            assert.closeTo(a / (rows[d]!["advantage"] as number), w * call, 1e-5 * w * call, `datum ${d}`)
          }
        }
      }))
  }

  it.effect("a divisor given with another aggregation fails before any work, naming both flags", () =>
    Effect.gen(function* () {
      const dir = Path.join(Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-aggregation-")), "r")
      const error = yield* Runner.run(toySettings(dir, { steps: 1, lossAggregation: { kind: "sequence_mean", constant: 10 } }), vowels).pipe(
        Effect.provide(recording(dir, [])),
        quiet,
        Effect.flip,
      )
      assert.strictEqual(error.reason, "Settings")
      assert.include(error.message, "--loss-constant 10")
      assert.include(error.message, "--loss-aggregation sequence_mean")
      assert.isFalse(Fs.existsSync(RunLog.paths(dir).config))
    }))
})

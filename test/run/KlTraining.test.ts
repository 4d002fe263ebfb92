/**
 * The KL penalty at work on the embedded backend, in a small RL loop over the Trainer,
 * Sampler and Reference services, as the runner does it (group_std advantages, every
 * sample's tokens penalized): a tiny random-init model is rewarded for starting its
 * completion with one of 20 of its 99 tokens. With no penalty the policy drifts far from
 * the base; with a large coefficient (0.5, against advantages of about ±1) its KL to the
 * base stays bounded while the reward still rises.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Result } from "effect"
import * as Advantage from "../../src/vocabulary/Advantage.ts"
import { Local } from "../../src/backends/local/index.ts"
import { adamParams, type Datum as DatumT, modelInputFromTokens } from "../../src/contract/Contract.ts"
import * as D from "../../src/vocabulary/Datum.ts"
import * as KlPenalty from "../../src/loss/KlPenalty.ts"
import { Reference } from "../../src/services/Reference.ts"
import { Sampler } from "../../src/services/Sampler.ts"
import { Trainer } from "../../src/services/Trainer.ts"
import { tinyConfig, tinyLora } from "../backends/local/helpers.ts"

const prompts = [
  [1, 40, 41],
  [1, 50, 51, 52],
  [1, 60],
  [1, 70, 71],
]
const GROUP = 8
const STEPS = 40
/** the rewarded first tokens: 20 of the 99 */
const good = (t: number | undefined) => t !== undefined && t >= 10 && t < 30

interface Trace {
  readonly reward: Array<number>
  readonly klV1: Array<number>
  readonly klK3: Array<number>
}

const train = (coef: number) =>
  Effect.gen(function* () {
    const trainer = yield* Trainer
    const sampler = yield* Sampler
    const reference = yield* Reference
    yield* reference.check
    const trace: Trace = { reward: [], klV1: [], klK3: [] }
    for (let step = 0; step < STEPS; step++) {
      const groups = yield* Effect.forEach(prompts, (prompt, p) =>
        sampler.sample(modelInputFromTokens(prompt), { maxTokens: 3, temperature: 1, seed: 1000 * step + p }, { numSamples: GROUP }))
      const rewards = groups.map((g) => g.sequences.map((s) => (good(s.tokens[0]) ? 1 : 0)))
      const { advantages } = Advantage.compute(rewards, "group_std")
      const data: Array<DatumT> = []
      const masks: Array<Array<number>> = []
      for (let p = 0; p < prompts.length; p++) {
        const prompt = prompts[p]!
        groups[p]!.sequences.forEach((s, i) => {
          // every sample, zero-advantage ones too: the penalty reaches all sampled tokens
          data.push(D.rl({ prompt, completion: s.tokens, samplerLogprobs: s.logprobs, advantage: advantages[p]![i]! }))
          masks.push([...prompt.map(() => 0), ...s.tokens.map(() => 1)])
        })
      }
      const total = rewards.flat().reduce((a: number, b) => a + b, 0)
      const ref = yield* reference.logprobs(data.map((d) => d.modelInput))
      const out = Result.getOrThrow(KlPenalty.apply({ data, reference: ref, coef, masks }))
      trace.reward.push(total / (prompts.length * GROUP))
      trace.klV1.push(out.metrics[KlPenalty.METRICS.v1]!)
      trace.klK3.push(out.metrics[KlPenalty.METRICS.k3]!)
      const trained = out.data.filter((d) => d.lossFnInputs["advantages"]!.data.some((a) => a !== 0))
      if (trained.length === 0) continue
      yield* trainer.forwardBackward(trained, "importance_sampling")
      yield* trainer.optimStep(adamParams({ learningRate: 2e-2, gradClipNorm: 1 }))
      yield* trainer.saveWeightsForSampler(`step-${step + 1}`)
    }
    return trace
  }).pipe(
    Effect.provide(Layer.fresh(Local.layer({ config: tinyConfig, lora: tinyLora, seed: 11, stateDir: Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-kl-train-")) }))),
  )

const mean = (xs: ReadonlyArray<number>) => xs.reduce((a, b) => a + b, 0) / xs.length
const round = (xs: ReadonlyArray<number>) => xs.map((x) => Math.round(x * 1000) / 1000)

describe("KL penalty on the embedded backend", () => {
  it.effect(
    "a large coefficient keeps the policy near the base while the reward still rises; none lets it drift",
    () =>
      Effect.gen(function* () {
        const free = yield* train(0)
        const held = yield* train(0.5)
        const last = (xs: ReadonlyArray<number>) => mean(xs.slice(-5))
        const report = {
          free: { reward: round(free.reward), klV1: round(free.klV1), klK3: round(free.klK3) },
          held: { reward: round(held.reward), klV1: round(held.klV1), klK3: round(held.klK3) },
        }
        yield* Effect.logInfo(`KL traces: ${JSON.stringify(report)}`)
        // step 0 samples the base itself: policy and reference agree
        assert.isBelow(Math.abs(free.klV1[0]!), 1e-5)
        assert.isBelow(Math.abs(held.klV1[0]!), 1e-5)
        // without the penalty the policy learns and drifts
        assert.isAbove(last(free.reward), mean(free.reward.slice(0, 5)) + 0.3, JSON.stringify(report.free))
        // with it the reward still moves ...
        assert.isAbove(last(held.reward), mean(held.reward.slice(0, 5)) + 0.08, JSON.stringify(report.held))
        // ... and the KL to the base stays bounded, far below the unpenalized run's
        assert.isBelow(last(held.klK3), 0.75, JSON.stringify(report.held))
        assert.isBelow(last(held.klK3), 0.4 * last(free.klK3), JSON.stringify(report))
        assert.isBelow(last(held.klV1), 0.4 * last(free.klV1), JSON.stringify(report))
      }),
  )
})

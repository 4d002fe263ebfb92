/**
 * KL diagnostics: correct alignment of sampler and trainer logprobs reads ~0; a datum whose
 * rollout logprobs are shifted by one position reads large. Uses the real base model so
 * log-probabilities vary from token to token. Group fractions: worked cases by hand, and
 * a property that the four fractions partition the scored groups.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as fc from "fast-check"
import { modelInputFromTokens } from "../src/contract/Contract.ts"
import * as Datum from "../src/vocabulary/Datum.ts"
import { Local } from "../src/backends/local/index.ts"
import * as Metrics from "../src/metrics/Metrics.ts"
import { Sampler } from "../src/services/Sampler.ts"
import { encodePrompt, Tokenizer } from "../src/services/Tokenizer.ts"
import { Trainer } from "../src/services/Trainer.ts"

describe("Metrics.klSampleTrain", () => {
  it("is 0 for identical logprobs and positive for different ones", () => {
    const same = Metrics.klSampleTrain({ sampler: [-1, -2, -0.5], trainer: [-1, -2, -0.5] })
    assert.strictEqual(same["optim/kl_sample_train_v1"], 0)
    assert.strictEqual(same["optim/kl_sample_train_k3"], 0)
    assert.strictEqual(same["optim/is_ratio/mean"], 1)
    assert.strictEqual(same["optim/ess_over_n"], 1)
    const off = Metrics.klSampleTrain({ sampler: [-1, -1], trainer: [-2, -0.5] })
    assert.closeTo(off["optim/kl_sample_train_v1"]!, (1 - 0.5) / 2, 1e-12)
    assert.closeTo(off["optim/kl_sample_train_v2"]!, (0.5 * 1 + 0.5 * 0.25) / 2, 1e-12)
    assert.isAbove(off["optim/kl_sample_train_k3"]!, 0)
  })

  it("reports no clip fraction: the trainer reports its own, per loss", () => {
    // ratios far outside any clip range
    const out = Metrics.klSampleTrain({ sampler: [-5, -0.1], trainer: [-0.1, -5] })
    assert.notProperty(out, "optim/clip_fraction")
    assert.strictEqual(Metrics.klSampleTrain.length, 1)
  })

  it.effect("detects rollout logprobs shifted by one position", () =>
    Effect.gen(function* () {
      const tokenizer = yield* Tokenizer
      const sampler = yield* Sampler
      const trainer = yield* Trainer
      yield* trainer.saveWeightsForSampler("v0")
      const correct: Array<Parameters<typeof Datum.rl>[0]> = []
      for (const [a, b] of [[3, 4], [7, 8], [9, 2], [5, 5]] as const) {
        const prompt = yield* encodePrompt(tokenizer, `What is ${a} times ${b}?`)
        const out = yield* sampler.sample(modelInputFromTokens(prompt), { maxTokens: 6, temperature: 1, seed: a * 10 + b }, { numSamples: 8 })
        for (const s of out.sequences) correct.push({ prompt, completion: s.tokens, samplerLogprobs: s.logprobs, advantage: 1 })
      }
      const kl = (rows: typeof correct) =>
        Effect.gen(function* () {
          const data = rows.map(Datum.rl)
          const out = yield* trainer.forward(data, "importance_sampling")
          const s: Array<number> = []
          const p: Array<number> = []
          rows.forEach((r, i) => {
            const adv = data[i]!.lossFnInputs["advantages"]!.data
            const lp = data[i]!.lossFnInputs["logprobs"]!.data
            adv.forEach((a, t) => {
              if (a !== 0) {
                s.push(lp[t]!)
                p.push(out.lossFnOutputs[i]!.logprobs[t]!)
              }
            })
          })
          return Metrics.klSampleTrain({ sampler: s, trainer: p })["optim/kl_sample_train_v1"]!
        })
      const aligned = yield* kl(correct)
      // The classic bug: a Tinker-style datum (model_input = full[:-1]) read as a Loops one, so
      // every rollout logprob sits one position early relative to the tokens it belongs to.
      const shifted = correct.map((r) => ({
        ...r,
        prompt: r.prompt.slice(0, -1),
        completion: [r.prompt[r.prompt.length - 1]!, ...r.completion.slice(0, -1)],
      }))
      const misaligned = yield* kl(shifted)
      assert.isBelow(Math.abs(aligned), 1e-3, `aligned kl_v1 = ${aligned}`)
      assert.isAbove(Math.abs(misaligned), 0.1, `misaligned kl_v1 = ${misaligned}`)
    }).pipe(Effect.provide(Layer.fresh(Local.layer({ seed: 3, stateDir: "/tmp/gyre-kl-test" })))))
})

describe("Metrics divergence histogram and worst tokens", () => {
  it("counts sampler - trainer per fixed bin, by hand", () => {
    const edges = Metrics.DIVERGENCE_EDGES
    // d = s - p: -2 (bin 0), -0.3 ([-0.5, -0.2): bin 2), 0 and 0.0005 (the center bin [-0.001, 0.001)),
    // 0.001 (exactly an edge: [0.001, 0.01)), 0.7 ([0.5, 1)), 1 and 5 (the last bin, >= 1), NaN (no bin)
    const sampler = [-3, -1.3, -1, -1, -0.999, -0.3, 0, 4, NaN]
    const trainer = [-1, -1, -1, -1.0005, -1, -1, -1, -1, -1]
    const counts = Metrics.divergenceHistogram({ sampler, trainer })
    assert.strictEqual(counts.length, edges.length + 1)
    const expected = new Array(edges.length + 1).fill(0)
    expected[0] = 1
    expected[edges.indexOf(-0.2)] = 1
    expected[edges.indexOf(0.001)] = 2
    expected[edges.indexOf(0.01)] = 1
    expected[edges.indexOf(1)] = 1
    expected[edges.length] = 2
    assert.deepStrictEqual(counts, expected)
    assert.strictEqual(counts.reduce((a, b) => a + b, 0), sampler.length - 1)
  })

  it("names the k largest |sampler - trainer|, largest first", () => {
    const pairs = { sampler: [-1, -2, -0.5, -3, -1], trainer: [-1.1, -1, -0.5, -1, -0.9] }
    // |d| = 0.1, 1, 0, 2, 0.1
    assert.deepStrictEqual(Metrics.worstDivergent(pairs, 3), [3, 1, 0])
    assert.deepStrictEqual(Metrics.worstDivergent(pairs, 10), [3, 1, 0, 4, 2])
    assert.deepStrictEqual(Metrics.worstDivergent(pairs, 0), [])
  })
})

describe("Metrics.groupFractions", () => {
  const fractions = (groups: ReadonlyArray<ReadonlyArray<number | undefined>>) => {
    const f = Metrics.groupFractions(groups)
    // every fraction is always there: a missing one fails the test as NaN
    return [f["by_group/frac_mixed"], f["by_group/frac_all_good"], f["by_group/frac_all_bad"], f["by_group/frac_all_equal"]].map((v) => v ?? Number.NaN)
  }

  it("classifies against the batch's observed range: one of each", () => {
    // mixed, all at the top (1), all at the bottom (0), all equal in between (0.5)
    assert.deepStrictEqual(fractions([[0, 1], [1, 1], [0, 0], [0.5, 0.5]]), [0.25, 0.25, 0.25, 0.25])
  })

  it("does not call a positive reward good when nothing reaches the top", () => {
    // weight-0.1 style partial credit: 0.1 everywhere except one group at 0.2
    assert.deepStrictEqual(fractions([[0.1, 0.1], [0.1, 0.1], [0.1, 0.1], [0.2, 0.2]]), [0, 0.25, 0.75, 0])
  })

  it("calls nothing good or bad when the whole batch has one reward value", () => {
    // nothing correct anywhere: the old rule (reward > 0 is good) read 1.0 all-good for 0.1s
    assert.deepStrictEqual(fractions([[0.1, 0.1], [0.1, 0.1], [0.1, 0.1], [0.1, 0.1]]), [0, 0, 0, 1])
    assert.deepStrictEqual(fractions([[0, 0], [0, 0]]), [0, 0, 0, 1])
  })

  it("works for negative rewards", () => {
    assert.deepStrictEqual(fractions([[-1, -1], [-3, -3], [-2, -2], [-3, -1]]), [0.25, 0.25, 0.25, 0.25])
  })

  it("leaves masked samples out, and groups with no unmasked sample out of the denominator", () => {
    assert.deepStrictEqual(fractions([[undefined, undefined], [1, undefined], [0, 0]]), [0, 0.5, 0.5, 0])
    assert.deepStrictEqual(fractions([[undefined], [undefined]]), [0, 0, 0, 0])
    assert.deepStrictEqual(fractions([]), [0, 0, 0, 0])
  })

  it("treats rewards within rounding as equal", () => {
    assert.deepStrictEqual(fractions([[1, 1 + 1e-12], [0, 0]]), [0, 0.5, 0.5, 0])
    assert.deepStrictEqual(fractions([[1000, 1000 + 1e-7], [0, 0]]), [0, 0.5, 0.5, 0])
  })

  it("partitions the scored groups: the four fractions sum to 1", () => {
    const reward = fc.oneof(fc.constant(undefined), fc.constantFrom(-1, 0, 0.5, 1), fc.double({ min: -10, max: 10, noNaN: true }))
    fc.assert(
      fc.property(fc.array(fc.array(reward, { minLength: 1, maxLength: 6 }), { minLength: 1, maxLength: 8 }), (groups) => {
        const scored = groups.filter((g) => g.some((v) => v !== undefined)).length
        const sum = fractions(groups).reduce((a, b) => a + b, 0)
        if (scored === 0) assert.strictEqual(sum, 0)
        else assert.closeTo(sum, 1, 1e-12)
        for (const f of fractions(groups)) assert.isTrue(f >= 0 && f <= 1)
      }),
    )
  })
})

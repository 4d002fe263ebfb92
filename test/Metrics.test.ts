/**
 * KL diagnostics: correct alignment of sampler and trainer logprobs reads ~0; a datum whose
 * rollout logprobs are shifted by one position reads large. Uses the real base model so
 * log-probabilities vary from token to token.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { modelInputFromTokens } from "../src/Contract.ts"
import * as Datum from "../src/Datum.ts"
import { Local } from "../src/backends/local/index.ts"
import * as Metrics from "../src/Metrics.ts"
import { Sampler } from "../src/Sampler.ts"
import { encodePrompt, Tokenizer } from "../src/Tokenizer.ts"
import { Trainer } from "../src/Trainer.ts"

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
    assert.strictEqual(off["optim/clip_fraction"], 1)
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

/**
 * The embedded backend's Reference: log-probs under the base model with the adapter
 * off, in-process and on worker threads. Before any training they equal the sampler's;
 * after a published update the sampler moves and the reference does not.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { adamParams, type Datum, float32, modelInputFromTokens } from "../../../src/contract/Contract.ts"
import { Local } from "../../../src/backends/local/index.ts"
import { Reference } from "../../../src/services/Reference.ts"
import { Sampler } from "../../../src/services/Sampler.ts"
import { Trainer } from "../../../src/services/Trainer.ts"
import { maxAbsDiff, tinyConfig, tinyLora } from "./helpers.ts"

const prompt = [1, 40, 41, 42, 43]
const sequences = [
  [...prompt, 60, 61, 62, 2],
  [...prompt, 70, 71],
  [1, 50],
]

const rlDatum = (completion: ReadonlyArray<number>, logprobs: ReadonlyArray<number>, advantage: number): Datum => {
  const tokens = [...prompt, ...completion]
  return {
    modelInput: modelInputFromTokens(tokens),
    lossFnInputs: {
      logprobs: float32(tokens.map((_, i) => (i < prompt.length ? 0 : logprobs[i - prompt.length]!))),
      advantages: float32(tokens.map((_, i) => (i < prompt.length ? 0 : advantage))),
    },
  }
}

/** Reference == sampler at the base; one large published update moves the sampler only. */
const program = Effect.gen(function* () {
  const reference = yield* Reference
  const sampler = yield* Sampler
  const trainer = yield* Trainer
  yield* reference.check
  const inputs = sequences.map(modelInputFromTokens)
  const ref0 = yield* reference.logprobs(inputs)
  assert.strictEqual(ref0.length, sequences.length)
  for (let i = 0; i < sequences.length; i++) {
    assert.strictEqual(ref0[i]!.length, sequences[i]!.length)
    assert.strictEqual(ref0[i]![0], 0)
    const lps = yield* sampler.computeLogprobs(inputs[i]!)
    assert.strictEqual(maxAbsDiff(ref0[i]!, lps), 0, "at the base, the reference is the sampler")
  }
  // one large update on sampled completions, published to the sampler
  const first = yield* sampler.sample(modelInputFromTokens(prompt), { maxTokens: 4, temperature: 1, seed: 5 }, { numSamples: 8 })
  yield* trainer.forwardBackward(first.sequences.map((s, i) => rlDatum(s.tokens, s.logprobs, i % 2 === 0 ? 1 : -1)), "importance_sampling")
  const step = yield* trainer.optimStep(adamParams({ learningRate: 0.2 }))
  yield* trainer.saveWeightsForSampler(`step-${step.version}`)
  const ref1 = yield* reference.logprobs(inputs)
  let moved = 0
  for (let i = 0; i < sequences.length; i++) {
    assert.strictEqual(maxAbsDiff(ref1[i]!, ref0[i]!), 0, "the reference does not follow the adapter")
    moved = Math.max(moved, maxAbsDiff(yield* sampler.computeLogprobs(inputs[i]!), ref1[i]!))
  }
  assert.isAbove(moved, 1e-3, "the sampler serves the updated adapter")
  // bad input names the sequence
  const bad = yield* Effect.flip(reference.logprobs([inputs[0]!, modelInputFromTokens([1, 10_000])]))
  assert.strictEqual(bad.reason, "InvalidInput")
  assert.include(bad.message, "inputs[1]")
  return ref0
})

const options = (workers: boolean) => ({
  config: tinyConfig,
  lora: tinyLora,
  seed: 4,
  workers,
  stateDir: Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-reference-")),
})

describe("Reference on the embedded backend", () => {
  it.effect("in-process and on worker threads: the base model with the adapter off, the same numbers", () =>
    Effect.gen(function* () {
      const inProcess = yield* program.pipe(Effect.provide(Layer.fresh(Local.layer(options(false)))))
      const threaded = yield* program.pipe(Effect.provide(Layer.fresh(Local.layer(options(true)))))
      for (let i = 0; i < sequences.length; i++) assert.isBelow(maxAbsDiff(inProcess[i]!, threaded[i]!), 1e-6)
    }))
})

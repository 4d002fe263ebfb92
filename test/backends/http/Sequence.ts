/**
 * An RL-like sequence over the Trainer and Sampler services, shared by the HTTP
 * tests: publish, sample groups pinned to the published version, score, build
 * importance-sampling datums, forward_backward, optim_step, publish again.
 */
import { Effect } from "effect"
import { adamParams, type Datum, modelInputFromTokens } from "../../../src/contract/Contract.ts"
import * as D from "../../../src/vocabulary/Datum.ts"
import { Sampler } from "../../../src/services/Sampler.ts"
import { Trainer } from "../../../src/services/Trainer.ts"

export interface SequenceOptions {
  readonly steps: number
  readonly groups: number
  readonly groupSize: number
  readonly maxTokens: number
  readonly learningRate: number
  /** the token the trivial reward counts */
  readonly rewarded: number
  readonly prompts: ReadonlyArray<ReadonlyArray<number>>
  readonly probe: ReadonlyArray<number>
  readonly concurrency?: number
}

export interface SequenceResult {
  readonly losses: Array<number>
  readonly versions: Array<number>
  readonly sampleVersions: Array<number>
  readonly samples: Array<Array<number>>
  readonly finalLogprobs: Array<number>
  readonly forwardLogprobs: Array<number>
  readonly info: { readonly version: number }
}

export const rlSequence = (o: SequenceOptions) =>
  Effect.gen(function* () {
    const trainer = yield* Trainer
    const sampler = yield* Sampler
    const losses: Array<number> = []
    const versions: Array<number> = []
    const sampleVersions: Array<number> = []
    const samples: Array<Array<number>> = []
    let pub = yield* trainer.saveWeightsForSampler("step-0")
    for (let step = 0; step < o.steps; step++) {
      const groups = yield* Effect.forEach(
        Array.from({ length: o.groups }, (_, g) => g),
        (g) => {
          const prompt = o.prompts[g % o.prompts.length]!
          return Effect.map(
            sampler.sample(
              modelInputFromTokens(prompt),
              { maxTokens: o.maxTokens, temperature: 1, seed: 1000 * step + g },
              { numSamples: o.groupSize, minPolicyVersion: pub.version, affinityKey: `step-${step}/group-${g}` },
            ),
            (result) => ({ prompt, result }),
          )
        },
        { concurrency: o.concurrency ?? 4 },
      )
      const data: Array<Datum> = []
      for (const { prompt, result } of groups) {
        sampleVersions.push(result.policyVersion)
        const rewards = result.sequences.map((s) => s.tokens.filter((t) => t === o.rewarded).length / Math.max(1, s.tokens.length))
        const mean = rewards.reduce((a, b) => a + b, 0) / rewards.length
        const std = Math.sqrt(rewards.reduce((a, b) => a + (b - mean) ** 2, 0) / rewards.length)
        result.sequences.forEach((s, i) => {
          samples.push([...s.tokens])
          if (s.tokens.length === 0) return
          // float32, as the wire's tensors carry it (protobuf's as float32 bytes), so a run in process and one over HTTP train on the same datums
          const advantage = std === 0 ? 0 : Math.fround((rewards[i]! - mean) / std)
          data.push(D.rl({ prompt, completion: s.tokens, samplerLogprobs: s.logprobs, advantage }))
        })
      }
      const fb = yield* trainer.forwardBackward(data, "importance_sampling")
      losses.push(fb.metrics["loss"]!)
      const opt = yield* trainer.optimStep(adamParams({ learningRate: o.learningRate }))
      versions.push(opt.version)
      pub = yield* trainer.saveWeightsForSampler(`step-${step + 1}`)
    }
    const finalLogprobs = yield* sampler.computeLogprobs(modelInputFromTokens(o.probe), { minPolicyVersion: pub.version })
    const fwd = yield* trainer.forward([D.sft({ prompt: o.probe.slice(0, 1), completion: o.probe.slice(1) })], "cross_entropy")
    const info = yield* trainer.info
    return {
      losses,
      versions,
      sampleVersions,
      samples,
      finalLogprobs,
      forwardLogprobs: [...fwd.lossFnOutputs[0]!.logprobs],
      info,
    } satisfies SequenceResult
  })

export const toySequence: SequenceOptions = {
  steps: 3,
  groups: 4,
  groupSize: 4,
  maxTokens: 6,
  learningRate: 0.5,
  rewarded: 3,
  prompts: [
    [1, 2, 5],
    [4, 7],
    [9, 8, 6, 5],
    [11, 3],
  ],
  probe: [1, 2, 3, 3, 4, 5],
}

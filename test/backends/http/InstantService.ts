/**
 * Test double: a Trainer + Sampler that answer at once, written from the `TrainerShape`
 * and `SamplerShape` references, for measuring what the client costs (and for checking
 * what reaches the trainer). Sampling answers come from a script over the prompt's
 * tokens; log-probs are made up from the token and its position (float32, as the wire
 * carries them), so every number is a pure function of the inputs. `forwardBackward`
 * records the datums it gets (unless `record: false`: a long benchmark would keep every
 * step's datums).
 */
import { Effect } from "effect"
import type { Datum, ForwardBackwardResult, ModelInput, SampleResult } from "../../../src/contract/Contract.ts"
import { Sampler, type SamplerShape } from "../../../src/services/Sampler.ts"
import { Trainer, type TrainerShape } from "../../../src/services/Trainer.ts"

/** One scripted completion: its tokens, and whether it ended at a stop (else at EOS, included in `tokens`). */
export interface Scripted {
  readonly tokens: ReadonlyArray<number>
  readonly stopReason: "stop" | "length"
}

/** The completion for sample `index` of a request with this prompt and seed. */
export type Script = (prompt: ReadonlyArray<number>, index: number, seed: number) => Scripted

const fakeLogprob = (token: number, position: number): number => Math.fround(-(((token * 31 + position * 7) % 97) + 1) / 64)

const tokensOf = (input: ModelInput): Array<number> => {
  const out: Array<number> = []
  for (const c of input.chunks) for (const t of c.tokens) out.push(t)
  return out
}

export const makeInstant = (options: { readonly script: Script; readonly modelName?: string; readonly maxSequenceLength?: number; readonly record?: boolean }) => {
  let version = 0
  const recorded: Array<{ readonly lossFn: string; readonly data: ReadonlyArray<Datum> }> = []
  const forward = (data: ReadonlyArray<Datum>): ForwardBackwardResult => ({
    lossFnOutputs: data.map((d) => {
      // the targets, or (a datum sent without them) the input shifted by one
      const targets = d.lossFnInputs["target_tokens"]?.data ?? tokensOf(d.modelInput).slice(1)
      const n = d.lossFnInputs["advantages"]?.data.length ?? targets.length
      return { logprobs: Array.from({ length: n }, (_, j) => fakeLogprob(targets[j] ?? 0, j)) }
    }),
    metrics: { "loss:sum": data.length },
  })
  const trainer: TrainerShape = {
    forwardBackward: (data, lossFn) =>
      Effect.sync(() => {
        if (options.record !== false) recorded.push({ lossFn, data })
        return forward(data)
      }),
    forward: (data) => Effect.sync(() => forward(data)),
    optimStep: () => Effect.sync(() => ({ version: ++version, metrics: {} })),
    saveWeightsForSampler: (name) => Effect.sync(() => ({ version, path: `tinker://instant/sampler_weights/${name}` })),
    saveState: (name) => Effect.succeed({ path: `tinker://instant/weights/${name}` }),
    loadState: () => Effect.void,
    info: Effect.sync(() => ({ modelName: options.modelName ?? "instant", loraRank: 8, version, maxSequenceLength: options.maxSequenceLength ?? 32768 })),
  }
  const sampler: SamplerShape = {
    sample: (prompt, params, sampleOptions) =>
      Effect.sync((): SampleResult => {
        const tokens = tokensOf(prompt)
        const sequences = Array.from({ length: sampleOptions.numSamples }, (_, i) => {
          const s = options.script(tokens, i, params.seed ?? 0)
          const cut = s.tokens.length > params.maxTokens ? s.tokens.slice(0, params.maxTokens) : s.tokens
          return { tokens: [...cut], logprobs: cut.map((t, j) => fakeLogprob(t, j)), stopReason: cut.length < s.tokens.length ? ("length" as const) : s.stopReason }
        })
        return { sequences, policyVersion: version }
      }),
    computeLogprobs: (input) => Effect.sync(() => tokensOf(input).map((t, j) => (j === 0 ? 0 : fakeLogprob(t, j)))),
    version: Effect.sync(() => version),
  }
  return {
    trainer,
    sampler,
    recorded,
    provide: <A, E, R>(effect: Effect.Effect<A, E, R>) => effect.pipe(Effect.provideService(Trainer, trainer), Effect.provideService(Sampler, sampler)),
  }
}

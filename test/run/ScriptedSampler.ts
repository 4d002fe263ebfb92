/**
 * Test double: a Sampler that answers from a script instead of a model. `reply(promptText,
 * sampleIndex)` gives each completion's text; a completion is cut at the first stop
 * string (kept, as the real sampler keeps it) or ends with EOS. Log-probs are made up but
 * distinct per position (-0.01 x (position + 1)), so tests can see which ones a Datum carries.
 */
import { Effect } from "effect"
import * as CharTokenizer from "../../src/backends/local/CharTokenizer.ts"
import { modelInputTokens, type SampleResult } from "../../src/contract/Contract.ts"
import type * as Env from "../../src/vocabulary/Env.ts"
import { ContextLength, playGroup } from "../../src/run/Rollout.ts"
import { Sampler } from "../../src/services/Sampler.ts"
import { Tokenizer } from "../../src/services/Tokenizer.ts"

export const scriptedSampler = (reply: (promptText: string, index: number) => string) => {
  const calls: Array<{ readonly prompt: string; readonly maxTokens: number; readonly temperature: number }> = []
  const service = Sampler.of({
    sample: (prompt, params, options) =>
      Effect.sync((): SampleResult => {
        const tokens = modelInputTokens(prompt)
        const text = CharTokenizer.decodeChars(tokens)
        calls.push({ prompt: text, maxTokens: params.maxTokens, temperature: params.temperature })
        const sequences = Array.from({ length: options.numSamples }, (_, i) => {
          let out = reply(text, i)
          let stopped = false
          for (const s of params.stop ?? []) {
            if (typeof s !== "string") continue
            const at = out.indexOf(s)
            if (at >= 0) {
              out = out.slice(0, at + s.length)
              stopped = true
            }
          }
          const encoded = CharTokenizer.encodeChars(out)
          if (!("ids" in encoded)) throw new Error(`cannot encode ${out}`)
          let ids = stopped ? encoded.ids : [...encoded.ids, CharTokenizer.EOS]
          let stopReason: "stop" | "length" = "stop"
          if (ids.length > params.maxTokens) {
            ids = ids.slice(0, params.maxTokens)
            stopReason = "length"
          }
          return { tokens: ids, logprobs: ids.map((_, j) => -0.01 * (j + 1)), stopReason }
        })
        return { sequences, policyVersion: options.minPolicyVersion ?? 0 }
      }),
    computeLogprobs: () => Effect.die("not scripted"),
    version: Effect.succeed(0),
  })
  return { service, calls }
}

/** Character-tokenizer ids of `text` (it must be printable ASCII). */
export const encode = (text: string): Array<number> => {
  const e = CharTokenizer.encodeChars(text)
  if (!("ids" in e)) throw new Error(`not encodable: ${JSON.stringify(text)}`)
  return e.ids
}

/**
 * Plays one episode (one sample) of `env` on `task` with the character tokenizer and the
 * given sampler (usually a scripted one): prompt `BOS ++ prompt`, seed 1, temperature 1.
 */
export const playOne = (options: {
  readonly env: Env.AnyEnv
  readonly task: Env.Task<unknown>
  readonly prompt: string
  readonly maxTokens: number
  readonly sampler: Sampler["Service"]
  readonly contextLength?: number
}) =>
  playGroup({
    env: options.env,
    task: options.task,
    promptTokens: [CharTokenizer.BOS, ...encode(options.prompt)],
    sampling: { maxTokens: options.maxTokens, temperature: 1, seed: 1 },
    numSamples: 1,
    affinityKey: "k",
    version: 0,
    step: 0,
  }).pipe(
    Effect.provideService(Tokenizer, CharTokenizer.make()),
    Effect.provideService(Sampler, options.sampler),
    Effect.provideService(ContextLength, options.contextLength ?? 4096),
  )

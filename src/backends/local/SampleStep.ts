/**
 * One decoding step of the embedded sampler's batch: each unfinished row draws a token
 * (`SampleRow.sampleRow`), records its log-probs, and stops at EOS, a stop token, a stop
 * string (which may span tokens) or its token limit.
 *
 * @since 0.1.0
 */
import type { SamplingParams, StopReason } from "../../Contract.ts"
import { decodeChars, EOS } from "./CharTokenizer.ts"
import { logprobAt } from "./LogSoftmax.ts"
import type { FinishedRow } from "./PrefixCache.ts"
import type { Rng } from "./Rng.ts"
import { sampleRow } from "./SampleRow.ts"

/** A row being sampled: its tokens so far, their log-probs, its text (for stop strings) and whether it stopped. @since 0.1.0 @category models */
export type BatchRow = FinishedRow & { logprobs: Array<number>; text: string; done: boolean; stop: StopReason }

/** Per request (by index): when it stops, and whether finished rows are kept for a next turn. @since 0.1.0 @category models */
export interface StepRules {
  readonly keep: boolean
  readonly plain: ReadonlyArray<boolean>
  readonly stopStrings: ReadonlyArray<ReadonlyArray<string>>
  readonly stopIds: ReadonlyArray<ReadonlySet<number>>
  readonly limit: ReadonlyArray<number>
}

/**
 * One sampling step of a batch: every unfinished row draws its next token from its
 * logits row (`rows[r]` samples for request `rowReq[r]`) and checks its stops.
 * @since 0.1.0 @category combinators
 */
export const sampleStep = (
  requests: ReadonlyArray<{ readonly params: SamplingParams; readonly rng: Rng }>,
  rowReq: ReadonlyArray<number>,
  rows: ReadonlyArray<BatchRow>,
  logits: Float32Array,
  V: number,
  rules: StepRules,
): void => {
  const { keep, plain, stopStrings, stopIds, limit } = rules
  for (let r = 0; r < rows.length; r++) {
    const row = rows[r]!
    if (row.done) continue
    const j = rowReq[r]!
    const g = requests[j]!
    const { token, logprob } = sampleRow(logits, r * V, V, g.params, g.rng)
    row.tokens.push(token)
    row.logprobs.push(logprob)
    // the model's log-prob (temperature 1): the sampled one where that is what was sampled from
    if (keep) row.modelLogprobs.push(plain[j] ? logprob : logprobAt(logits, r * V, V, token))
    if (token === EOS || stopIds[j]!.has(token)) {
      row.done = true
      row.stop = "stop"
    } else if (stopStrings[j]!.length > 0) {
      // a stop string may span tokens: look for one that ends in the new token's text
      const before = row.text.length
      row.text += decodeChars([token])
      if (stopStrings[j]!.some((s) => row.text.indexOf(s, Math.max(0, before - s.length + 1)) >= 0)) {
        row.done = true
        row.stop = "stop"
      }
    }
    if (!row.done && row.tokens.length >= limit[j]!) row.done = true
    if (keep && row.done) row.next = logits.slice(r * V, (r + 1) * V)
  }
}

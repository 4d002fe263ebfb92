/**
 * One decoding step of the embedded sampler's batch: each unfinished row draws a token
 * (`SampleRow.sampleRow`), records its log-probs, and stops at EOS, a stop token, a stop
 * string (which may span tokens) or its token limit. Each row carries its request's
 * rules (`RequestRules`: parameters, random stream, stops, limit).
 *
 * @since 0.1.0
 */
import type { SamplingParams, StopReason } from "../../contract/Contract.ts"
import { decodeChars, EOS } from "./CharTokenizer.ts"
import { logprobAt } from "./LogSoftmax.ts"
import type { FinishedRow } from "./PrefixCache.ts"
import type { Rng } from "./Rng.ts"
import { sampleRow } from "./SampleRow.ts"

/** What a request's rows are sampled and stopped by. @since 0.1.0 @category models */
export interface RequestRules {
  readonly params: SamplingParams
  /** the request's own random stream, shared by its rows */
  readonly rng: Rng
  /** whether it samples from the model's own distribution (its log-prob is then the model's) */
  readonly plain: boolean
  readonly stopStrings: ReadonlyArray<string>
  readonly stopIds: ReadonlySet<number>
  /** most tokens a row samples */
  readonly limit: number
}

/**
 * The rules of a request that may sample `room` tokens before the context is full.
 * @since 0.1.0 @category constructors
 */
export const rulesOf = (request: { readonly params: SamplingParams; readonly rng: Rng }, room: number, V: number): RequestRules => {
  const { params, rng } = request
  const topK = params.topK ?? 0
  return {
    params,
    rng,
    plain: params.temperature === 1 && (topK === 0 || topK >= V) && (params.topP ?? 1) >= 1,
    stopStrings: (params.stop ?? []).filter((s): s is string => typeof s === "string"),
    stopIds: new Set((params.stop ?? []).filter((s): s is number => typeof s === "number")),
    limit: Math.min(params.maxTokens, room),
  }
}

/** A row being sampled: its request's rules, its tokens so far, their log-probs, its text (for stop strings) and whether it stopped. @since 0.1.0 @category models */
export type BatchRow = FinishedRow & { readonly rules: RequestRules; logprobs: Array<number>; text: string; done: boolean; stop: StopReason }

/** A row of `rules`' request before its first token. @since 0.1.0 @category constructors */
export const newRow = (rules: RequestRules): BatchRow => ({
  rules,
  tokens: [],
  logprobs: [],
  modelLogprobs: [],
  next: undefined,
  text: "",
  done: false,
  stop: "length",
})

/**
 * One sampling step of a batch: every unfinished row draws its next token from its
 * logits row (`rows[r]` samples from row r) and checks its stops. With `keep`, rows
 * record their model log-probs and, once done, the logits of their last token (for a
 * next turn).
 * @since 0.1.0 @category combinators
 */
export const sampleStep = (rows: ReadonlyArray<BatchRow>, logits: Float32Array, V: number, keep: boolean): void => {
  for (let r = 0; r < rows.length; r++) {
    const row = rows[r]!
    if (row.done) continue
    const { params, rng, plain, stopStrings, stopIds, limit } = row.rules
    const { token, logprob } = sampleRow(logits, r * V, V, params, rng)
    row.tokens.push(token)
    row.logprobs.push(logprob)
    // the model's log-prob (temperature 1): the sampled one where that is what was sampled from
    if (keep) row.modelLogprobs.push(plain ? logprob : logprobAt(logits, r * V, V, token))
    if (token === EOS || stopIds.has(token)) {
      row.done = true
      row.stop = "stop"
    } else if (stopStrings.length > 0) {
      // a stop string may span tokens: look for one that ends in the new token's text
      const before = row.text.length
      row.text += decodeChars([token])
      if (stopStrings.some((s) => row.text.indexOf(s, Math.max(0, before - s.length + 1)) >= 0)) {
        row.done = true
        row.stop = "stop"
      }
    }
    if (!row.done && row.tokens.length >= limit) row.done = true
    if (keep && row.done) row.next = logits.slice(r * V, (r + 1) * V)
  }
}

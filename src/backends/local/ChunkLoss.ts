/**
 * The loss of one trainer call, micro-batch by micro-batch: each datum prepared
 * (targets, sampler log-probs, advantages, weights per position), the data cut into
 * micro-batches of similar lengths, and per micro-batch the learner's log-probs, the loss
 * terms, top-k and dloss/dlogits read off the logits. A non-finite loss term or gradient
 * throws `NonFiniteError` naming the datum and position.
 *
 * @since 0.1.0
 */
import type { Datum, LossFnOutput, TopK } from "../../contract/Contract.ts"
import { modelInputTokens } from "../../contract/Contract.ts"
import { isActive, isClipped, needsSequence, type ResolvedLoss, sequenceOf, tokenLoss } from "../../loss/Loss.ts"
import { NonFiniteError } from "./Errors.ts"
import { rowLse } from "./LogSoftmax.ts"

/** One datum, read for the loss. @since 0.1.0 @category models */
export interface Prepared {
  readonly index: number
  readonly tokens: Array<number>
  /** per position (length L, checked by `prepare`): target id or -100, sampler logprob, advantage, weight */
  readonly target: Array<number>
  readonly q: ArrayLike<number> | undefined
  readonly adv: ArrayLike<number> | undefined
  readonly weight: ArrayLike<number> | undefined
}

/** What a call adds up over its micro-batches, in order. @since 0.1.0 @category models */
export interface CallTotals {
  readonly outputs: Array<LossFnOutput>
  lossSum: number
  clipped: number
}

/** Reads datum number `index` for the loss. @since 0.1.0 @category constructors */
export const prepare = (d: Datum, index: number): Prepared => {
  const tokens = modelInputTokens(d.modelInput)
  const inputs = d.lossFnInputs
  const target = inputs["target_tokens"] ? inputs["target_tokens"].data.map((x) => x) : tokens.slice()
  const prepared: Prepared = {
    index,
    tokens: [...tokens],
    target,
    q: inputs["logprobs"]?.data,
    adv: inputs["advantages"]?.data,
    weight: inputs["weights"]?.data,
  }
  // the loss reads every per-position input at every position (`checkData` refuses other data before any work)
  for (const [name, a] of [["target_tokens", target], ["logprobs", prepared.q], ["advantages", prepared.adv], ["weights", prepared.weight]] as const) {
    if (a && a.length !== tokens.length) throw new Error(`data[${index}]: lossFnInputs.${name} has ${a.length} values for ${tokens.length} tokens`)
  }
  return prepared
}

/** Micro-batches of similar lengths, each at most `maxBatchTokens` padded tokens (or one datum). @since 0.1.0 @category combinators */
export const chunksOf = (prepared: ReadonlyArray<Prepared>, maxBatchTokens: number): Array<Array<Prepared>> => {
  const order = prepared.slice().sort((a, b) => a.tokens.length - b.tokens.length)
  const chunks: Array<Array<Prepared>> = []
  let cur: Array<Prepared> = []
  for (const p of order) {
    const L = Math.max(p.tokens.length, ...cur.map((c) => c.tokens.length))
    if (cur.length > 0 && (cur.length + 1) * L > maxBatchTokens) {
      chunks.push(cur)
      cur = []
    }
    cur.push(p)
  }
  if (cur.length > 0) chunks.push(cur)
  return chunks
}

/** The active positions of a micro-batch. @since 0.1.0 @category combinators */
export const activeIn = (chunk: ReadonlyArray<Prepared>, loss: ResolvedLoss): number => {
  let n = 0
  for (const c of chunk) {
    // per-position inputs have the tokens' length (`prepare`)
    for (let i = 1; i < c.tokens.length; i++) {
      if (isActive(loss.lossFn, i, c.target[i]!, c.weight ? c.weight[i]! : 1, c.adv ? c.adv[i]! : 0)) n++
    }
  }
  return n
}

/**
 * Reads a micro-batch's logits ([B·L, V], row b the datum `chunk[b]` padded to L): each
 * datum's log-probs (and top-k) into `totals.outputs`, its loss terms into
 * `totals.lossSum` and `totals.clipped`; with `backward`, returns dloss/dlogits, each
 * term divided by `pool`.
 * @since 0.1.0 @category combinators
 */
export const evaluateChunk = (
  chunk: ReadonlyArray<Prepared>,
  L: number,
  V: number,
  logits: Float32Array,
  loss: ResolvedLoss,
  options: { readonly pool: number; readonly backward: boolean; readonly topK?: number },
  totals: CallTotals,
): Float32Array | undefined => {
  const { pool } = options
  const dlogits = options.backward ? new Float32Array(chunk.length * L * V) : undefined
  chunk.forEach((c, b) => {
    const Lb = c.tokens.length
    const lps = new Array<number>(Lb).fill(0)
    const lses = new Float64Array(Lb)
    const topK: Array<TopK> = []
    // per-position inputs have Lb values (`prepare`); targets are in [0, V) (`checkData`) and
    // every logits row off .. off + V - 1 lies inside the chunk's B·L rows
    for (let i = 1; i < Lb; i++) {
      const tgt = c.target[i]!
      if (tgt === -100) continue
      const off = (b * L + i - 1) * V
      lses[i] = rowLse(logits, off, V)
      lps[i] = logits[off + tgt]! - lses[i]!
    }
    const active = (i: number) => isActive(loss.lossFn, i, c.target[i]!, c.weight ? c.weight[i]! : 1, c.adv ? c.adv[i]! : 0)
    // a sequence loss (gspo) or mask (mis_seq_*) reads the whole datum's ratio before any of its positions
    const sequence = needsSequence(loss) ? sequenceOf(lps, c.q, active) : undefined
    for (let i = 1; i < Lb; i++) {
      if (!active(i)) continue
      const tgt = c.target[i]!
      const off = (b * L + i - 1) * V
      const lse = lses[i]!
      const lp = lps[i]!
      const w = c.weight ? c.weight[i]! : 1
      const A = c.adv ? c.adv[i]! : 0
      const q = c.q ? c.q[i]! : 0
      const t = tokenLoss(loss, lp, q, A, w, sequence)
      if (!Number.isFinite(t.loss) || !Number.isFinite(Math.fround(t.dlp / pool))) {
        throw new NonFiniteError(
          `data[${c.index}] position ${i}: the ${loss.lossFn} loss is ${t.loss} with gradient ${t.dlp / pool} ` +
            `(lossFnInputs.advantages[${i}] = ${A}, lossFnInputs.logprobs[${i}] = ${q}, learner logprob ${lp}); nothing was applied`,
        )
      }
      totals.lossSum += t.loss
      if (isClipped(loss, lp, q, A, sequence)) totals.clipped++
      if (options.topK && options.topK > 0) topK.push(topKAt(logits, off, V, lse, options.topK, i))
      if (dlogits && t.dlp !== 0) {
        const coef = t.dlp / pool
        for (let v = 0; v < V; v++) dlogits[off + v] = -coef * Math.exp(logits[off + v]! - lse)
        dlogits[off + tgt] = dlogits[off + tgt]! + coef
      }
    }
    totals.outputs[c.index] = options.topK && options.topK > 0 ? { logprobs: lps, topK } : { logprobs: lps }
  })
  return dlogits
}

/** The `k` most probable tokens at one position, ties to the lower id. */
const topKAt = (logits: Float32Array, off: number, V: number, lse: number, k: number, position: number): TopK => {
  const idx = Array.from({ length: V }, (_, v) => v)
  idx.sort((a, b) => logits[off + b]! - logits[off + a]! || a - b)
  const tokens = idx.slice(0, Math.min(k, V))
  return { position, tokens, logprobs: tokens.map((t) => logits[off + t]! - lse) }
}

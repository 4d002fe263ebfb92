/**
 * The prompts' prefill of a decoding batch: per row, the logits of its first sampled
 * token and (when the batch decodes with a K/V cache) its prompt's K/V; per request, its
 * prompt's log-probs. Either each distinct prompt once, through the prefix cache, its K/V
 * tiled to the rows that sample from it; or, as the baseline that prefix reuse is
 * measured against, every row its own prompt.
 *
 * @since 0.1.0
 */
import * as tf from "@tensorflow/tfjs"
import { logprobAt } from "./LogSoftmax.ts"
import type { KvCache, LocalModel, WeightView } from "./Model.ts"
import type { PrefixCache } from "./PrefixCache.ts"
import { at } from "../../util/Lookup.ts"

/** A batch's first logits and K/V after the prompts, and each request's prompt log-probs. @since 0.1.0 @category models */
export interface Prefilled {
  readonly logits: Float32Array
  readonly cache: KvCache | undefined
  readonly promptLogprobs: Array<Array<number>>
}

/** What a batch's prefill reads: its requests' prompts (one length) and, per row, its request's index. @since 0.1.0 @category models */
export interface BatchPrompts {
  readonly prompts: ReadonlyArray<ReadonlyArray<number>>
  readonly rowReq: ReadonlyArray<number>
  /** whether the rows' K/V are wanted (decoding with a cache) */
  readonly needCache: boolean
}

/**
 * Each distinct prompt once (through `prefixes`, at `version`), its K/V tiled to the rows.
 * @since 0.1.0 @category combinators
 */
export const prefillShared = (model: LocalModel, view: WeightView, prefixes: PrefixCache, version: number, batch: BatchPrompts): Prefilled => {
  const { prompts, rowReq, needCache } = batch
  const { vocabSize: V, nLayers } = model.config
  const P = at(prompts, 0, "a batch's first prompt").length
  const R = rowReq.length
  const logits = new Float32Array(R * V)
  let cache: KvCache | undefined
  const entries = prefixes.prefill(view, version, prompts)
  const rowEntries = rowReq.map((j) => at(entries, j, "the prefilled entry of a row's prompt"))
  if (needCache) {
    // each row's copy of its prompt's K/V (a copy in memory; wasm's Gather and Tile are slow)
    const { nHeads: H } = model.config
    const n = H * P * model.headDim
    const tile = (kv: "k" | "v", l: number) => {
      const buf = new Float32Array(R * n)
      rowEntries.forEach((e, r) => buf.set(at(e[kv], l, "a prefilled layer's K/V"), r * n))
      return tf.tensor4d(buf, [R, H, P, model.headDim])
    }
    const k: Array<tf.Tensor4D> = []
    const v: Array<tf.Tensor4D> = []
    for (let l = 0; l < nLayers; l++) {
      k.push(tile("k", l))
      v.push(tile("v", l))
    }
    cache = { k, v, length: P }
  }
  rowEntries.forEach((e, r) => logits.set(e.next, r * V))
  return { logits, cache, promptLogprobs: entries.map((e) => e.logprobs.slice()) }
}

/**
 * Every row prefills its own prompt: no tiling, no prefix cache.
 * @since 0.1.0 @category combinators
 */
export const prefillEach = (model: LocalModel, view: WeightView, batch: BatchPrompts): Prefilled => {
  const { prompts, rowReq, needCache } = batch
  const V = model.config.vocabSize
  const P = at(prompts, 0, "a batch's first prompt").length
  const R = rowReq.length
  const logits = new Float32Array(R * V)
  let cache: KvCache | undefined
  const tok = new Int32Array(R * P)
  rowReq.forEach((j, r) => tok.set(at(prompts, j, "a row's prompt"), r * P))
  const collect = { k: [] as Array<tf.Tensor4D>, v: [] as Array<tf.Tensor4D> }
  const all = tf.tidy(() => {
    const l = model.forward(view, tok, R, P, needCache ? collect : undefined)
    collect.k.forEach((t) => tf.keep(t))
    collect.v.forEach((t) => tf.keep(t))
    return l
  })
  const vals = all.dataSync() as Float32Array
  all.dispose()
  if (needCache) cache = { k: collect.k, v: collect.v, length: P }
  for (let r = 0; r < R; r++) logits.set(vals.subarray((r * P + P - 1) * V, (r * P + P) * V), r * V)
  const promptLogprobs = prompts.map((prompt, j) => {
    // the request's first row (every prompt of a batch has P tokens)
    const r = rowReq.indexOf(j)
    const out = new Array<number>(P).fill(0)
    for (const [i, t] of prompt.entries()) if (i > 0) out[i] = logprobAt(vals, (r * P + i - 1) * V, V, t)
    return out
  })
  return { logits, cache, promptLogprobs }
}

/**
 * The numeric core of the embedded sampler, as a plain class.
 *
 * - The served adapter arrives as plain Float32Arrays plus a version number and is
 *   merged into the base weights once per version (W' = W + (alpha/r)·A·B).
 * - Each distinct prompt of a batch is prefilled once and its K/V tiled across the
 *   rows that sample from it (the `numSamples` of a request, and requests with the same
 *   prompt batched together). That is where prompt reuse pays: within a group. The
 *   prefill of a batch's prompts is in `BatchPrefill.ts`.
 * - An LRU of K/V entries, keyed on (policy version, token sequence), lets a request skip
 *   the part of its prompt that was already run through the model at this version: every
 *   prefilled prompt and every finished row is kept, so a repeated prompt needs no model
 *   work and a multi-turn episode's next turn prefills only what it adds. The LRU, its
 *   lookup and the prefill from it are in `PrefixCache.ts`; every published adapter
 *   empties it.
 * - Requests that are queued while a batch runs are batched: the next batch takes
 *   every queued request whose prompt has the same length and decodes them as one
 *   [rows, ...] batch. Each request keeps its own random stream, so its samples do
 *   not depend on what it was batched with.
 * - Sampling (temperature, top-k, top-p) runs in TypeScript on the logits (see
 *   `sampleRow`, in `SampleRow.ts`); the reported log-prob of a token is under the
 *   distribution actually sampled from: tempered, truncated and renormalised. At temperature 1 without
 *   truncation it is the model's log-softmax, computed the same way as the trainer's;
 *   otherwise it differs from what the trainer computes (temperature 1, no truncation).
 *   Greedy decoding (temperature 0) reports 0.
 * - Stops: EOS, a stop token id, or a stop string completed by the decoded text of the
 *   sampled tokens (it may span several tokens) ends a row with "stop"; the tokens that
 *   stopped it are returned as its last tokens (they were sampled, and their logprobs
 *   belong in the Datum). Reaching `maxTokens`, or the context length, ends it with
 *   "length".
 *
 * @since 0.1.0
 */
import * as tf from "@tensorflow/tfjs"
import type { Array as Arr } from "effect"
import type { SampledSequence, SampleResult, SamplingParams } from "../../contract/Contract.ts"
import { EOS } from "./CharTokenizer.ts"
import { logprobAt } from "./LogSoftmax.ts"
import { type BatchPrompts, type Prefilled, prefillEach, prefillShared } from "./BatchPrefill.ts"
import { disposeCache, inferenceView, type LocalModel, type TensorMap, type WeightView } from "./Model.ts"
import { PrefixCache, type PrefixStats } from "./PrefixCache.ts"
import { at } from "../../util/Lookup.ts"
import { Rng } from "./Rng.ts"
import { type BatchRow, newRow, rulesOf, sampleStep } from "./SampleStep.ts"
import type { PublishedAdapter } from "./TrainerEngine.ts"
import { checkSample } from "./Validate.ts"

export { sampleRow } from "./SampleRow.ts"

/** K/V entries the sampler keeps by default. @since 0.1.0 @category constants */
export const DEFAULT_PREFIX_CACHE_SIZE = 256

/** @since 0.1.0 @category models */
export interface SamplerEngineOptions {
  readonly seed?: number
  /** K/V entries kept (prompts and finished rows; 0 disables the cache; default 256) */
  readonly prefixCacheSize?: number
  /** false keeps only prompts' K/V, not finished rows' (no reuse across turns; for measurements) */
  readonly turnReuse?: boolean
  /**
   * what one more prefill call costs, in prompt tokens prefilled (default 24, measured on
   * the wasm backend: a call's fixed cost is about that of 25 rows x tokens). Prompts of a batch
   * that can reuse different lengths are prefilled in as few calls as pays: a prompt may
   * reuse less than it could to share a call. 0: every distinct reused length gets its call.
   */
  readonly prefillCallCost?: number
  /** false decodes by re-running the whole sequence each step (for tests) */
  readonly useKvCache?: boolean
  /** false runs requests one by one (for measurements) */
  readonly batchRequests?: boolean
  /** false prefills every row's prompt separately: no tiling, no LRU (for measurements) */
  readonly prefixReuse?: boolean
  /** most rows decoded together (requests are never split; default 1024) */
  readonly maxBatchRows?: number
}

/** @since 0.1.0 @category models */
export interface SampleRequestOptions {
  readonly numSamples: number
  readonly includePromptLogprobs?: boolean
}

interface Pending {
  readonly prompt: ReadonlyArray<number>
  readonly params: SamplingParams
  readonly options: SampleRequestOptions
  readonly rng: Rng
  readonly resolve: (r: SampleResult) => void
  readonly reject: (e: unknown) => void
}

/** Statistics for tests and benchmarks (the prefix cache's counters: `PrefixStats`). @since 0.1.0 @category models */
export interface SamplerStats extends PrefixStats {
  batches: number
  requests: number
  rows: number
  /** largest number of requests decoded together */
  maxRequestsPerBatch: number
}

/** @since 0.1.0 @category models */
export class LocalSamplerEngine {
  version = 0
  private merged: TensorMap
  private view: WeightView
  private readonly rng: Rng
  private readonly prefixes: PrefixCache
  private readonly useKvCache: boolean
  private readonly batchRequests: boolean
  private readonly prefixReuse: boolean
  private readonly turnReuse: boolean
  private readonly maxBatchRows: number
  private queue: Array<Pending> = []
  private scheduled = false
  readonly stats: SamplerStats = {
    batches: 0,
    requests: 0,
    rows: 0,
    prefixHits: 0,
    prefixMisses: 0,
    partialHits: 0,
    reusedTokens: 0,
    prefilledTokens: 0,
    maxRequestsPerBatch: 0,
  }

  constructor(
    readonly model: LocalModel,
    options: SamplerEngineOptions = {},
  ) {
    this.rng = new Rng(options.seed ?? 0)
    this.turnReuse = options.turnReuse ?? true
    this.useKvCache = options.useKvCache ?? true
    this.batchRequests = options.batchRequests ?? true
    this.prefixReuse = options.prefixReuse ?? true
    this.maxBatchRows = options.maxBatchRows ?? 1024
    this.prefixes = new PrefixCache(model, options.prefixCacheSize ?? DEFAULT_PREFIX_CACHE_SIZE, options.prefillCallCost ?? 24, this.stats)
    this.merged = model.mergedTensors(undefined, 1)
    this.view = inferenceView(this.merged)
  }

  /** Serves a new adapter version (weights are merged into the base once). */
  setAdapter(adapter: PublishedAdapter) {
    const lora = toTensors(adapter.weights, this.model)
    const next = this.model.mergedTensors(lora, adapter.scale)
    for (const t of Object.values(lora)) t.dispose()
    this.disposeMerged()
    this.merged = next
    this.view = inferenceView(next)
    this.version = adapter.version
    this.clearPrefixCache()
  }

  private disposeMerged() {
    for (const [k, t] of Object.entries(this.merged)) if (this.model.base[k] !== t) t.dispose()
  }

  clearPrefixCache() {
    this.prefixes.clear()
  }

  /** a fresh seed from the engine's own stream (for requests without a seed) */
  nextSeed(): number {
    return this.rng.nextU32()
  }

  /**
   * Queues a request; requests queued together are decoded as one batch.
   * Invalid requests (see `check`) are rejected at once.
   */
  sample(prompt: ReadonlyArray<number>, params: SamplingParams, options: SampleRequestOptions): Promise<SampleResult> {
    const bad = this.check(prompt, params, options.numSamples)
    if (bad) return Promise.reject(new Error(bad))
    const seed = params.seed ?? this.nextSeed()
    return new Promise<SampleResult>((resolve, reject) => {
      this.queue.push({ prompt, params, options, rng: new Rng(seed), resolve, reject })
      this.schedule()
    })
  }

  private schedule() {
    if (this.scheduled || this.queue.length === 0) return
    this.scheduled = true
    setImmediate(() => {
      this.scheduled = false
      const first = this.queue[0]
      // nothing queued: nothing to run (`schedule` only waits when a request is queued)
      if (first === undefined) return
      const group: Arr.NonEmptyArray<Pending> = [first]
      let rows = first.options.numSamples
      if (this.batchRequests) {
        for (const p of this.queue) {
          if (p === first || p.prompt.length !== first.prompt.length || rows + p.options.numSamples > this.maxBatchRows) continue
          group.push(p)
          rows += p.options.numSamples
        }
      }
      this.queue = this.queue.filter((p) => !group.includes(p))
      try {
        const results = this.runBatch(group)
        group.forEach((p, i) => p.resolve(at(results, i, "the result of a batched request")))
      } catch (e) {
        for (const p of group) p.reject(e)
      }
      this.schedule()
    })
  }

  /** Checks a request; returns a message or undefined. */
  check(prompt: ReadonlyArray<number>, params: SamplingParams, numSamples: number): string | undefined {
    return checkSample(prompt, params, numSamples, this.model.config)
  }

  /** entries in the LRU and the bytes their K/V and logits hold */
  cacheSize(): { readonly entries: number; readonly bytes: number } {
    return this.prefixes.cacheSize()
  }

  /** log p(x_i | x_<i) for every position (position 0 is 0). */
  computeLogprobs(tokens: ReadonlyArray<number>): Array<number> {
    const V = this.model.config.vocabSize
    const L = tokens.length
    const out = new Array<number>(L).fill(0)
    if (L < 2) return out
    const logits = tf.tidy(() => this.model.forward(this.view, Int32Array.from(tokens), 1, L))
    const vals = logits.dataSync() as Float32Array
    logits.dispose()
    for (let i = 1; i < L; i++) out[i] = logprobAt(vals, (i - 1) * V, V, tokens[i]!)
    return out
  }

  private runBatch(group: Arr.NonEmptyReadonlyArray<Pending>): Array<SampleResult> {
    const { contextLength: ctx, vocabSize: V } = this.model.config
    const P = group[0].prompt.length
    this.stats.batches++
    this.stats.requests += group.length
    this.stats.maxRequestsPerBatch = Math.max(this.stats.maxRequestsPerBatch, group.length)
    // rows: request j repeated numSamples times, each with its request's rules
    const rowReq: Array<number> = []
    const rows: Array<BatchRow> = []
    const rules = group.map((g, j) => {
      const own = rulesOf(g, ctx - P, V)
      for (let s = 0; s < g.options.numSamples; s++) {
        rowReq.push(j)
        rows.push(newRow(own))
      }
      return own
    })
    const R = rowReq.length
    this.stats.rows += R
    const maxSteps = Math.max(...rules.map((r) => r.limit))
    const needCache = this.useKvCache && maxSteps > 1
    // finished rows' K/V are kept for a next turn that extends them
    const keep = needCache && this.prefixReuse && this.turnReuse && this.prefixes.capacity > 0
    const batch: BatchPrompts = { prompts: group.map((g) => g.prompt), rowReq, needCache }
    const first = this.prefill(batch)
    let cache = first.cache
    let logits = first.logits
    const promptLogprobs = first.promptLogprobs
    try {
      for (let step = 0; step < maxSteps; step++) {
        sampleStep(rows, logits, V, keep)
        if (rows.every((row) => row.done)) break
        const last = Int32Array.from(rows.map((row) => row.tokens[row.tokens.length - 1] ?? EOS))
        if (cache) {
          const out = this.model.decode(this.view, last, cache)
          cache = out.cache
          logits = out.logits.dataSync() as Float32Array
          out.logits.dispose()
        } else {
          logits = this.fullForwardLast(batch.prompts, rowReq, rows.map((row) => row.tokens))
        }
      }
      if (keep && cache) this.prefixes.keepRows(this.version, batch.prompts, promptLogprobs, rows, rowReq, cache)
    } finally {
      if (cache) disposeCache(cache)
    }
    return group.map((g, j) => {
      const sequences: Array<SampledSequence> = []
      rows.forEach((row, r) => {
        if (rowReq[r] === j) sequences.push({ tokens: row.tokens, logprobs: row.logprobs, stopReason: row.stop })
      })
      return g.options.includePromptLogprobs
        ? { sequences, policyVersion: this.version, promptLogprobs: at(promptLogprobs, j, "a request's prompt log-probs").slice() }
        : { sequences, policyVersion: this.version }
    })
  }

  /**
   * The prompts' prefill (`BatchPrefill`): per row, the logits of its first sampled token
   * and (with `needCache`) its prompt's K/V; per request, its prompt's log-probs.
   */
  private prefill(batch: BatchPrompts): Prefilled {
    return this.prefixReuse ? prefillShared(this.model, this.view, this.prefixes, this.version, batch) : prefillEach(this.model, this.view, batch)
  }

  /** the no-cache path: logits of the last position of every row, recomputed from scratch */
  private fullForwardLast(prompts: ReadonlyArray<ReadonlyArray<number>>, rowReq: ReadonlyArray<number>, gen: ReadonlyArray<ReadonlyArray<number>>): Float32Array {
    const V = this.model.config.vocabSize
    const R = rowReq.length
    // rows still decoding have the longest generations; finished rows are padded and ignored
    const L = at(prompts, 0, "a batch's first prompt").length + Math.max(...gen.map((g) => g.length))
    const tok = new Int32Array(R * L)
    rowReq.forEach((j, r) => {
      const seq = [...at(prompts, j, "a row's prompt"), ...at(gen, r, "a row's tokens")]
      for (let i = 0; i < L; i++) tok[r * L + i] = seq[i] ?? EOS
    })
    const logits = tf.tidy(() => this.model.forward(this.view, tok, R, L))
    const vals = logits.dataSync() as Float32Array
    logits.dispose()
    const out = new Float32Array(R * V)
    for (let r = 0; r < R; r++) out.set(vals.subarray((r * L + L - 1) * V, (r * L + L) * V), r * V)
    return out
  }

  dispose() {
    this.clearPrefixCache()
    this.disposeMerged()
  }
}

const toTensors = (w: Record<string, Float32Array>, model: LocalModel): TensorMap => {
  const out: TensorMap = {}
  for (const [k, a] of Object.entries(w)) {
    const base = model.base[k.slice(0, k.lastIndexOf("."))]
    if (!base) throw new Error(`adapter weight ${k} does not match a projection`)
    const [din, dout] = base.shape as [number, number]
    const r = k.endsWith(".A") ? a.length / din : a.length / dout
    out[k] = tf.tensor2d(a, k.endsWith(".A") ? [din, r] : [r, dout])
  }
  return out
}

/**
 * The numeric core of the embedded sampler, as a plain class.
 *
 * - The served adapter arrives as plain Float32Arrays plus a version number and is
 *   merged into the base weights once per version (W' = W + (alpha/r)·A·B).
 * - Each distinct prompt of a batch is prefilled once and its K/V tiled across the
 *   rows that sample from it (the `numSamples` of a request, and requests with the same
 *   prompt batched together). That is where prompt reuse pays: within a group.
 * - An LRU of K/V entries, keyed on (policy version, token sequence), lets a request skip
 *   the part of its prompt that was already run through the model at this version:
 *   - every prefilled prompt is kept (a repeated prompt, e.g. a group sent as several
 *     requests, is then served with no model work at all: a "hit");
 *   - every finished row is kept too: its prompt plus its sampled tokens except the last
 *     (the last one was sampled but never fed), with the logits it was sampled from. A
 *     multi-turn episode's next turn (prompt ++ sampled ++ observation, an exact token
 *     extension) then prefills only the last sampled token and the observation, starting
 *     at the cached length with the cached K/V as its past (a "partial hit");
 *   - a prompt that shares only a prefix of its tokens with an entry reuses that common
 *     prefix (less one position when the entry ends beyond it, so that the logits of the
 *     first new token are computed) and prefills the rest; one that shares nothing is
 *     prefilled whole.
 *   Prompts of one batch with different reused lengths are prefilled in as few chunked
 *   calls as pays (`prefillCallCost`; a prompt may reuse less to share a call). Log-probs
 *   of reused prompt positions come from the entry (model log-softmax at temperature 1,
 *   as for a prefilled prompt). Reused K/V are those a full prefill computes, up to
 *   float32 rounding (a decode step and a prefill sum in different orders): tokens are
 *   the same, log-probs agree to ~1e-6, not bit for bit. K/V depend on every
 *   adapted layer (q, k, v and the MLPs all carry LoRA), so every published adapter
 *   empties the LRU: nothing cached under one version is valid under another. Bounded by
 *   entries (`prefixCacheSize`, default `DEFAULT_PREFIX_CACHE_SIZE` = 256: about two per
 *   episode in flight, a prompt and a finished turn); an entry of T tokens holds
 *   2 · nLayers · T · dModel float32 (at most 96 KiB for 2 layers, d_model 128, context 48:
 *   24 MiB for 256 entries), plus vocabSize float32 of logits, its tokens and their
 *   log-probs. Entries are plain arrays, not tensors.
 * - Requests that are queued while a batch runs are batched: the next batch takes
 *   every queued request whose prompt has the same length and decodes them as one
 *   [rows, ...] batch. Each request keeps its own random stream, so its samples do
 *   not depend on what it was batched with.
 * - Sampling (temperature, top-k, top-p) runs in TypeScript on the logits (see
 *   `sampleRow`); the reported log-prob of a token is under the distribution actually
 *   sampled from: tempered, truncated and renormalised. At temperature 1 without
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
import type { SampledSequence, SampleResult, SamplingParams, StopReason } from "../../Contract.ts"
import { decodeChars, EOS } from "./CharTokenizer.ts"
import { logprobAt, rowLse } from "./LogSoftmax.ts"
import { disposeCache, inferenceView, type KvCache, type LocalModel, type TensorMap, type WeightView } from "./Model.ts"
import { Rng } from "./Rng.ts"
import type { PublishedAdapter } from "./TrainerEngine.ts"
import { checkSample } from "./Validate.ts"

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

/** K/V of a token sequence at the served version. */
interface PrefixEntry {
  /** the positions the K/V cover */
  readonly tokens: ReadonlyArray<number>
  /** per layer [H, tokens.length, dh] row-major (plain arrays: reading rows out of a batch
   * tensor and building a batch from them is a copy, where wasm's Slice costs ~0.5 ms a row) */
  readonly k: Array<Float32Array>
  readonly v: Array<Float32Array>
  /** log p(tokens[i] | tokens[<i]) at temperature 1 (0 at i = 0) */
  readonly logprobs: ReadonlyArray<number>
  /** the logits at the last position: the distribution of the token after `tokens` */
  readonly next: Float32Array
}

/** Statistics for tests and benchmarks. @since 0.1.0 @category models */
export interface SamplerStats {
  batches: number
  requests: number
  rows: number
  /** distinct prompts served wholly from the LRU (no model work) */
  prefixHits: number
  /** distinct prompts that needed a prefill (whole, or after a cached prefix) */
  prefixMisses: number
  /** of the misses, those whose prefill started from a cached prefix (a previous turn, a shared prefix) */
  partialHits: number
  /** prompt positions taken from the LRU instead of being run through the model */
  reusedTokens: number
  /** prompt positions run through the model */
  prefilledTokens: number
  /** largest number of requests decoded together */
  maxRequestsPerBatch: number
}

/** @since 0.1.0 @category models */
export class LocalSamplerEngine {
  version = 0
  private merged: TensorMap
  private view: WeightView
  private readonly rng: Rng
  private readonly lru = new Map<string, PrefixEntry>()
  private readonly lruSize: number
  private readonly useKvCache: boolean
  private readonly batchRequests: boolean
  private readonly prefixReuse: boolean
  private readonly turnReuse: boolean
  private readonly prefillCallCost: number
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
    this.lruSize = options.prefixCacheSize ?? DEFAULT_PREFIX_CACHE_SIZE
    this.turnReuse = options.turnReuse ?? true
    this.prefillCallCost = options.prefillCallCost ?? 24
    this.useKvCache = options.useKvCache ?? true
    this.batchRequests = options.batchRequests ?? true
    this.prefixReuse = options.prefixReuse ?? true
    this.maxBatchRows = options.maxBatchRows ?? 1024
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
    this.lru.clear()
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
      const first = this.queue[0]!
      const group = [first]
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
        group.forEach((p, i) => p.resolve(results[i]!))
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

  private keyOf(tokens: ReadonlyArray<number>) {
    return `${this.version}|${tokens.join(",")}`
  }

  /** Adds an entry, evicting the least recently used ones. */
  private remember(key: string, e: PrefixEntry) {
    this.lru.set(key, e)
    while (this.lru.size > this.lruSize) this.lru.delete(this.lru.keys().next().value as string)
  }

  /** entries in the LRU and the bytes their K/V and logits hold */
  cacheSize(): { readonly entries: number; readonly bytes: number } {
    let bytes = 0
    for (const e of this.lru.values()) {
      for (const a of e.k) bytes += a.byteLength
      for (const a of e.v) bytes += a.byteLength
      bytes += e.next.byteLength
    }
    return { entries: this.lru.size, bytes }
  }

  private touch(key: string, e: PrefixEntry) {
    this.lru.delete(key)
    this.lru.set(key, e)
  }

  /**
   * The entry that saves the most prefill for `p`, and how many of its positions to reuse:
   * all of an entry that `p` extends (its `next` logits give the first new position's
   * log-prob), else the common prefix less one (the last reused position's logits are
   * needed and an entry only keeps those of its own last position).
   */
  private lookup(p: ReadonlyArray<number>): { readonly key: string; readonly entry: PrefixEntry; readonly reuse: number } | undefined {
    let best: { key: string; entry: PrefixEntry; reuse: number } | undefined
    for (const [key, e] of this.lru) {
      const T = e.tokens.length
      const n = Math.min(T, p.length)
      let m = 0
      while (m < n && e.tokens[m] === p[m]) m++
      const reuse = m === T && T < p.length ? T : m - 1
      if (reuse > (best?.reuse ?? 0)) best = { key, entry: e, reuse }
    }
    return best
  }

  /**
   * Prefills the distinct prompts of a batch (with the LRU). Returns one entry per prompt.
   */
  private prefill(prompts: Array<ReadonlyArray<number>>): Array<PrefixEntry> {
    const V = this.model.config.vocabSize
    const { nHeads: H, nLayers } = this.model.config
    const dh = this.model.headDim
    const P = prompts[0]!.length
    const entries = new Map<string, PrefixEntry>()
    const plans: Array<{ key: string; p: ReadonlyArray<number>; src: PrefixEntry | undefined; reuse: number }> = []
    for (const p of prompts) {
      const key = this.keyOf(p)
      if (entries.has(key) || plans.some((m) => m.key === key)) continue
      const hit = this.lru.get(key)
      if (hit) {
        this.touch(key, hit)
        entries.set(key, hit)
        this.stats.prefixHits++
        this.stats.reusedTokens += P
        continue
      }
      const found = this.lruSize > 0 ? this.lookup(p) : undefined
      if (found) this.touch(found.key, found.entry)
      plans.push({ key, p, src: found?.entry, reuse: found?.reuse ?? 0 })
    }
    // as few calls as pay: each run of plans (by reusable length) starts from its smallest
    plans.sort((a, b) => a.reuse - b.reuse)
    const level = callLevels(plans.map((m) => m.reuse), P, this.prefillCallCost)
    plans.forEach((m, i) => {
      m.reuse = level[i]!
      this.stats.prefixMisses++
      if (m.reuse > 0) this.stats.partialHits++
      this.stats.reusedTokens += m.reuse
      this.stats.prefilledTokens += P - m.reuse
    })
    const fresh: Array<[string, PrefixEntry]> = []
    // one chunked prefill per reused length
    for (const r of [...new Set(plans.map((m) => m.reuse))]) {
      const part = plans.filter((m) => m.reuse === r)
      const U = part.length
      const E = P - r
      const tok = new Int32Array(U * E)
      part.forEach((m, u) => {
        for (let i = r; i < P; i++) tok[u * E + i - r] = m.p[i]!
      })
      // the reused positions of every prompt: [U, H, r, dh] per layer
      const pastOf = (kv: "k" | "v", l: number) => {
        const buf = new Float32Array(U * H * r * dh)
        part.forEach((m, u) => copyPositions(m.src![kv][l]!, m.src!.tokens.length, r, H, dh, buf, u * H * r * dh))
        return tf.tensor4d(buf, [U, H, r, dh])
      }
      const past: KvCache = { k: [], v: [], length: r }
      if (r > 0) {
        for (let l = 0; l < nLayers; l++) {
          past.k.push(pastOf("k", l))
          past.v.push(pastOf("v", l))
        }
      }
      const out = this.model.extend(this.view, tok, U, E, past)
      disposeCache(past)
      const vals = out.logits.dataSync() as Float32Array
      out.logits.dispose()
      const n = H * P * dh
      const ks = out.cache.k.map((t) => t.dataSync() as Float32Array)
      const vs = out.cache.v.map((t) => t.dataSync() as Float32Array)
      disposeCache(out.cache)
      part.forEach((m, u) => {
        const logprobs = new Array<number>(P).fill(0)
        if (r > 0) {
          const src = m.src!
          for (let i = 0; i < r; i++) logprobs[i] = src.logprobs[i]!
          logprobs[r] = r === src.tokens.length ? logprobAt(src.next, 0, V, m.p[r]!) : src.logprobs[r]!
        }
        for (let i = r + 1; i < P; i++) logprobs[i] = logprobAt(vals, (u * E + i - 1 - r) * V, V, m.p[i]!)
        const entry: PrefixEntry = {
          tokens: m.p.slice(),
          k: ks.map((a) => a.slice(u * n, (u + 1) * n)),
          v: vs.map((a) => a.slice(u * n, (u + 1) * n)),
          logprobs,
          next: vals.slice((u * E + E - 1) * V, (u * E + E) * V),
        }
        fresh.push([m.key, entry])
        entries.set(m.key, entry)
      })
    }
    if (this.lruSize > 0) for (const [key, e] of fresh) this.remember(key, e)
    return prompts.map((p) => entries.get(this.keyOf(p))!)
  }

  /**
   * Keeps each finished row's K/V: its prompt and sampled tokens except the last (those
   * fed through the model), with the logits its last token was sampled from. Rows with one
   * token (their entry is the prompt's) and rows that leave no room to continue are skipped.
   */
  private keepRows(prompts: ReadonlyArray<ReadonlyArray<number>>, promptLogprobs: ReadonlyArray<ReadonlyArray<number>>, rows: ReadonlyArray<FinishedRow>, rowReq: ReadonlyArray<number>, cache: KvCache) {
    const { nHeads: H, nLayers, contextLength: ctx } = this.model.config
    const dh = this.model.headDim
    const C = cache.length
    // read back once, on the first row kept
    let ks: Array<Float32Array> | undefined
    let vs: Array<Float32Array> | undefined
    rows.forEach((row, r) => {
      const sampled = row.tokens.length
      const prompt = prompts[rowReq[r]!]!
      const T = prompt.length + sampled - 1
      if (sampled < 2 || T > ctx - 2 || T > C || !row.next) return
      const tokens = [...prompt, ...row.tokens.slice(0, sampled - 1)]
      const key = this.keyOf(tokens)
      if (this.lru.has(key)) return
      const ka = (ks ??= cache.k.map((t) => t.dataSync() as Float32Array))
      const va = (vs ??= cache.v.map((t) => t.dataSync() as Float32Array))
      // one allocation per row: [k of each layer, v of each layer], each [H, T, dh]
      const n = H * T * dh
      const buf = new Float32Array(2 * nLayers * n)
      const rowOf = (a: Float32Array, i: number) => {
        copyPositions(a.subarray(r * H * C * dh, (r + 1) * H * C * dh), C, T, H, dh, buf, i * n)
        return buf.subarray(i * n, (i + 1) * n)
      }
      this.remember(key, {
        tokens,
        k: ka.map((a, l) => rowOf(a, l)),
        v: va.map((a, l) => rowOf(a, nLayers + l)),
        logprobs: [...promptLogprobs[rowReq[r]!]!, ...row.modelLogprobs.slice(0, sampled - 1)],
        next: row.next,
      })
    })
  }

  private runBatch(group: Array<Pending>): Array<SampleResult> {
    const { contextLength: ctx, vocabSize: V, nLayers } = this.model.config
    const P = group[0]!.prompt.length
    this.stats.batches++
    this.stats.requests += group.length
    this.stats.maxRequestsPerBatch = Math.max(this.stats.maxRequestsPerBatch, group.length)
    // rows: request j repeated numSamples times
    const rowReq: Array<number> = []
    group.forEach((g, j) => {
      for (let s = 0; s < g.options.numSamples; s++) rowReq.push(j)
    })
    const R = rowReq.length
    this.stats.rows += R
    const limit = group.map((g) => Math.min(g.params.maxTokens, ctx - P))
    const maxSteps = Math.max(...limit)
    const rows: Array<FinishedRow & { logprobs: Array<number>; text: string; done: boolean; stop: StopReason }> = rowReq.map(() => ({
      tokens: [],
      logprobs: [],
      modelLogprobs: [],
      next: undefined,
      text: "",
      done: false,
      stop: "length",
    }))
    const needCache = this.useKvCache && maxSteps > 1
    // finished rows' K/V are kept for a next turn that extends them
    const keep = needCache && this.prefixReuse && this.turnReuse && this.lruSize > 0
    let cache: KvCache | undefined
    let logits: Float32Array = new Float32Array(R * V)
    let promptLogprobs: Array<Array<number>>

    if (this.prefixReuse) {
      // each distinct prompt once, its K/V tiled to the rows
      const entries = this.prefill(group.map((g) => g.prompt))
      if (needCache) {
        // each row's copy of its prompt's K/V (a copy in memory; wasm's Gather and Tile are slow)
        const { nHeads: H } = this.model.config
        const n = H * P * this.model.headDim
        const tile = (kv: "k" | "v", l: number) => {
          const buf = new Float32Array(R * n)
          rowReq.forEach((j, r) => buf.set(entries[j]![kv][l]!, r * n))
          return tf.tensor4d(buf, [R, H, P, this.model.headDim])
        }
        const k: Array<tf.Tensor4D> = []
        const v: Array<tf.Tensor4D> = []
        for (let l = 0; l < nLayers; l++) {
          k.push(tile("k", l))
          v.push(tile("v", l))
        }
        cache = { k, v, length: P }
      }
      rowReq.forEach((j, r) => logits.set(entries[j]!.next, r * V))
      promptLogprobs = entries.map((e) => e.logprobs.slice())
    } else {
      // every row prefills its own prompt (the baseline that prefix reuse is measured against)
      const tok = new Int32Array(R * P)
      rowReq.forEach((j, r) => group[j]!.prompt.forEach((t, i) => (tok[r * P + i] = t)))
      const collect = { k: [] as Array<tf.Tensor4D>, v: [] as Array<tf.Tensor4D> }
      const all = tf.tidy(() => {
        const l = this.model.forward(this.view, tok, R, P, needCache ? collect : undefined)
        collect.k.forEach((t) => tf.keep(t))
        collect.v.forEach((t) => tf.keep(t))
        return l
      })
      const vals = all.dataSync() as Float32Array
      all.dispose()
      if (needCache) cache = { k: collect.k, v: collect.v, length: P }
      for (let r = 0; r < R; r++) logits.set(vals.subarray((r * P + P - 1) * V, (r * P + P) * V), r * V)
      promptLogprobs = group.map((g) => {
        const r = rowReq.indexOf(group.indexOf(g))
        const out = new Array<number>(P).fill(0)
        for (let i = 1; i < P; i++) out[i] = logprobAt(vals, (r * P + i - 1) * V, V, g.prompt[i]!)
        return out
      })
    }

    const plain = group.map((g) => g.params.temperature === 1 && ((g.params.topK ?? 0) === 0 || g.params.topK! >= V) && (g.params.topP ?? 1) >= 1)
    const stopStrings = group.map((g) => (g.params.stop ?? []).filter((s): s is string => typeof s === "string"))
    const stopIds = group.map((g) => new Set((g.params.stop ?? []).filter((s): s is number => typeof s === "number")))
    try {
      for (let step = 0; step < maxSteps; step++) {
        for (let r = 0; r < R; r++) {
          const row = rows[r]!
          if (row.done) continue
          const j = rowReq[r]!
          const g = group[j]!
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
        if (rows.every((row) => row.done)) break
        const last = Int32Array.from(rows.map((row) => row.tokens[row.tokens.length - 1] ?? EOS))
        if (cache) {
          const out = this.model.decode(this.view, last, cache)
          cache = out.cache
          logits = out.logits.dataSync() as Float32Array
          out.logits.dispose()
        } else {
          logits = this.fullForwardLast(group, rowReq, rows.map((row) => row.tokens))
        }
      }
      if (keep && cache) this.keepRows(group.map((g) => g.prompt), promptLogprobs, rows, rowReq, cache)
    } finally {
      if (cache) disposeCache(cache)
    }
    return group.map((g, j) => {
      const sequences: Array<SampledSequence> = []
      rows.forEach((row, r) => {
        if (rowReq[r] === j) sequences.push({ tokens: row.tokens, logprobs: row.logprobs, stopReason: row.stop })
      })
      return g.options.includePromptLogprobs
        ? { sequences, policyVersion: this.version, promptLogprobs: promptLogprobs[j]!.slice() }
        : { sequences, policyVersion: this.version }
    })
  }

  /** the no-cache path: logits of the last position of every row, recomputed from scratch */
  private fullForwardLast(group: Array<Pending>, rowReq: Array<number>, gen: Array<Array<number>>): Float32Array {
    const V = this.model.config.vocabSize
    const R = rowReq.length
    // rows still decoding have the longest generations; finished rows are padded and ignored
    const L = group[0]!.prompt.length + Math.max(...gen.map((g) => g.length))
    const tok = new Int32Array(R * L)
    rowReq.forEach((j, r) => {
      const seq = [...group[j]!.prompt, ...gen[r]!]
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

/** a row's sampled tokens, their log-probs at temperature 1, and the logits its last token was drawn from */
interface FinishedRow {
  readonly tokens: Array<number>
  readonly modelLogprobs: Array<number>
  next: Float32Array | undefined
}

/**
 * Splits plans sorted by the length they could reuse into runs, one prefill call each,
 * starting at the run's smallest length: minimises calls · `callCost` + tokens prefilled.
 * Returns the length each plan reuses.
 */
const callLevels = (reuse: ReadonlyArray<number>, P: number, callCost: number): Array<number> => {
  const n = reuse.length
  const best = new Array<number>(n + 1).fill(Infinity)
  const from = new Array<number>(n + 1).fill(0)
  best[0] = 0
  for (let b = 1; b <= n; b++) {
    for (let a = 0; a < b; a++) {
      const c = best[a]! + callCost + (b - a) * (P - reuse[a]!)
      if (c < best[b]!) {
        best[b] = c
        from[b] = a
      }
    }
  }
  const out = new Array<number>(n)
  for (let b = n; b > 0; b = from[b]!) for (let i = from[b]!; i < b; i++) out[i] = reuse[from[b]!]!
  return out
}

/** Copies the first `len` positions of `src` ([H, srcLen, dh]) into `out` at `at` as [H, len, dh]. */
const copyPositions = (src: Float32Array, srcLen: number, len: number, H: number, dh: number, out: Float32Array, at: number) => {
  if (len === srcLen) {
    out.set(src.subarray(0, H * len * dh), at)
    return
  }
  for (let h = 0; h < H; h++) out.set(src.subarray(h * srcLen * dh, (h * srcLen + len) * dh), at + h * len * dh)
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

/**
 * Draws one token from a logits row under temperature / top-k / top-p and returns
 * its log-prob under that (renormalised) distribution:
 *
 * - q = softmax(logits / T);
 * - top-k keeps the `topK` most probable tokens under q (0: no limit; ties: lower id);
 * - top-p keeps the smallest set of most probable tokens whose mass under q reaches
 *   `topP` (the token that crosses `topP` is kept; the most probable token always is);
 * - both filters are measured on q itself, so the kept set is their intersection (top-p
 *   is not recomputed on the top-k renormalised distribution, as vLLM and Hugging Face
 *   do; the two differ only when both filters are set and top-p cuts inside the top k);
 * - the token is drawn from q restricted to the kept set and renormalised, and the
 *   returned logprob is log of that probability, not the model's log-softmax.
 *
 * Temperature 0 is greedy (the first maximal logit) and reports logprob 0.
 * @since 0.1.0 @category combinators
 */
export const sampleRow = (logits: Float32Array, off: number, V: number, params: SamplingParams, rng: Rng): { token: number; logprob: number } => {
  if (params.temperature === 0) {
    let best = 0
    for (let v = 1; v < V; v++) if (logits[off + v]! > logits[off + best]!) best = v
    return { token: best, logprob: 0 }
  }
  const T = params.temperature
  const topK = params.topK ?? 0
  const topP = params.topP ?? 1
  if (T === 1 && (topK === 0 || topK >= V) && topP >= 1) {
    // plain softmax: the trainer's arithmetic
    const lse = rowLse(logits, off, V)
    const u = rng.next()
    let acc = 0
    let token = V - 1
    for (let v = 0; v < V; v++) {
      acc += Math.exp(logits[off + v]! - lse)
      if (u < acc) {
        token = v
        break
      }
    }
    return { token, logprob: logits[off + token]! - lse }
  }
  const z = new Float64Array(V)
  let m = -Infinity
  for (let v = 0; v < V; v++) {
    z[v] = logits[off + v]! / T
    if (z[v]! > m) m = z[v]!
  }
  const p = new Float64Array(V)
  for (let v = 0; v < V; v++) p[v] = Math.exp(z[v]! - m)
  const keep = new Uint8Array(V).fill(1)
  if ((topK > 0 && topK < V) || topP < 1) {
    const order = Array.from({ length: V }, (_, v) => v).sort((a, b) => p[b]! - p[a]! || a - b)
    let total = 0
    for (let v = 0; v < V; v++) total += p[v]!
    let cum = 0
    order.forEach((v, rank) => {
      const inTopK = topK === 0 || rank < topK
      const inTopP = cum < topP * total || rank === 0
      if (!inTopK || !inTopP) keep[v] = 0
      cum += p[v]!
    })
  }
  let s = 0
  for (let v = 0; v < V; v++) if (keep[v]) s += p[v]!
  const u = rng.next() * s
  let acc = 0
  let token = -1
  for (let v = 0; v < V; v++) {
    if (!keep[v]) continue
    token = v
    acc += p[v]!
    if (u < acc) break
  }
  return { token, logprob: z[token]! - m - Math.log(s) }
}

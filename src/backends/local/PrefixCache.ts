/**
 * The K/V prefix cache of the embedded sampler: an LRU of K/V entries keyed on (policy
 * version, token sequence), the lookup of the entry that saves the most prefill for a
 * prompt, the chunked prefill of a batch's distinct prompts from those entries, and the
 * keeping of finished rows for a next turn. Separate from the engine, which batches
 * requests and decodes: this is what a prompt costs before decoding starts.
 *
 * - every prefilled prompt is kept (a repeated prompt, e.g. a group sent as several
 *   requests, is then served with no model work at all: a "hit");
 * - every finished row is kept too: its prompt plus its sampled tokens except the last
 *   (the last one was sampled but never fed), with the logits it was sampled from. A
 *   multi-turn episode's next turn (prompt ++ sampled ++ observation, an exact token
 *   extension) then prefills only the last sampled token and the observation, starting
 *   at the cached length with the cached K/V as its past (a "partial hit");
 * - a prompt that shares only a prefix of its tokens with an entry reuses that common
 *   prefix (less one position when the entry ends beyond it, so that the logits of the
 *   first new token are computed) and prefills the rest; one that shares nothing is
 *   prefilled whole.
 *
 * Prompts of one batch with different reused lengths are prefilled in as few chunked
 * calls as pays (`prefillCallCost`; a prompt may reuse less to share a call). Log-probs
 * of reused prompt positions come from the entry (model log-softmax at temperature 1,
 * as for a prefilled prompt). Reused K/V are those a full prefill computes, up to
 * float32 rounding (a decode step and a prefill sum in different orders): tokens are
 * the same, log-probs agree to ~1e-6, not bit for bit. K/V depend on every
 * adapted layer (q, k, v and the MLPs all carry LoRA), so every published adapter
 * empties the LRU: nothing cached under one version is valid under another. Bounded by
 * entries (`prefixCacheSize`, default `DEFAULT_PREFIX_CACHE_SIZE` = 256: about two per
 * episode in flight, a prompt and a finished turn); an entry of T tokens holds
 * 2 · nLayers · T · dModel float32 (at most 96 KiB for 2 layers, d_model 128, context 48:
 * 24 MiB for 256 entries), plus vocabSize float32 of logits, its tokens and their
 * log-probs. Entries are plain arrays, not tensors.
 *
 * @since 0.1.0
 */
import * as tf from "@tensorflow/tfjs"
import { logprobAt } from "./LogSoftmax.ts"
import { disposeCache, type KvCache, type LocalModel, type WeightView } from "./Model.ts"
import { at, present } from "../../util/Lookup.ts"

/** The prefix-cache counters of the sampler's statistics. @since 0.1.0 @category models */
export interface PrefixStats {
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
}

/** K/V of a token sequence at the served version. */
export interface PrefixEntry {
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

/** a row's sampled tokens, their log-probs at temperature 1, and the logits its last token was drawn from */
export interface FinishedRow {
  readonly tokens: Array<number>
  readonly modelLogprobs: Array<number>
  next: Float32Array | undefined
}

/** A prompt to prefill: its key, the entry it starts from (if any) and how many of that entry's positions it reuses. */
interface Plan {
  readonly key: string
  readonly p: ReadonlyArray<number>
  readonly src: PrefixEntry | undefined
  reuse: number
}

/** The LRU of K/V entries and the prefill that uses it. @since 0.1.0 @category models */
export class PrefixCache {
  private readonly lru = new Map<string, PrefixEntry>()

  constructor(
    private readonly model: LocalModel,
    /** K/V entries kept (0: none; every prompt is then prefilled whole) */
    readonly capacity: number,
    /** what one more prefill call costs, in prompt tokens prefilled */
    private readonly callCost: number,
    /** the sampler's statistics, updated in place */
    private readonly stats: PrefixStats,
  ) {}

  clear() {
    this.lru.clear()
  }

  private keyOf(version: number, tokens: ReadonlyArray<number>) {
    return `${version}|${tokens.join(",")}`
  }

  /** Adds an entry, evicting the least recently used ones. */
  private remember(key: string, e: PrefixEntry) {
    this.lru.set(key, e)
    while (this.lru.size > this.capacity) this.lru.delete(this.lru.keys().next().value as string)
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
   * Prefills the distinct prompts of a batch (with the LRU) through `view`, the weights
   * served at `version`. Returns one entry per prompt.
   */
  prefill(view: WeightView, version: number, prompts: ReadonlyArray<ReadonlyArray<number>>): Array<PrefixEntry> {
    const P = at(prompts, 0, "a batch's first prompt").length
    const entries = new Map<string, PrefixEntry>()
    const plans = this.plan(version, prompts, P, entries)
    this.level(plans, P)
    const fresh: Array<readonly [string, PrefixEntry]> = []
    // one chunked prefill per reused length
    for (const r of [...new Set(plans.map((m) => m.reuse))]) {
      for (const [key, entry] of this.prefillRun(view, plans.filter((m) => m.reuse === r), r, P)) {
        fresh.push([key, entry])
        entries.set(key, entry)
      }
    }
    if (this.capacity > 0) for (const [key, e] of fresh) this.remember(key, e)
    return prompts.map((p) => present(entries.get(this.keyOf(version, p)), "the prefilled entry of a prompt"))
  }

  /**
   * The batch's distinct prompts that need model work, each with the entry it can start
   * from; prompts served whole from the LRU (hits) go straight into `entries`.
   */
  private plan(version: number, prompts: ReadonlyArray<ReadonlyArray<number>>, P: number, entries: Map<string, PrefixEntry>): Array<Plan> {
    const plans: Array<Plan> = []
    for (const p of prompts) {
      // the chunked prefill lays prompts out as rows of P positions
      if (p.length !== P) throw new Error(`the prompts of a batch must have one length: ${p.length} and ${P}`)
      const key = this.keyOf(version, p)
      if (entries.has(key) || plans.some((m) => m.key === key)) continue
      const hit = this.lru.get(key)
      if (hit) {
        this.touch(key, hit)
        entries.set(key, hit)
        this.stats.prefixHits++
        this.stats.reusedTokens += P
        continue
      }
      const found = this.capacity > 0 ? this.lookup(p) : undefined
      if (found) this.touch(found.key, found.entry)
      plans.push({ key, p, src: found?.entry, reuse: found?.reuse ?? 0 })
    }
    return plans
  }

  /** Sorts the plans and sets the length each one reuses to its call's (`callLevels`); counts them. */
  private level(plans: Array<Plan>, P: number) {
    // as few calls as pay: each run of plans (by reusable length) starts from its smallest
    plans.sort((a, b) => a.reuse - b.reuse)
    const level = callLevels(plans.map((m) => m.reuse), P, this.callCost)
    plans.forEach((m, i) => {
      m.reuse = at(level, i, "a plan's call level")
      this.stats.prefixMisses++
      if (m.reuse > 0) this.stats.partialHits++
      this.stats.reusedTokens += m.reuse
      this.stats.prefilledTokens += P - m.reuse
    })
  }

  /**
   * One chunked prefill call: the plans of `part` all reuse their first `r` positions
   * (from their entries) and run positions r .. P - 1 through the model. Returns each
   * plan's key and new entry.
   */
  private prefillRun(view: WeightView, part: ReadonlyArray<Plan>, r: number, P: number): Array<readonly [string, PrefixEntry]> {
    const V = this.model.config.vocabSize
    const { nHeads: H } = this.model.config
    const dh = this.model.headDim
    const U = part.length
    const E = P - r
    const tok = new Int32Array(U * E)
    part.forEach((m, u) => tok.set(m.p.slice(r), u * E))
    const past = this.reusedPast(part, r)
    const out = this.model.extend(view, tok, U, E, past)
    disposeCache(past)
    const vals = out.logits.dataSync() as Float32Array
    out.logits.dispose()
    const n = H * P * dh
    const ks = out.cache.k.map((t) => t.dataSync() as Float32Array)
    const vs = out.cache.v.map((t) => t.dataSync() as Float32Array)
    disposeCache(out.cache)
    return part.map((m, u) => {
      const logprobs = new Array<number>(P).fill(0)
      if (r > 0) {
        const src = present(m.src, "the cached entry a prefill reuses")
        for (let i = 0; i < r; i++) logprobs[i] = at(src.logprobs, i, "a cached log-prob")
        // r < P (a plan reuses less than its prompt) and every prompt has P tokens (checked in `plan`)
        logprobs[r] = r === src.tokens.length ? logprobAt(src.next, 0, V, m.p[r]!) : at(src.logprobs, r, "a cached log-prob")
      }
      // i < P: every prompt has P tokens (checked in `plan`)
      for (let i = r + 1; i < P; i++) logprobs[i] = logprobAt(vals, (u * E + i - 1 - r) * V, V, m.p[i]!)
      const entry: PrefixEntry = {
        tokens: m.p.slice(),
        k: ks.map((a) => a.slice(u * n, (u + 1) * n)),
        v: vs.map((a) => a.slice(u * n, (u + 1) * n)),
        logprobs,
        next: vals.slice((u * E + E - 1) * V, (u * E + E) * V),
      }
      return [m.key, entry] as const
    })
  }

  /** The reused positions of every plan of `part` as the past of a prefill: [U, H, r, dh] per layer (none when r = 0). */
  private reusedPast(part: ReadonlyArray<Plan>, r: number): KvCache {
    const past: KvCache = { k: [], v: [], length: r }
    if (r === 0) return past
    const { nHeads: H, nLayers } = this.model.config
    const dh = this.model.headDim
    const U = part.length
    const srcs = part.map((m) => present(m.src, "the cached entry a prefill reuses"))
    const pastOf = (kv: "k" | "v", l: number) => {
      const buf = new Float32Array(U * H * r * dh)
      srcs.forEach((src, u) => copyPositions(at(src[kv], l, "a cached layer's K/V"), src.tokens.length, r, H, dh, buf, u * H * r * dh))
      return tf.tensor4d(buf, [U, H, r, dh])
    }
    for (let l = 0; l < nLayers; l++) {
      past.k.push(pastOf("k", l))
      past.v.push(pastOf("v", l))
    }
    return past
  }

  /**
   * Keeps each finished row's K/V: its prompt and sampled tokens except the last (those
   * fed through the model), with the logits its last token was sampled from. Rows with one
   * token (their entry is the prompt's) and rows that leave no room to continue are skipped.
   */
  keepRows(version: number, prompts: ReadonlyArray<ReadonlyArray<number>>, promptLogprobs: ReadonlyArray<ReadonlyArray<number>>, rows: ReadonlyArray<FinishedRow>, rowReq: ReadonlyArray<number>, cache: KvCache) {
    const { nHeads: H, nLayers, contextLength: ctx } = this.model.config
    const dh = this.model.headDim
    const C = cache.length
    // read back once, on the first row kept
    let ks: Array<Float32Array> | undefined
    let vs: Array<Float32Array> | undefined
    rows.forEach((row, r) => {
      const sampled = row.tokens.length
      const request = at(rowReq, r, "a row's request")
      const prompt = at(prompts, request, "a row's prompt")
      const T = prompt.length + sampled - 1
      if (sampled < 2 || T > ctx - 2 || T > C || !row.next) return
      const tokens = [...prompt, ...row.tokens.slice(0, sampled - 1)]
      const key = this.keyOf(version, tokens)
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
        logprobs: [...at(promptLogprobs, request, "a row's prompt log-probs"), ...row.modelLogprobs.slice(0, sampled - 1)],
        next: row.next,
      })
    })
  }
}

/**
 * Splits plans sorted by the length they could reuse into runs, one prefill call each,
 * starting at the run's smallest length: minimises calls · `callCost` + tokens prefilled.
 * Returns the length each plan reuses.
 */
const callLevels = (reuse: ReadonlyArray<number>, P: number, callCost: number): Array<number> => {
  const n = reuse.length
  // best and from have n + 1 slots and reuse n: every index below is at most n (a < b <= n)
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
  for (let b = n; b > 0; ) {
    // plans a .. b - 1 are one call, from a's length (from[b] < b)
    const a = from[b]!
    for (let i = a; i < b; i++) out[i] = reuse[a]!
    b = a
  }
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

/**
 * `forwardBackward` over micro-batches with the update of one call, for any loss
 * aggregation.
 *
 * Every backend reports a call's loss as the mean over that call's active tokens (the
 * Loops rule), and gradients of successive calls add up. Sent as k chunks, a step would
 * get about k times the gradient, each chunk weighted by its own token count. So each
 * chunk is scaled by `chunk tokens / step tokens` before it is sent: every built-in loss
 * is linear in the advantage (and dro's penalty in `beta`), cross-entropy in its weights,
 * so the chunks' gradients sum to the gradient of the whole step as one call, on any
 * backend, in-process or over HTTP. The reported loss sums are scaled back.
 *
 * The same trick gives the other aggregations. A step's objective is
 * `J = sum_d w_d * sum_{t active in d} l_t`, with one weight `w_d` per datum
 * (`token_mean`: `1/N`; `sequence_mean`: `1/(S * n_seq)`; `constant`: `1/C`, see
 * {@link aggregationWeights}). A call over datums `D_c` with `N_c` active tokens computes
 * `(1/N_c) * sum_{d in D_c} sum_t l_t`; with each datum's advantages (or cross-entropy
 * weights) multiplied by `k_d = w_d * N_c` it computes `sum_{d in D_c} w_d * sum_t l_t`
 * exactly, because each per-token loss is `A` times a function of the log-probs
 * (importance_sampling, cispo; ppo and dppo too, whose clip and mask depend on the sign
 * of `A` only, which a positive `k_d` keeps), `w` times one (cross_entropy), or, for dro,
 * linear in `A` and `beta` together: there `beta` (one per call) is scaled by `k_d`
 * too, so a dro call only ever holds datums of one weight. Which positions are active
 * does not change (`k_d > 0`). The calls' gradients add up to the gradient of `J`.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { BackendError, type Datum, float32, type ForwardBackwardResult, type LossFn, type LossFnConfig, modelInputTokens } from "../contract/Contract.ts"
import { activeCount } from "../loss/Loss.ts"
import { render, shiftDatum } from "../contract/DatumIssue.ts"
import { DRO_BETA_DEFAULT } from "./Loss.ts"
import { type Pending, submitter, Trainer } from "../services/Trainer.ts"

/** What a chunked call adds up to. @since 0.1.0 @category models */
export interface ChunkedResult {
  /** per-datum outputs, in the order of `data` */
  readonly lossFnOutputs: ForwardBackwardResult["lossFnOutputs"]
  /** the step's loss as aggregated (token mean: as one call would report it) */
  readonly loss: number
  /** `loss * activeTokens` (token mean: the sum of the per-token losses) */
  readonly lossSum: number
  readonly activeTokens: number
  /** the trainer's clip fraction pooled over tokens, when the loss has a clip (ppo, cispo, dppo) */
  readonly clipFraction: number | undefined
}

const scaled = (values: ReadonlyArray<number>, c: number) => float32(values.map((v) => v * c))

/** One datum with its advantages (or cross-entropy weights) multiplied by `c`. */
const scaleDatum = (d: Datum, lossFn: LossFn, c: number): Datum => {
  if (c === 1) return d
  if (lossFn === "cross_entropy") {
    const w = d.lossFnInputs["weights"]?.data ?? modelInputTokens(d.modelInput).map(() => 1)
    return { ...d, lossFnInputs: { ...d.lossFnInputs, weights: scaled(w, c) } }
  }
  const a = d.lossFnInputs["advantages"]
  return a === undefined ? d : { ...d, lossFnInputs: { ...d.lossFnInputs, advantages: scaled(a.data, c) } }
}

/**
 * What the denominators of `token_mean` and `sequence_mean` count: the samples that train
 * (`trained`, the default) or every sample of the step's batch (`batch`, with its totals
 * given as {@link BatchTotals}).
 * @since 0.1.0 @category models
 */
export type Denominator = "trained" | "batch"

/** How a step's per-token losses add up (see `RunSettings.lossAggregation`). @since 0.1.0 @category models */
export type Aggregation =
  | { readonly kind: "token_mean"; readonly denominator?: Denominator | undefined }
  | { readonly kind: "sequence_mean"; readonly denominator?: Denominator | undefined }
  | { readonly kind: "constant"; readonly constant: number }

/**
 * The step's batch as `denominator: "batch"` counts it: its unmasked samples, those whose
 * advantage is 0 included, and their sampled tokens.
 * @since 0.1.0 @category models
 */
export interface BatchTotals {
  readonly samples: number
  readonly tokens: number
}

/**
 * Each datum's weight `w_d` in the step's objective `sum_d w_d * sum_t l_t`, for an
 * aggregation. `sequenceOf[d]` names the sample a datum was cut from (an episode cut into
 * one datum per turn is one sample: its tokens are averaged together). Undefined for
 * `token_mean`: {@link forwardBackwardChunked}'s default.
 *
 * - token_mean: `1/N`, N = the step's active tokens;
 * - sequence_mean: `1/(S * n_s)`, n_s = the active tokens of the datum's sample, S = the
 *   samples with at least one active token (a sample that trains nothing counts in no
 *   denominator, as an inactive token counts in none under token_mean);
 * - constant: `1/C`.
 *
 * With `denominator: "batch"` and the step's `batch` totals, N is `batch.tokens` and S is
 * `batch.samples`: a sample whose advantage is 0 (not among `data`) still counts, as
 * GRPO's `1/G` and DAPO's `1/sum|o_i|` count it.
 * @since 0.1.0 @category combinators
 */
export const aggregationWeights = (
  data: ReadonlyArray<Datum>,
  lossFn: LossFn,
  aggregation: Aggregation,
  sequenceOf: ReadonlyArray<string | number> = data.map((_, i) => i),
  batch?: BatchTotals,
): ReadonlyArray<number> | undefined => {
  const overBatch = aggregation.kind !== "constant" && aggregation.denominator === "batch" && batch !== undefined
  switch (aggregation.kind) {
    case "token_mean":
      return overBatch && batch.tokens > 0 ? data.map(() => 1 / batch.tokens) : undefined
    case "constant":
      return data.map(() => 1 / aggregation.constant)
    case "sequence_mean": {
      if (sequenceOf.length !== data.length) throw new Error(`aggregationWeights: sequenceOf names ${sequenceOf.length} samples for ${data.length} datums; give one per datum`)
      const tokens = new Map<string | number, number>()
      data.forEach((d, i) => {
        const key = sequenceOf[i]! // checked: one per datum
        tokens.set(key, (tokens.get(key) ?? 0) + activeCount([d], lossFn))
      })
      const samples = overBatch ? batch.samples : [...tokens.values()].filter((n) => n > 0).length
      return sequenceOf.map((key) => {
        const n = tokens.get(key)! // every key was set above
        return n === 0 ? 0 : 1 / (samples * n)
      })
    }
  }
}

/**
 * The `[from, to)` datum ranges of the calls: chunks of `size`; dro's beta is one per call,
 * so a dro call holds datums of one weight.
 */
const callRanges = (count: number, size: number, lossFn: LossFn, weights: ReadonlyArray<number> | undefined): Array<readonly [number, number]> => {
  const calls: Array<readonly [number, number]> = []
  for (let i = 0; i < count; i += size) {
    const end = Math.min(count, i + size)
    if (lossFn !== "dro" || weights === undefined) {
      calls.push([i, end])
      continue
    }
    let from = i
    for (let j = i + 1; j <= end; j++) {
      if (j === end || weights[j] !== weights[from]) {
        calls.push([from, j])
        from = j
      }
    }
  }
  return calls
}

/**
 * A call's failure in terms of the step: the issue's datum (its index in the call) becomes
 * its index in the step, and the message is rendered again from the moved issue. A refusal
 * without an issue (a remote backend's text) says which datums the call held.
 * @since 0.1.0 @category combinators
 */
export const inStep = (e: BackendError, from: number, to: number, count: number): BackendError => {
  if (from === 0 && to === count) return e
  if (e.issue !== undefined) {
    const issue = shiftDatum(e.issue, from)
    return new BackendError({ reason: e.reason, operation: e.operation, message: render(issue), issue })
  }
  if (e.reason !== "InvalidInput") return e
  return new BackendError({ reason: e.reason, operation: e.operation, message: `${e.message} (in the call of datums ${from} to ${to - 1} of ${count}; indices count from the call's first)` })
}

/** What `submitChunked` takes besides the datums and the loss. @since 0.1.0 @category models */
export interface ChunkOptions {
  readonly chunk: number
  readonly lossFnConfig?: LossFnConfig
  readonly weights?: ReadonlyArray<number> | undefined
  readonly onChunk?: (done: number, total: number) => Effect.Effect<void>
}

/** One call of a chunked step: its datums (scaled), its config, and its range in the step. */
interface Call {
  readonly from: number
  readonly to: number
  readonly data: ReadonlyArray<Datum>
  readonly config: LossFnConfig
  /** the active tokens of its datums, counted here */
  readonly own: number
}

/** The calls of a step: each chunk's datums scaled so the calls' gradients add up to the step's. */
const callsOf = (data: ReadonlyArray<Datum>, lossFn: LossFn, options: ChunkOptions): Array<Call> => {
  const size = options.chunk <= 0 ? data.length : options.chunk
  const config = options.lossFnConfig ?? {}
  const total = activeCount(data, lossFn)
  const weights = options.weights
  const ranges = callRanges(data.length, size, lossFn, weights)
  return ranges.map(([from, to]) => {
    const slice = data.slice(from, to)
    const own = activeCount(slice, lossFn)
    // each datum's scale k_d: token mean, own / total for every datum; else w_d * own
    // (weights has one entry per datum, checked by the caller, and from + j < to <= data.length)
    const scaledData = slice.map((d, j) => {
      const k = own === 0 ? 1 : weights === undefined ? (ranges.length === 1 || total === 0 ? 1 : own / total) : weights[from + j]! * own
      return { k, datum: scaleDatum(d, lossFn, k) }
    })
    // dro's penalty scales with beta (one per call: its datums share one k)
    const k0 = scaledData[0]?.k
    const callConfig = lossFn === "dro" && k0 !== undefined && k0 !== 1 ? { ...config, beta: (config["beta"] ?? DRO_BETA_DEFAULT) * k0 } : config
    return { from, to, data: scaledData.map((x) => x.datum), config: callConfig, own }
  })
}

/** The calls' results added up, as one call over the whole step would report them. */
const addUp = (results: ReadonlyArray<{ readonly call: Call; readonly out: ForwardBackwardResult }>): ChunkedResult => {
  let objective = 0
  let active = 0
  let clipped = 0
  let hasClip = false
  for (const { call, out } of results) {
    const chunkActive = out.metrics["active_tokens"] ?? call.own
    // the call's token mean is its share of the objective
    objective += chunkActive === 0 ? 0 : (out.metrics["loss:sum"] ?? 0) / chunkActive
    active += chunkActive
    if (out.metrics["clip_fraction"] !== undefined) {
      hasClip = true
      clipped += out.metrics["clip_fraction"] * chunkActive
    }
  }
  return {
    lossFnOutputs: results.flatMap((r) => r.out.lossFnOutputs),
    loss: objective,
    lossSum: objective * active,
    activeTokens: active,
    clipFraction: hasClip && active > 0 ? clipped / active : undefined,
  }
}

/**
 * Submits `forwardBackward` of `data` in calls of at most `chunk` datums (0 = one call),
 * back to back (`Trainer.submitter`: a backend that queues work gets them all before
 * the first has run), with the same accumulated gradient as a single call. Succeeds once
 * every call is queued, with the effect that awaits them and adds them up. `weights`
 * (one per datum, see {@link aggregationWeights}) makes the gradient that of
 * `sum_d weights[d] * sum_t l_t`; without them, of the token mean over all of `data`.
 * The reported `loss` is that objective. `onChunk` sees each call's result arrive.
 * @since 0.1.0 @category training
 */
export const submitChunked = Effect.fnUntraced(function* (data: ReadonlyArray<Datum>, lossFn: LossFn, options: ChunkOptions) {
  const submit = submitter(yield* Trainer)
  if (options.weights !== undefined && options.weights.length !== data.length) {
    return yield* new BackendError({
      reason: "InvalidInput",
      operation: "forwardBackwardChunked",
      message: `weights has ${options.weights.length} entries for ${data.length} datums: give one per datum`,
    })
  }
  const calls = callsOf(data, lossFn, options)
  const pending: Array<{ readonly call: Call; readonly result: Pending<ForwardBackwardResult> }> = []
  for (const call of calls) {
    const opts = Object.keys(call.config).length > 0 || options.lossFnConfig !== undefined ? { lossFnConfig: call.config } : {}
    const result = yield* submit.forwardBackward(call.data, lossFn, opts).pipe(Effect.mapError((e) => inStep(e, call.from, call.to, data.length)))
    pending.push({ call, result: Effect.mapError(result, (e) => inStep(e, call.from, call.to, data.length)) })
  }
  return Effect.gen(function* () {
    const results: Array<{ readonly call: Call; readonly out: ForwardBackwardResult }> = []
    for (const { call, result } of pending) {
      results.push({ call, out: yield* result })
      if (options.onChunk) yield* options.onChunk(call.to, data.length)
    }
    return addUp(results)
  })
})

/**
 * `forwardBackward` of `data` in calls of at most `chunk` datums, awaited: {@link submitChunked}, then its result.
 * @since 0.1.0 @category training
 */
export const forwardBackwardChunked = (data: ReadonlyArray<Datum>, lossFn: LossFn, options: ChunkOptions) => Effect.flatten(submitChunked(data, lossFn, options))

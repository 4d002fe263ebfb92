/**
 * `forwardBackward` over micro-batches with the update of one call.
 *
 * Every backend reports a call's loss as the mean over that call's active tokens (the
 * Loops rule), and gradients of successive calls add up. Sent as k chunks, a step would
 * get about k times the gradient, each chunk weighted by its own token count. So each
 * chunk is scaled by `chunk tokens / step tokens` before it is sent: every built-in loss
 * is linear in the advantage (and dro's penalty in `beta`), cross-entropy in its weights,
 * so the chunks' gradients sum to the gradient of the whole step as one call, on any
 * backend, in-process or over HTTP. The reported loss sums are scaled back.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { BackendError, type Datum, float32, type ForwardBackwardResult, type LossFn, type LossFnConfig, modelInputTokens } from "../Contract.ts"
import { activeCount } from "../Datum.ts"
import { Trainer } from "../Trainer.ts"

/** What a chunked call adds up to. @since 0.1.0 @category models */
export interface ChunkedResult {
  /** per-datum outputs, in the order of `data` */
  readonly lossFnOutputs: ForwardBackwardResult["lossFnOutputs"]
  /** the step's token-mean loss, as one call would report it */
  readonly loss: number
  readonly lossSum: number
  readonly activeTokens: number
  /** the trainer's clip fraction pooled over tokens, when the loss has a clip (ppo, cispo, dppo) */
  readonly clipFraction: number | undefined
}

const scaled = (values: ReadonlyArray<number>, c: number) => float32(values.map((v) => v * c))

/**
 * A chunk rewritten so that its call's token mean contributes `c` times as much:
 * advantages (and dro's `beta`) or cross-entropy weights are multiplied by `c`.
 * @since 0.1.0 @category combinators
 */
export const scaleChunk = (
  data: ReadonlyArray<Datum>,
  lossFn: LossFn,
  config: LossFnConfig,
  c: number,
): { readonly data: ReadonlyArray<Datum>; readonly config: LossFnConfig } => {
  if (c === 1) return { data, config }
  const out = data.map((d): Datum => {
    if (lossFn === "cross_entropy") {
      const w = d.lossFnInputs["weights"]?.data ?? modelInputTokens(d.modelInput).map(() => 1)
      return { ...d, lossFnInputs: { ...d.lossFnInputs, weights: scaled(w, c) } }
    }
    const a = d.lossFnInputs["advantages"]
    return a === undefined ? d : { ...d, lossFnInputs: { ...d.lossFnInputs, advantages: scaled(a.data, c) } }
  })
  const beta = config["beta"]
  return { data: out, config: lossFn === "dro" ? { ...config, beta: (beta ?? 0.05) * c } : config }
}

/**
 * `forwardBackward` of `data` in calls of at most `chunk` datums (0 = one call), with
 * the same accumulated gradient as a single call. `onChunk` sees progress.
 * @since 0.1.0 @category training
 */
export const forwardBackwardChunked = Effect.fnUntraced(function* (
  data: ReadonlyArray<Datum>,
  lossFn: LossFn,
  options: {
    readonly chunk: number
    readonly lossFnConfig?: LossFnConfig
    readonly onChunk?: (done: number, total: number) => Effect.Effect<void>
  },
) {
  const trainer = yield* Trainer
  const size = options.chunk <= 0 ? data.length : options.chunk
  const config = options.lossFnConfig ?? {}
  const total = activeCount(data, lossFn)
  const outputs: Array<ForwardBackwardResult["lossFnOutputs"][number]> = []
  let lossSum = 0
  let active = 0
  let clipped = 0
  let hasClip = false
  for (let i = 0; i < data.length; i += size) {
    const slice = data.slice(i, i + size)
    const own = activeCount(slice, lossFn)
    const c = size >= data.length || own === 0 || total === 0 ? 1 : own / total
    const chunk = scaleChunk(slice, lossFn, config, c)
    const out: ForwardBackwardResult = yield* trainer.forwardBackward(
      chunk.data,
      lossFn,
      Object.keys(chunk.config).length > 0 || options.lossFnConfig !== undefined ? { lossFnConfig: chunk.config } : {},
    ).pipe(
      // a chunk's datum index is its index in `data`
      Effect.mapError((e) => (i === 0 ? e : new BackendError({ ...e, message: e.message.replace(/data\[(\d+)\]/g, (_, n) => `data[${Number(n) + i}]`) }))),
    )
    outputs.push(...out.lossFnOutputs)
    lossSum += (out.metrics["loss:sum"] ?? 0) / c
    const chunkActive = out.metrics["active_tokens"] ?? own
    active += chunkActive
    if (out.metrics["clip_fraction"] !== undefined) {
      hasClip = true
      clipped += out.metrics["clip_fraction"] * chunkActive
    }
    if (options.onChunk) yield* options.onChunk(Math.min(data.length, i + size), data.length)
  }
  return {
    lossFnOutputs: outputs,
    loss: active === 0 ? 0 : lossSum / active,
    lossSum,
    activeTokens: active,
    clipFraction: hasClip && active > 0 ? clipped / active : undefined,
  } satisfies ChunkedResult
})

/**
 * Custom losses, as Tinker's `forward_backward_custom` does it: any differentiable
 * function of the learner's log-probabilities, trained through the built-in losses.
 *
 * 1. `forward` (cross-entropy, no gradient) gives the learner log-prob `lp[d][t]` of
 *    every position of every datum at the current weights.
 * 2. The user's Effect function gets the data and those log-probs and returns a loss and
 *    its gradient `g[d][t] = dL/dlp[d][t]`.
 * 3. A linear surrogate carries that gradient into the network: a `forward_backward`
 *    with `importance_sampling`, `loss_fn_inputs.logprobs = lp` (so the ratio
 *    `rho = exp(lp - q)` is 1 at the current weights) and `advantages = -N·g`, where N is
 *    the number of positions with a nonzero gradient. Per active position that loss is
 *    `-rho·A`, whose derivative with respect to `lp` at rho = 1 is `-A = N·g`; the backend
 *    divides by its active-token count N (the token mean of the Loops rule), so the
 *    accumulated gradient is exactly `sum_{d,t} g[d][t] · dlp[d][t]/dθ`, the gradient of L.
 *
 * Only positions whose log-prob depends on the weights can carry a gradient: position 0
 * (nothing predicts the first token) and positions whose `target_tokens` is -100 are
 * constant, so a gradient there is ignored. Positions with a zero gradient are inactive.
 *
 * It uses only the `Trainer` service, so it works on every backend (embedded, worker
 * threads, HTTP). Gradients accumulate like any `forwardBackward`; call `optimStep` after.
 *
 * @example
 * import { Effect } from "effect"
 * import { CustomLoss } from "gyre"
 *
 * // mean negative log-likelihood of the completion tokens, written by hand
 * const nll = CustomLoss.make("nll", (data, logprobs) => {
 *   const n = logprobs.reduce((s, lp) => s + lp.length - 1, 0)
 *   return Effect.succeed({
 *     loss: -logprobs.reduce((s, lp) => s + lp.slice(1).reduce((a, b) => a + b, 0), 0) / n,
 *     gradients: logprobs.map((lp) => lp.map((_, t) => (t === 0 ? 0 : -1 / n))),
 *   })
 * })
 * const result = yield* CustomLoss.forwardBackward(data, nll)
 *
 * @since 0.1.0
 */
import { Effect, Schema } from "effect"
import { type Datum, float32, type ForwardBackwardResult, int64, modelInputTokens } from "../contract/Contract.ts"
import { at } from "../util/Lookup.ts"
import { forwardBackwardChunked } from "../loss/MicroBatch.ts"
import { Trainer } from "../services/Trainer.ts"

/**
 * What a custom loss returns: the loss value, its gradient with respect to each
 * datum's log-probs (`gradients[d]` has the datum's length L, like `logprobs[d]`), and
 * optional metrics to report with it.
 * @since 0.1.0 @category models
 */
export interface CustomLossOutput {
  readonly loss: number
  readonly gradients: ReadonlyArray<ReadonlyArray<number> | Float32Array | Float64Array>
  readonly metrics?: Readonly<Record<string, number>>
}

/**
 * A named custom loss. `fn` gets the data and, for each datum, the learner log-prob of
 * every position (position 0 is 0), and returns `CustomLossOutput`.
 * @since 0.1.0 @category models
 */
export interface CustomLoss<E = never, R = never> {
  readonly name: string
  readonly fn: (
    data: ReadonlyArray<Datum>,
    logprobs: ReadonlyArray<ReadonlyArray<number>>,
  ) => Effect.Effect<CustomLossOutput, E, R>
}

/**
 * A custom loss failed: its function returned something unusable (`Gradient`, `Loss`),
 * or the trainer refused a call (`Backend`). The message names the loss and the datum.
 * @since 0.1.0 @category errors
 */
export class CustomLossError extends Schema.TaggedError<CustomLossError>()("CustomLossError", {
  loss: Schema.String,
  reason: Schema.Literals(["Gradient", "Loss", "Backend"]),
  message: Schema.String,
}) {}

/** @since 0.1.0 @category constructors */
export const make = <E = never, R = never>(name: string, fn: CustomLoss<E, R>["fn"]): CustomLoss<E, R> => {
  if (typeof name !== "string" || name.length === 0) throw new TypeError("CustomLoss.make: give the loss a name (it appears in error messages)")
  return { name, fn }
}

/** Options of `forwardBackward`. @since 0.1.0 @category models */
export interface CustomLossOptions {
  /** datums per surrogate `forwardBackward` call (0 = all in one call, the default); the update is the same */
  readonly chunk?: number
}

/**
 * What `forwardBackward` returns: the forward pass's per-datum log-probs, and metrics:
 * the user's `loss` and metrics, plus `active_tokens` (positions with a nonzero
 * gradient) and `surrogate:loss` (the built-in loss the gradient went through).
 * @since 0.1.0 @category models
 */
export type CustomLossResult = ForwardBackwardResult

/** The data a forward pass reads: the tokens and, when given, `target_tokens` (other inputs belong to the custom loss). */
const forwardDatum = (d: Datum): Datum => {
  const target = d.lossFnInputs["target_tokens"]
  return { modelInput: d.modelInput, lossFnInputs: target !== undefined ? { target_tokens: int64(target.data) } : {} }
}

/**
 * The learner log-prob of every position of every datum at the current weights
 * (`forward` with cross-entropy: no gradient, the accumulated gradients are left alone).
 * @since 0.1.0 @category training
 */
export const logprobs = Effect.fn("CustomLoss.logprobs")(function* (data: ReadonlyArray<Datum>, loss = "custom loss") {
  const trainer = yield* Trainer
  const out = yield* trainer.forward(data.map(forwardDatum), "cross_entropy").pipe(
    Effect.mapError((e) => new CustomLossError({ loss, reason: "Backend", message: `custom loss ${JSON.stringify(loss)}: forward (${e.reason}): ${e.message}` })),
  )
  return out
})

/**
 * Checks a loss function's output against the data; returns the surrogate datums and
 * their active-token count, or a message naming the loss and the datum.
 */
const surrogate = (
  name: string,
  data: ReadonlyArray<Datum>,
  lps: ReadonlyArray<ReadonlyArray<number>>,
  out: CustomLossOutput,
): { readonly data: Array<Datum>; readonly active: number } | CustomLossError => {
  const bad = (reason: "Gradient" | "Loss", message: string) => new CustomLossError({ loss: name, reason, message: `custom loss ${JSON.stringify(name)}: ${message}` })
  if (typeof out !== "object" || out === null) return bad("Loss", `returned ${String(out)}; return { loss, gradients }`)
  if (typeof out.loss !== "number" || !Number.isFinite(out.loss)) return bad("Loss", `loss is ${String(out.loss)}, not a finite number`)
  if (!Array.isArray(out.gradients)) return bad("Gradient", "gradients is missing: return one array per datum, each as long as the datum")
  if (out.gradients.length !== data.length) {
    return bad("Gradient", `returned ${out.gradients.length} gradient arrays for ${data.length} datums; return one per datum, in order`)
  }
  // each datum with its log-probs and its gradient, constant positions zeroed
  const rows: Array<{ readonly datum: Datum; readonly lp: ReadonlyArray<number>; readonly grad: Array<number> }> = []
  let active = 0
  for (const [d, datum] of data.entries()) {
    const raw: unknown = out.gradients[d]
    const lp = at(lps, d, "log-probs of datum")
    const L = lp.length
    if (!Array.isArray(raw) && !(raw instanceof Float32Array) && !(raw instanceof Float64Array)) {
      return bad("Gradient", `data[${d}]: the gradient is ${String(raw)}, not an array of ${L} numbers`)
    }
    const g = raw as ArrayLike<number>
    if (g.length !== L) {
      return bad("Gradient", `data[${d}]: the gradient has length ${g.length}, but the datum has ${L} positions; gradients[d] must have the shape of logprobs[d] ([${L}])`)
    }
    const target = datum.lossFnInputs["target_tokens"]?.data
    const row = new Array<number>(L).fill(0)
    for (let t = 0; t < L; t++) {
      const v = g[t]! // g.length === L, checked above
      if (typeof v !== "number" || !Number.isFinite(v)) return bad("Gradient", `data[${d}]: the gradient at position ${t} is ${String(v)}, not a finite number`)
      // constant positions: nothing predicts position 0, and -100 targets are ignored
      if (t === 0 || (target !== undefined && target[t] === -100) || v === 0) continue
      row[t] = v
      active++
    }
    rows.push({ datum, lp, grad: row })
  }
  const surrogates = rows.map(({ datum, lp, grad }): Datum => {
    const target = datum.lossFnInputs["target_tokens"]
    return {
      modelInput: datum.modelInput,
      lossFnInputs: {
        // rho = exp(lp - q) = 1 at the current weights; at most 0 as a log-prob must be
        logprobs: float32(lp.map((v) => Math.min(0, v))),
        advantages: float32(grad.map((v) => (v === 0 ? 0 : -active * v))),
        ...(target !== undefined ? { target_tokens: int64(target.data) } : {}),
      },
    }
  })
  return { data: surrogates, active }
}

/**
 * `forward` for the log-probs, the custom loss for the loss and its gradient, then a
 * `forwardBackward` of the linear surrogate that accumulates exactly that gradient (see
 * the module doc). Fails with `CustomLossError` naming the loss and the datum when the
 * gradient has the wrong shape or a non-finite value; the loss function's own errors
 * pass through.
 * @since 0.1.0 @category training
 */
export const forwardBackward = Effect.fn("CustomLoss.forwardBackward")(function* <E, R>(
  data: ReadonlyArray<Datum>,
  loss: CustomLoss<E, R>,
  options: CustomLossOptions = {},
) {
  const forward = yield* logprobs(data, loss.name)
  if (forward.lossFnOutputs.length !== data.length) {
    return yield* new CustomLossError({
      loss: loss.name,
      reason: "Backend",
      message: `custom loss ${JSON.stringify(loss.name)}: forward returned ${forward.lossFnOutputs.length} outputs for ${data.length} datums`,
    })
  }
  const lps = forward.lossFnOutputs.map((o, d) => {
    const L = modelInputTokens(data[d]!.modelInput).length // one output per datum, checked above
    // position 0 is reported as 0 or left out; either way the row has L entries
    return o.logprobs.length === L ? [...o.logprobs] : [...new Array<number>(L - o.logprobs.length).fill(0), ...o.logprobs]
  })
  const out = yield* loss.fn(data, lps)
  const built = surrogate(loss.name, data, lps, out)
  if (built instanceof CustomLossError) return yield* built
  let surrogateLoss = 0
  if (built.active > 0) {
    const trained = yield* forwardBackwardChunked(built.data, "importance_sampling", { chunk: options.chunk ?? 0 }).pipe(
      Effect.mapError((e) =>
        new CustomLossError({ loss: loss.name, reason: "Backend", message: `custom loss ${JSON.stringify(loss.name)}: forward_backward (${e.reason}): ${e.message}` })
      ),
    )
    surrogateLoss = trained.loss
  }
  return {
    lossFnOutputs: forward.lossFnOutputs,
    metrics: { ...out.metrics, loss: out.loss, active_tokens: built.active, "surrogate:loss": surrogateLoss },
  } satisfies CustomLossResult
})

/**
 * GSPO as a custom loss, for services that have no `gspo` loss (the runner trains `--loss
 * gspo` this way on every backend but the embedded one). Per datum d, over its active
 * positions T (advantage != 0, target not -100): `s = exp(mean_T(lp - q))`, each position's
 * term `-min(s·A_t, clip(s, lo, hi)·A_t)`, and the loss `sum_d w_d · sum_T term`, with
 * `w_d` the run's aggregation weight of the datum (default `1/N`, the token mean). Its
 * gradient at t is `w_d · -s·A_t` where the sequence is not clipped, else 0: the embedded
 * `gspo` loss's, so both train alike.
 * @since 0.1.0 @category constructors
 */
export const gspo = (config: { readonly clip_low_threshold?: number; readonly clip_high_threshold?: number } = {}, weights?: ReadonlyArray<number>): CustomLoss =>
  make("gspo", (data, logprobs) => {
    const lo = config.clip_low_threshold ?? 1 - 3e-4
    const hi = config.clip_high_threshold ?? 1 + 4e-4
    const activeOf = (d: Datum) => {
      const adv = d.lossFnInputs["advantages"]?.data ?? []
      const target = d.lossFnInputs["target_tokens"]?.data
      return adv.map((a, t) => t > 0 && a !== 0 && target?.[t] !== -100)
    }
    const actives = data.map(activeOf)
    const N = actives.reduce((n, a) => n + a.filter(Boolean).length, 0)
    let loss = 0
    let clipped = 0
    const gradients = data.map((d, k) => {
      const lp = logprobs[k]!
      const q = d.lossFnInputs["logprobs"]?.data ?? []
      const adv = d.lossFnInputs["advantages"]?.data ?? []
      const on = actives[k]!
      const count = on.filter(Boolean).length
      const w = weights?.[k] ?? (N === 0 ? 0 : 1 / N)
      const s = Math.exp(on.reduce((sum, a, t) => (a ? sum + lp[t]! - (q[t] ?? 0) : sum), 0) / Math.max(1, count))
      const clippedS = Math.min(Math.max(s, lo), hi)
      return lp.map((_, t) => {
        if (!on[t]) return 0
        const A = adv[t]!
        const isClipped = s * A > clippedS * A
        loss += w * -Math.min(s * A, clippedS * A)
        if (isClipped) clipped++
        return isClipped ? 0 : w * -s * A
      })
    })
    return Effect.succeed({ loss, gradients, metrics: { "gspo:active_tokens": N, "gspo:clip_fraction": N === 0 ? 0 : clipped / N } })
  })

const softplus = (x: number) => (x > 0 ? x + Math.log1p(Math.exp(-x)) : Math.log1p(Math.exp(x)))
const sigmoid = (x: number) => 1 / (1 + Math.exp(-x))

/** The sum of a datum's completion log-probs: positions after the first whose target is not -100. */
const completionLogprob = (d: Datum, lps: ArrayLike<number>): number => {
  const target = d.lossFnInputs["target_tokens"]?.data
  let sum = 0
  for (let t = 1; t < lps.length; t++) if (target === undefined || target[t] !== -100) sum += lps[t]!
  return sum
}

/**
 * DPO (Rafailov et al. 2023) as a custom loss over preference pairs: `data` holds pairs,
 * chosen then rejected (`Datum.sft` layout: the prompt's targets -100), and `reference`
 * each datum's log-probs under the reference policy. With `c` and `r` the summed completion
 * log-probs, `z = beta · ((c − c_ref) − (r − r_ref))` and the loss is the mean over pairs of
 * `−log σ(z)`; its gradient is `−beta·σ(−z)/P` at each chosen completion token and the
 * opposite at each rejected one. Metrics: `dpo/reward_accuracy` (z > 0), `dpo/margin`
 * (mean z), `dpo/policy_accuracy` (the policy gives the chosen completion the higher
 * log-prob), `dpo/pairs`.
 * @since 0.1.0 @category constructors
 */
export const dpo = (beta: number, reference: ReadonlyArray<ReadonlyArray<number>>): CustomLoss =>
  make("dpo", (data, logprobs) => {
    const pairs = Math.floor(data.length / 2)
    const gradients = data.map((d) => new Array<number>(modelInputTokens(d.modelInput).length).fill(0))
    let loss = 0
    let margin = 0
    let rewardAccuracy = 0
    let policyAccuracy = 0
    for (let p = 0; p < pairs; p++) {
      const [c, r] = [2 * p, 2 * p + 1]
      const chosen = completionLogprob(data[c]!, logprobs[c]!)
      const rejected = completionLogprob(data[r]!, logprobs[r]!)
      const z = beta * ((chosen - completionLogprob(data[c]!, reference[c]!)) - (rejected - completionLogprob(data[r]!, reference[r]!)))
      loss += softplus(-z) / pairs
      margin += z / pairs
      if (z > 0) rewardAccuracy += 1 / pairs
      if (chosen > rejected) policyAccuracy += 1 / pairs
      const g = (-beta * sigmoid(-z)) / pairs
      for (const [k, sign] of [[c, 1], [r, -1]] as const) {
        const target = data[k]!.lossFnInputs["target_tokens"]?.data
        gradients[k]!.forEach((_, t) => {
          if (t > 0 && (target === undefined || target[t] !== -100)) gradients[k]![t] = sign * g
        })
      }
    }
    return Effect.succeed({ loss, gradients, metrics: { "dpo/reward_accuracy": rewardAccuracy, "dpo/margin": margin, "dpo/policy_accuracy": policyAccuracy, "dpo/pairs": pairs } })
  })

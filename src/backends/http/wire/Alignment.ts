/**
 * The one place where gyre's Loops convention meets Tinker's shifted one.
 *
 * gyre (Loops): a Datum's `modelInput` is the full sequence `x` of length L, every
 * per-token tensor has shape [L], and position i is about predicting `x_i` from
 * `x_<i`; position 0 predicts nothing and is never active. Learner log-probs come
 * back with shape [L] and `0` at position 0.
 *
 * Tinker: `model_input = x[:-1]` (length N = L-1), `target_tokens = x[1:]`, every
 * tensor has shape [N], and position j predicts `target_tokens[j]`. So wire position
 * j is gyre position j+1: going to the wire drops position 0, coming back puts a
 * neutral value there (0, or -100 for targets).
 *
 * Masking. gyre marks an ignored position with `target_tokens = -100` (Loops).
 * Tinker's built-in losses have no ignore index, so on the wire a masked position
 * carries its real next token with `weights = 0` (cross_entropy) or `advantages = 0`
 * (the RL losses); both mean "inactive" under either convention. Coming back, a
 * masked position keeps that real label (weight 0 or advantage 0), so the learner
 * log-prob of every target token is reported, as Tinker reports it (clients use them
 * as reference log-probs). A wire target of -100 (as a Loops client may send it)
 * becomes the position's own next token with weight 0 (cross_entropy) or
 * advantage 0.
 *
 * The round trip `fromWire(toWire(d))` gives `canonical(d)`: one chunk, shapes
 * written out, neutral values at position 0 and at masked positions, the last token
 * replaced by its label (a causal model never reads it), and `target_tokens` /
 * `weights` left out where they say nothing beyond the defaults (every target is the
 * next token, every weight is 1). `canonical` never changes a loss, its gradient or
 * which positions are active; only the learner log-prob reported at a position gyre
 * masked with -100 may differ (the local backend reports 0 for a -100 target, the
 * canonical form reports the real log-prob of the next token there).
 *
 * @since 0.1.0
 */
import { Result } from "effect"
import type { Datum, LossFn, LossFnOutput, ModelInput, TensorData, TopK } from "../../../contract/Contract.ts"
import { modelInputTokens } from "../../../contract/Contract.ts"
import type * as Wire from "./Wire.ts"

/** gyre's ignore index for `target_tokens`. @since 0.1.0 @category constants */
export const IGNORE = -100

const f32 = (data: ReadonlyArray<number>): TensorData => ({ data: [...data], dtype: "float32", shape: [data.length] })
const i64 = (data: ReadonlyArray<number>): TensorData => ({ data: [...data], dtype: "int64", shape: [data.length] })
const oneChunk = (tokens: ReadonlyArray<number>): ModelInput => ({ chunks: [{ type: "encoded_text", tokens: [...tokens] }] })

/** Per-position view of a gyre datum under one loss: which positions are masked. */
interface GyreView {
  readonly full: ReadonlyArray<number>
  /** the label of every position (the next token unless target_tokens says otherwise) */
  readonly target: ReadonlyArray<number>
  readonly masked: ReadonlyArray<boolean>
}

/** `xs[i]`, which the datum's lengths guarantee: a tensor shorter than the sequence is a bug of the caller. */
const at = (xs: ReadonlyArray<number>, i: number, what: string): number => {
  const v = xs[i]
  if (v === undefined) throw new Error(`Alignment: ${what} has no position ${i}; every per-token input must have the sequence's length`)
  return v
}

const gyreView = (datum: Datum, lossFn: LossFn): GyreView => {
  const full = modelInputTokens(datum.modelInput)
  const t = datum.lossFnInputs["target_tokens"]?.data
  const w = datum.lossFnInputs["weights"]?.data
  const ce = lossFn === "cross_entropy"
  // loops, not a closure per position: a step converts ~10^6 positions
  const masked = new Array<boolean>(full.length)
  const target = new Array<number>(full.length)
  for (let i = 0; i < full.length; i++) {
    const m = i === 0 || (t !== undefined && t[i] === IGNORE) || (ce && w !== undefined && w[i] === 0)
    masked[i] = m
    // a masked position is labelled with its own token: the label is never read
    target[i] = m || t === undefined ? full[i]! : at(t, i, "lossFnInputs.target_tokens")
  }
  return { full, target, masked }
}

/** `data[1..]`, each value through `f` with its gyre position. */
const shifted = (data: ReadonlyArray<number>, f?: (v: number, i: number) => number): Array<number> => {
  const out = new Array<number>(Math.max(0, data.length - 1))
  if (f === undefined) for (let i = 1; i < data.length; i++) out[i - 1] = data[i]!
  else for (let i = 1; i < data.length; i++) out[i - 1] = f(data[i]!, i)
  return out
}

const checkTensorLengths = (datum: Datum, at: string, L: number): string | undefined => {
  for (const [key, tensor] of Object.entries(datum.lossFnInputs)) {
    if (tensor.data.length !== L) {
      return `${at}.lossFnInputs.${key} has length ${tensor.data.length}, but modelInput has ${L} tokens; every per-token input has shape [L]`
    }
  }
  return undefined
}

/**
 * gyre Datum -> Tinker wire Datum (model_input = x[:-1], tensors of length L-1).
 * Fails when the datum has fewer than 2 tokens (nothing to predict) or a tensor's
 * length differs from the sequence's.
 * @since 0.1.0 @category conversions
 */
export const datumToWire = (datum: Datum, lossFn: LossFn, at = "datum"): Result.Result<Wire.Datum, string> => {
  const full = modelInputTokens(datum.modelInput)
  const L = full.length
  if (L < 2) return Result.fail(`${at}.modelInput has ${L} token(s); a datum needs at least 2 (position 0 predicts nothing)`)
  const bad = checkTensorLengths(datum, at, L)
  if (bad !== undefined) return Result.fail(bad)
  const { target, masked } = gyreView(datum, lossFn)
  const inputs: Record<string, Wire.TensorData> = {}
  for (const [key, tensor] of Object.entries(datum.lossFnInputs)) {
    if (key === "target_tokens" || key === "weights") continue
    const data = key === "advantages" ? shifted(tensor.data, (v, i) => (masked[i] ? 0 : v)) : shifted(tensor.data)
    inputs[key] = { data, dtype: tensor.dtype, shape: [L - 1] }
  }
  inputs["target_tokens"] = { data: target.slice(1), dtype: "int64", shape: [L - 1] }
  const w = datum.lossFnInputs["weights"]?.data
  if (lossFn === "cross_entropy") {
    inputs["weights"] = { data: shifted(full, (_, i) => (masked[i] ? 0 : (w?.[i] ?? 1))), dtype: "float32", shape: [L - 1] }
  } else if (w !== undefined) {
    inputs["weights"] = { data: shifted(w), dtype: "float32", shape: [L - 1] }
  }
  return Result.succeed({ model_input: { chunks: [{ type: "encoded_text", tokens: full.slice(0, -1) }] }, loss_fn_inputs: inputs })
}

/**
 * Tinker wire Datum -> gyre Datum. The wire datum must carry `target_tokens` (it
 * holds the last token of the sequence). Messages name the field under `at`.
 * @since 0.1.0 @category conversions
 */
export const datumFromWire = (datum: Wire.Datum, lossFn: LossFn, at = "datum"): Result.Result<Datum, string> => {
  const input = datum.model_input.chunks.flatMap((c) => c.tokens)
  const N = input.length
  if (N === 0) return Result.fail(`${at}.model_input is empty; it must hold the sequence without its last token`)
  for (const [key, tensor] of Object.entries(datum.loss_fn_inputs)) {
    const field = `${at}.loss_fn_inputs.${key}`
    if (tensor.sparse_crow_indices !== undefined || tensor.sparse_col_indices !== undefined) {
      return Result.fail(`${field} is sparse; only dense 1-D tensors are supported`)
    }
    if (tensor.shape !== undefined && (tensor.shape.length !== 1 || tensor.shape[0] !== N)) {
      return Result.fail(`${field}.shape is ${JSON.stringify(tensor.shape)}, expected [${N}] (the length of model_input)`)
    }
    if (tensor.data.length !== N) {
      return Result.fail(`${field} has length ${tensor.data.length}, but model_input has ${N} tokens`)
    }
  }
  const t = datum.loss_fn_inputs["target_tokens"]?.data
  if (t === undefined) {
    return Result.fail(`${at}.loss_fn_inputs.target_tokens is missing; it must hold the next token of every position (full[1:])`)
  }
  for (const [j, v] of t.entries()) {
    if (v !== IGNORE && (!Number.isInteger(v) || v < 0)) {
      return Result.fail(`${at}.loss_fn_inputs.target_tokens[${j}] is ${v}; a token id must be a non-negative integer (or -100 to ignore)`)
    }
  }
  // the last token of the sequence only appears as the last target; a masked -100 one is never read
  // (t has N > 0 entries: its length was checked equal to model_input's above)
  const last = t[N - 1]!
  const full = [...input, last === IGNORE ? 0 : last]
  const raw: Record<string, TensorData> = {}
  for (const [key, tensor] of Object.entries(datum.loss_fn_inputs)) {
    raw[key] = { data: [key === "target_tokens" ? IGNORE : 0, ...tensor.data], dtype: tensor.dtype, shape: [N + 1] }
  }
  return Result.succeed(canonical({ modelInput: oneChunk(full), lossFnInputs: raw }, lossFn))
}

/**
 * What `datumFromWire(datumToWire(d))` returns: the same datum in its normal form.
 * Position 0 and masked advantages hold neutral values, masked positions are labelled
 * with their own next token; `target_tokens` is kept only if a position is labelled
 * with another token than the next one; cross_entropy `weights` only if a position is
 * masked or an active weight differs from 1.
 * @since 0.1.0 @category conversions
 */
export const canonical = (datum: Datum, lossFn: LossFn): Datum => {
  const { full, target, masked } = gyreView(datum, lossFn)
  const L = full.length
  const isCe = lossFn === "cross_entropy"
  // the last token is only ever a label: it travels as the last target
  const seq = [...full.slice(0, -1), ...target.slice(-1)]
  const inputs: Record<string, TensorData> = {}
  for (const [key, tensor] of Object.entries(datum.lossFnInputs)) {
    if (key === "target_tokens" || key === "weights") continue
    const data = tensor.data.map((v, i) => (i === 0 || (key === "advantages" && masked[i]) ? 0 : v))
    inputs[key] = { data, dtype: tensor.dtype, shape: [L] }
  }
  // a masked position keeps a real label (so its learner log-prob is reported, as Tinker does):
  // cross_entropy masks it with weight 0, the RL losses with advantage 0
  const labels = target.map((v, i) => (i === 0 ? IGNORE : v))
  if (labels.some((v, i) => i > 0 && v !== seq[i])) inputs["target_tokens"] = i64(labels)
  const w = datum.lossFnInputs["weights"]?.data
  if (isCe) {
    const weights = full.map((_, i) => (masked[i] ? 0 : (w?.[i] ?? 1)))
    if (weights.some((v, i) => i > 0 && v !== 1)) inputs["weights"] = f32(weights)
  } else if (w !== undefined) inputs["weights"] = f32(w.map((v, i) => (i === 0 ? 0 : v)))
  return { modelInput: oneChunk(seq), lossFnInputs: inputs }
}

/**
 * Learner outputs of one datum, gyre -> wire: `logprobs` [L] -> [L-1], top-k
 * entries shifted by one (position 0 has none). Top-k travels flattened as
 * `topk_positions` [M], `topk_counts` [M], `topk_tokens` and `topk_logprobs`.
 * @since 0.1.0 @category conversions
 */
export const outputToWire = (output: LossFnOutput): Record<string, Wire.TensorData> => {
  const lp = toFloat32(output.logprobs.slice(1))
  const out: Record<string, Wire.TensorData> = { logprobs: { data: lp, dtype: "float32", shape: [lp.length] } }
  if (output.topK !== undefined) {
    const entries = output.topK.filter((e) => e.position > 0)
    const positions = entries.map((e) => e.position - 1)
    const counts = entries.map((e) => e.tokens.length)
    const tokens = entries.flatMap((e) => e.tokens)
    const logprobs = toFloat32(entries.flatMap((e) => e.logprobs))
    out["topk_positions"] = { data: positions, dtype: "int64", shape: [positions.length] }
    out["topk_counts"] = { data: counts, dtype: "int64", shape: [counts.length] }
    out["topk_tokens"] = { data: tokens, dtype: "int64", shape: [tokens.length] }
    out["topk_logprobs"] = { data: logprobs, dtype: "float32", shape: [logprobs.length] }
  }
  return out
}

/**
 * Learner outputs of one datum, wire -> gyre: `logprobs` [N] -> [0, ...] of length
 * N+1. Other keys than `logprobs` and `topk_*` are ignored.
 * @since 0.1.0 @category conversions
 */
export const outputFromWire = (output: Readonly<Record<string, Wire.TensorData>>, at = "output"): Result.Result<LossFnOutput, string> => {
  const lp = output["logprobs"]
  if (lp === undefined) return Result.fail(`${at}.logprobs is missing`)
  // a loop, not a spread: ~1,000 values a datum, a thousand datums a step
  const logprobs = new Array<number>(lp.data.length + 1)
  logprobs[0] = 0
  for (let i = 0; i < lp.data.length; i++) logprobs[i + 1] = lp.data[i]!
  const positions = output["topk_positions"]?.data
  if (positions === undefined) return Result.succeed({ logprobs })
  const counts = output["topk_counts"]?.data ?? []
  const tokens = output["topk_tokens"]?.data ?? []
  const lps = output["topk_logprobs"]?.data ?? []
  const total = counts.reduce((a, b) => a + b, 0)
  if (counts.length !== positions.length || tokens.length !== total || lps.length !== total) {
    return Result.fail(`${at}.topk_* tensors disagree: ${positions.length} positions, ${counts.length} counts, ${tokens.length} tokens, ${lps.length} logprobs`)
  }
  const topK: Array<TopK> = []
  let k = 0
  for (const [m, position] of positions.entries()) {
    // counts has one entry per position: checked above
    const c = counts[m]!
    topK.push({ position: position + 1, tokens: tokens.slice(k, k + c), logprobs: lps.slice(k, k + c) })
    k += c
  }
  return Result.succeed({ logprobs, topK })
}

/** Prompt log-probs, gyre ([0, lp_1, ...]) -> wire ([null, lp_1, ...]). @since 0.1.0 @category conversions */
export const promptLogprobsToWire = (lps: ReadonlyArray<number>): Array<number | null> => lps.map((v, i) => (i === 0 ? null : Math.fround(v)))

/**
 * Values sent as float32 are rounded to float32 in JSON too, so that a result reads the
 * same whether it travels as JSON or as protobuf (whose tensors are float32 bytes).
 * @since 0.1.0 @category conversions
 */
export const toFloat32 = (values: ReadonlyArray<number>): Array<number> => values.map(Math.fround)

/**
 * Prompt log-probs, wire -> gyre: `null` at position 0 becomes 0; a `null`
 * elsewhere is an error (the server could not score that token).
 * @since 0.1.0 @category conversions
 */
export const promptLogprobsFromWire = (lps: ReadonlyArray<number | null>): Result.Result<Array<number>, string> => {
  const out: Array<number> = []
  for (let i = 0; i < lps.length; i++) {
    const v = lps[i]
    if (v === null || v === undefined) {
      if (i === 0) out.push(0)
      else return Result.fail(`prompt_logprobs[${i}] is null: the server did not score that token`)
    } else out.push(v)
  }
  return Result.succeed(out)
}

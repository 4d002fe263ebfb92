/**
 * Rollout -> Datum, and Datum validation.
 *
 * The Loops convention: `modelInput` = prompt ++ completion (length L); `logprobs` =
 * [0]*P ++ sampler logprobs; `advantages` = [0]*P ++ [A]*T; both float32 of shape [L].
 * Prompt positions have advantage 0, so they are inactive.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { BackendError, type Datum, float32, int64, type LossFn, modelInputFromTokens, modelInputTokens } from "./Contract.ts"

/** Builds the RL Datum of one sampled completion. @since 0.1.0 @category constructors */
export const rl = (options: {
  readonly prompt: ReadonlyArray<number>
  readonly completion: ReadonlyArray<number>
  readonly samplerLogprobs: ReadonlyArray<number>
  readonly advantage: number
}): Datum => {
  const { prompt, completion, samplerLogprobs, advantage } = options
  const P = prompt.length
  return {
    modelInput: modelInputFromTokens([...prompt, ...completion]),
    lossFnInputs: {
      logprobs: float32([...new Array<number>(P).fill(0), ...samplerLogprobs]),
      advantages: float32([...new Array<number>(P).fill(0), ...completion.map(() => advantage)]),
    },
  }
}

/** Builds an SFT Datum: the completion is the target, prompt positions are ignored (-100). @since 0.1.0 @category constructors */
export const sft = (options: { readonly prompt: ReadonlyArray<number>; readonly completion: ReadonlyArray<number> }): Datum => {
  const { prompt, completion } = options
  const tokens = [...prompt, ...completion]
  return {
    modelInput: modelInputFromTokens(tokens),
    lossFnInputs: {
      target_tokens: int64(tokens.map((t, i) => (i < prompt.length ? -100 : t))),
    },
  }
}

/** Inputs each loss needs. @since 0.1.0 @category constants */
export const requiredInputs: Record<LossFn, ReadonlyArray<string>> = {
  cross_entropy: [],
  importance_sampling: ["logprobs", "advantages"],
  ppo: ["logprobs", "advantages"],
  cispo: ["logprobs", "advantages"],
  dro: ["logprobs", "advantages"],
  dppo: ["logprobs", "advantages"],
}

/**
 * Checks a batch before it is sent: every per-token input has the length of
 * `modelInput`, values are finite, token ids are integers in range and required inputs
 * are present. The message names the datum and the field.
 * @since 0.1.0 @category validation
 */
export const validate = (
  data: ReadonlyArray<Datum>,
  lossFn: LossFn,
  options: { readonly vocabSize?: number; readonly maxLength?: number; readonly operation?: string } = {},
): Effect.Effect<void, BackendError> =>
  Effect.suspend(() => {
    const problem = checkAll(data, lossFn, options)
    return problem === undefined
      ? Effect.void
      : Effect.fail(new BackendError({ reason: "InvalidInput", operation: options.operation ?? "validate", message: problem }))
  })

/** The first problem found in a batch, or undefined. @since 0.1.0 @category validation */
export const checkAll = (
  data: ReadonlyArray<Datum>,
  lossFn: LossFn,
  options: { readonly vocabSize?: number; readonly maxLength?: number } = {},
): string | undefined => {
  if (data.length === 0) return "data is empty: send at least one Datum"
  for (let d = 0; d < data.length; d++) {
    const datum = data[d]!
    const tokens = modelInputTokens(datum.modelInput)
    const L = tokens.length
    const at = `data[${d}]`
    if (L === 0) return `${at}.modelInput is empty`
    if (options.maxLength !== undefined && L > options.maxLength) {
      return `${at}.modelInput has ${L} tokens, more than the model's context of ${options.maxLength}`
    }
    for (let i = 0; i < L; i++) {
      const t = tokens[i]!
      if (!Number.isInteger(t) || t < 0 || (options.vocabSize !== undefined && t >= options.vocabSize)) {
        return `${at}.modelInput token ${i} is ${t}, outside the vocabulary [0, ${options.vocabSize ?? "?"})`
      }
    }
    for (const key of requiredInputs[lossFn]) {
      if (datum.lossFnInputs[key] === undefined) return `${at}.lossFnInputs.${key} is missing; ${lossFn} needs ${requiredInputs[lossFn].join(" and ")}`
    }
    for (const [key, tensor] of Object.entries(datum.lossFnInputs)) {
      const field = `${at}.lossFnInputs.${key}`
      if (!["target_tokens", "weights", "logprobs", "advantages"].includes(key)) {
        return `${field} is not a known input; use target_tokens, weights, logprobs or advantages`
      }
      if (tensor.data.length !== L) return `${field} has length ${tensor.data.length} but modelInput has ${L}; every per-token input must have shape [L]`
      if (tensor.shape !== undefined && (tensor.shape.length !== 1 || tensor.shape[0] !== L)) {
        return `${field}.shape is [${tensor.shape.join(", ")}] but must be [${L}]`
      }
      for (let i = 0; i < L; i++) {
        const v = tensor.data[i]!
        if (!Number.isFinite(v)) return `${field}[${i}] is ${v}; values must be finite`
        if (key === "target_tokens" && v !== -100 && (!Number.isInteger(v) || v < 0 || (options.vocabSize !== undefined && v >= options.vocabSize))) {
          return `${field}[${i}] is ${v}, outside the vocabulary (use -100 to ignore a position)`
        }
        if (key === "logprobs" && v > 1e-6) return `${field}[${i}] is ${v}; a log-probability must be <= 0`
        if (key === "weights" && v < 0) return `${field}[${i}] is ${v}; weights must be >= 0`
      }
    }
  }
  return undefined
}

/**
 * Checks a `forward` / `forwardBackward` request before any work is done. Every
 * message names the field and the datum index.
 *
 * @since 0.1.0
 */
import { type Datum, type LossFn, modelInputTokens } from "../../Contract.ts"
import { LOSS_INPUTS } from "../../Loss.ts"

/** @since 0.1.0 @category constants */
export const MAX_TOP_K = 20

/** @since 0.1.0 @category combinators */
export const checkTopK = (k: number | undefined): string | undefined => {
  if (k === undefined) return undefined
  if (!Number.isInteger(k) || k < 0) return `topKLogprobs must be a non-negative integer, got ${k}`
  if (k > MAX_TOP_K) return `topKLogprobs must be at most ${MAX_TOP_K}, got ${k}`
  return undefined
}

/**
 * Returns the first problem found, or undefined.
 * @since 0.1.0 @category combinators
 */
export const checkData = (
  data: ReadonlyArray<Datum>,
  lossFn: LossFn,
  limits: { readonly vocabSize: number; readonly contextLength: number },
): string | undefined => {
  const spec = LOSS_INPUTS[lossFn]
  const allowed = [...spec.required, ...spec.optional]
  for (let d = 0; d < data.length; d++) {
    const datum = data[d]!
    const at = `data[${d}]`
    const tokens = modelInputTokens(datum.modelInput)
    const L = tokens.length
    if (L === 0) return `${at}.modelInput is empty`
    if (L > limits.contextLength) return `${at}.modelInput has ${L} tokens, more than the context length ${limits.contextLength}`
    for (let i = 0; i < L; i++) {
      const t = tokens[i]!
      if (!Number.isInteger(t) || t < 0 || t >= limits.vocabSize) {
        return `${at}.modelInput token ${t} at position ${i} is outside the vocabulary [0, ${limits.vocabSize})`
      }
    }
    for (const key of spec.required) {
      if (!(key in datum.lossFnInputs)) return `${at}.lossFnInputs.${key} is required by ${lossFn} (inputs: ${allowed.join(", ")})`
    }
    for (const [key, tensor] of Object.entries(datum.lossFnInputs)) {
      const field = `${at}.lossFnInputs.${key}`
      if (!allowed.includes(key)) return `${field} is not an input of ${lossFn}; allowed inputs: ${allowed.join(", ")}`
      if (tensor.data.length !== L) return `${field} has length ${tensor.data.length}, but modelInput has length ${L}`
      if (tensor.shape !== undefined && (tensor.shape.length !== 1 || tensor.shape[0] !== L)) {
        return `${field} has shape ${JSON.stringify(tensor.shape)}, expected [${L}]`
      }
      for (let i = 0; i < L; i++) {
        const v = tensor.data[i]!
        if (typeof v !== "number" || !Number.isFinite(v)) return `${field}[${i}] is ${v}, not a finite number`
        if (key === "target_tokens" && v !== -100 && (!Number.isInteger(v) || v < 0 || v >= limits.vocabSize)) {
          return `${field}[${i}] = ${v} is outside the vocabulary [0, ${limits.vocabSize}) (use -100 to ignore a position)`
        }
        if (key === "weights" && v < 0) return `${field}[${i}] = ${v} is negative`
      }
    }
  }
  return undefined
}

/**
 * Checks trainer and sampler requests before any work is done. Every message names
 * the field; a batch's problem is a `DatumIssue` (the datum, field and position as data).
 *
 * @since 0.1.0
 */
import type { AdamParams, Datum, LossFn, SamplingParams } from "../../contract/Contract.ts"
import { checkAll } from "../../vocabulary/Datum.ts"
import type { DatumIssue } from "../../contract/DatumIssue.ts"

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
 * The first issue found, or undefined: `Datum.checkAll`, the one Datum validator,
 * against this model's limits. `Errors.fail` carries it in the `BackendError`.
 * @since 0.1.0 @category combinators
 */
export const checkData = (data: ReadonlyArray<Datum>, lossFn: LossFn, limits: Limits): DatumIssue | undefined =>
  checkAll(data, lossFn, { vocabSize: limits.vocabSize, maxLength: limits.contextLength })

/** Model limits a request is checked against. @since 0.1.0 @category models */
export interface Limits {
  readonly vocabSize: number
  readonly contextLength: number
}

/** Checks Adam hyperparameters; returns a message or undefined. @since 0.1.0 @category combinators */
export const checkAdam = (adam: AdamParams): string | undefined => {
  const bad = Object.entries(adam).find(([, v]) => typeof v !== "number" || !Number.isFinite(v))
  if (bad) return `adam ${bad[0]} must be a finite number`
  if (adam.learningRate < 0 || adam.eps <= 0 || adam.beta1 < 0 || adam.beta1 >= 1 || adam.beta2 < 0 || adam.beta2 >= 1 || adam.weightDecay < 0 || adam.gradClipNorm < 0) {
    return "adam params out of range: learningRate >= 0, 0 <= beta1, beta2 < 1, eps > 0, weightDecay >= 0, gradClipNorm >= 0"
  }
  return undefined
}

/** Checks the input of `computeLogprobs`; returns a message or undefined. @since 0.1.0 @category combinators */
export const checkLogprobsInput = (tokens: ReadonlyArray<number>, { vocabSize, contextLength }: Limits): string | undefined => {
  if (tokens.length > contextLength) return `input has ${tokens.length} tokens, more than the context length ${contextLength}`
  const badAt = tokens.findIndex((t) => !Number.isInteger(t) || t < 0 || t >= vocabSize)
  if (badAt >= 0) return `input token ${tokens[badAt]} at position ${badAt} is outside the vocabulary [0, ${vocabSize})`
  return undefined
}

/** Checks a sample request; returns a message or undefined. @since 0.1.0 @category combinators */
export const checkSample = (prompt: ReadonlyArray<number>, params: SamplingParams, numSamples: number, { vocabSize, contextLength }: Limits): string | undefined => {
  if (prompt.length === 0) return "prompt is empty"
  if (prompt.length >= contextLength) return `prompt has ${prompt.length} tokens; the context length is ${contextLength}, leaving no room to sample`
  for (let i = 0; i < prompt.length; i++) {
    const t = prompt[i]!
    if (!Number.isInteger(t) || t < 0 || t >= vocabSize) return `prompt token ${t} at position ${i} is outside the vocabulary [0, ${vocabSize})`
  }
  if (!Number.isInteger(numSamples) || numSamples < 1) return `numSamples must be a positive integer, got ${numSamples}`
  if (!Number.isInteger(params.maxTokens) || params.maxTokens < 1) return `maxTokens must be a positive integer, got ${params.maxTokens}`
  if (!(params.temperature >= 0) || !Number.isFinite(params.temperature)) return `temperature must be >= 0, got ${params.temperature}`
  if (params.topP !== undefined && !(params.topP > 0 && params.topP <= 1)) return `topP must be in (0, 1], got ${params.topP}`
  if (params.topK !== undefined && (!Number.isInteger(params.topK) || params.topK < 0)) return `topK must be a non-negative integer (0 = no limit), got ${params.topK}`
  for (const s of params.stop ?? []) {
    if (typeof s === "number" && (!Number.isInteger(s) || s < 0 || s >= vocabSize)) return `stop token ${s} is outside the vocabulary`
    if (typeof s === "string" && s.length === 0) return "stop strings must not be empty"
  }
  return undefined
}

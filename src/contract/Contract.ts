/**
 * The wire contract between the runner and a trainer/sampler service, as Schemas.
 *
 * Conventions follow the Loops RL page: a Datum's `modelInput` is the full sequence
 * (prompt ++ completion, length L) and every per-token tensor in `lossFnInputs` has
 * shape [L]. Tinker's shifted convention is converted in one place only, the HTTP
 * backend (`src/backends/http/`).
 *
 * @since 0.1.0
 */
import { Schema } from "effect"
import { DatumIssue } from "./DatumIssue.ts"

/** A run of token ids. @since 0.1.0 @category models */
export const EncodedTextChunk = Schema.Struct({
  type: Schema.Literal("encoded_text"),
  tokens: Schema.Array(Schema.Int),
})
export type EncodedTextChunk = typeof EncodedTextChunk.Type

/** The tokens a model reads, as chunks (only encoded text here). @since 0.1.0 @category models */
export const ModelInput = Schema.Struct({ chunks: Schema.Array(EncodedTextChunk) })
export type ModelInput = typeof ModelInput.Type

/** Builds a one-chunk ModelInput. @since 0.1.0 @category constructors */
export const modelInputFromTokens = (tokens: ReadonlyArray<number>): ModelInput => ({
  chunks: [{ type: "encoded_text", tokens: [...tokens] }],
})

/** Flattens a ModelInput to its token ids. @since 0.1.0 @category combinators */
export const modelInputTokens = (input: ModelInput): ReadonlyArray<number> =>
  // one chunk (what gyre builds) is its own token list: no copy on the hot paths that read it
  input.chunks.length === 1 ? input.chunks[0]!.tokens : input.chunks.flatMap((c) => c.tokens)

/** A dense tensor; `shape` defaults to `[data.length]`. @since 0.1.0 @category models */
export const TensorData = Schema.Struct({
  data: Schema.Array(Schema.Number),
  dtype: Schema.Literals(["float32", "int64"]),
  shape: Schema.optional(Schema.Array(Schema.Int)),
})
export type TensorData = typeof TensorData.Type

/** @since 0.1.0 @category constructors */
export const float32 = (data: ReadonlyArray<number>): TensorData => ({ data: [...data], dtype: "float32", shape: [data.length] })
/** @since 0.1.0 @category constructors */
export const int64 = (data: ReadonlyArray<number>): TensorData => ({ data: [...data], dtype: "int64", shape: [data.length] })

/** The names a loss reads from `lossFnInputs`. @since 0.1.0 @category models */
export const LossFnInputKey = Schema.Literals(["target_tokens", "weights", "logprobs", "advantages"])
export type LossFnInputKey = typeof LossFnInputKey.Type

/** One training example. @since 0.1.0 @category models */
export const Datum = Schema.Struct({
  modelInput: ModelInput,
  lossFnInputs: Schema.Record(Schema.String, TensorData),
})
export type Datum = typeof Datum.Type

/** Built-in losses (formulas in README, "Losses"). @since 0.1.0 @category models */
export const LossFn = Schema.Literals(["cross_entropy", "importance_sampling", "ppo", "cispo", "dro", "dppo", "gspo"])
export type LossFn = typeof LossFn.Type

/** Loss settings; keys allowed per loss are checked by `src/loss/Loss.ts`. @since 0.1.0 @category models */
export const LossFnConfig = Schema.Record(Schema.String, Schema.Number)
export type LossFnConfig = typeof LossFnConfig.Type

/** Options of `forwardBackward` / `forward`. @since 0.1.0 @category models */
export const ForwardOptions = Schema.Struct({
  lossFnConfig: Schema.optional(LossFnConfig),
  /** top-k token log-probabilities at each active position (at most 20) */
  topKLogprobs: Schema.optional(Schema.Int),
})
export type ForwardOptions = typeof ForwardOptions.Type

/** Top-k alternatives at one position. @since 0.1.0 @category models */
export const TopK = Schema.Struct({ position: Schema.Int, tokens: Schema.Array(Schema.Int), logprobs: Schema.Array(Schema.Number) })
export type TopK = typeof TopK.Type

/** Per-datum outputs: the learner log-prob of each position (position 0 is 0). @since 0.1.0 @category models */
export const LossFnOutput = Schema.Struct({
  logprobs: Schema.Array(Schema.Number),
  topK: Schema.optional(Schema.Array(TopK)),
})
export type LossFnOutput = typeof LossFnOutput.Type

/**
 * Result of a forward(-backward) call. `metrics` holds at least `loss` (mean over
 * active positions), `loss:sum` and `active_tokens`.
 * @since 0.1.0 @category models
 */
export const ForwardBackwardResult = Schema.Struct({
  lossFnOutputs: Schema.Array(LossFnOutput),
  metrics: Schema.Record(Schema.String, Schema.Number),
})
export type ForwardBackwardResult = typeof ForwardBackwardResult.Type

/**
 * Adam with decoupled weight decay; `gradClipNorm` 0 turns clipping off. The HTTP
 * backend sends it as Tinker's snake_case `adam_params` (`Wire.adamParamsToWire`).
 * @since 0.1.0 @category models
 */
export const AdamParams = Schema.Struct({
  learningRate: Schema.Finite.check(Schema.isGreaterThanOrEqualTo(0)),
  beta1: Schema.Finite.check(Schema.isBetween({ minimum: 0, maximum: 1 })),
  beta2: Schema.Finite.check(Schema.isBetween({ minimum: 0, maximum: 1 })),
  eps: Schema.Finite.check(Schema.isGreaterThan(0)),
  weightDecay: Schema.Finite.check(Schema.isGreaterThanOrEqualTo(0)),
  gradClipNorm: Schema.Finite.check(Schema.isGreaterThanOrEqualTo(0)),
})
export type AdamParams = typeof AdamParams.Type

/** Defaults matching Tinker's AdamParams. @since 0.1.0 @category constructors */
export const adamParams = (overrides: Partial<AdamParams> = {}): AdamParams => ({
  learningRate: 1e-4,
  beta1: 0.9,
  beta2: 0.95,
  eps: 1e-12,
  weightDecay: 0,
  gradClipNorm: 0,
  ...overrides,
})

/** @since 0.1.0 @category models */
export const OptimStepResult = Schema.Struct({
  version: Schema.Int,
  metrics: Schema.Record(Schema.String, Schema.Number),
})
export type OptimStepResult = typeof OptimStepResult.Type

/** Sampling settings. @since 0.1.0 @category models */
export const SamplingParams = Schema.Struct({
  maxTokens: Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)),
  temperature: Schema.Finite.check(Schema.isGreaterThanOrEqualTo(0)),
  topP: Schema.optional(Schema.Finite.check(Schema.isBetween({ minimum: 0, maximum: 1 }))),
  topK: Schema.optional(Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))),
  /** stop strings (decoded text) or token ids */
  stop: Schema.optional(Schema.Array(Schema.Union([Schema.String, Schema.Int]))),
  seed: Schema.optional(Schema.Int),
})
export type SamplingParams = typeof SamplingParams.Type

/** Options of one sample request. @since 0.1.0 @category models */
export const SampleOptions = Schema.Struct({
  numSamples: Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)),
  /** requests with one key share a replica and its prompt-prefix cache */
  affinityKey: Schema.optional(Schema.String),
  /** wait until the sampler serves at least this policy version */
  minPolicyVersion: Schema.optional(Schema.Int),
  includePromptLogprobs: Schema.optional(Schema.Boolean),
})
export type SampleOptions = typeof SampleOptions.Type

/** @since 0.1.0 @category models */
export const StopReason = Schema.Literals(["stop", "length"])
export type StopReason = typeof StopReason.Type

/** One sampled completion, with log-probs under the distribution sampled from. @since 0.1.0 @category models */
export const SampledSequence = Schema.Struct({
  tokens: Schema.Array(Schema.Int),
  logprobs: Schema.Array(Schema.Number),
  stopReason: StopReason,
})
export type SampledSequence = typeof SampledSequence.Type

/** @since 0.1.0 @category models */
export const SampleResult = Schema.Struct({
  sequences: Schema.Array(SampledSequence),
  /** the policy version that produced the samples */
  policyVersion: Schema.Int,
  /** log p(x_i | x_<i) for the prompt (position 0 is 0), when asked for */
  promptLogprobs: Schema.optional(Schema.Array(Schema.Number)),
})
export type SampleResult = typeof SampleResult.Type

/**
 * The one failure type of trainer and sampler services. `reason` says whose fault
 * it is: `InvalidInput` (the caller's, fix the request), `Unavailable` / `Transport`
 * (retryable infrastructure), `Rejected` (the service refused), `Timeout` (a wait for a
 * policy version passed its ready timeout), `Internal` (a bug).
 * @since 0.1.0 @category errors
 */
export class BackendError extends Schema.TaggedError<BackendError>()("BackendError", {
  reason: Schema.Literals(["InvalidInput", "Unavailable", "Transport", "Rejected", "Timeout", "Internal"]),
  operation: Schema.String,
  message: Schema.String,
  /** where a refused batch is wrong, as data (`message` is its rendering) */
  issue: Schema.optional(DatumIssue),
}) {}

/**
 * The values the Tinker wire's requests and results carry (JSON, snake_case): model
 * inputs, tensors, datums, Adam and sampling parameters, and the one mapping between
 * gyre's `AdamParams` and the wire's `adam_params`.
 *
 * @since 0.1.0
 */
import { type Result, Schema } from "effect"
import * as Contract from "../../../contract/Contract.ts"
import { decode } from "./Decode.ts"

/** @internal */
export const NonNegativeInt = Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))
/** @internal */
export const PositiveInt = Schema.Int.check(Schema.isGreaterThanOrEqualTo(1))

/** @since 0.1.0 @category models */
export const EncodedTextChunk = Schema.Struct({
  type: Schema.Literal("encoded_text"),
  tokens: Schema.Array(Schema.Int),
})
/** Only token chunks are served; image and audio chunks fail to decode. @since 0.1.0 @category models */
export const ModelInput = Schema.Struct({ chunks: Schema.Array(EncodedTextChunk) })
export type ModelInput = typeof ModelInput.Type

/** @since 0.1.0 @category models */
export const TensorData = Schema.Struct({
  data: Schema.Array(Schema.Finite),
  dtype: Schema.Literals(["int64", "float32"]),
  shape: Schema.optional(Schema.Array(NonNegativeInt)),
  sparse_crow_indices: Schema.optional(Schema.Array(Schema.Int)),
  sparse_col_indices: Schema.optional(Schema.Array(Schema.Int)),
})
export type TensorData = typeof TensorData.Type

/** @since 0.1.0 @category models */
export const Datum = Schema.Struct({
  model_input: ModelInput,
  loss_fn_inputs: Schema.Record(Schema.String, TensorData),
})
export type Datum = typeof Datum.Type

/** @since 0.1.0 @category models */
export const ForwardBackwardInput = Schema.Struct({
  data: Schema.Array(Datum),
  loss_fn: Schema.String,
  loss_fn_config: Schema.optional(Schema.NullOr(Schema.Record(Schema.String, Schema.Number))),
  top_k_logprobs: Schema.optional(NonNegativeInt),
})
export type ForwardBackwardInput = typeof ForwardBackwardInput.Type

/** @since 0.1.0 @category models */
export const AdamParams = Schema.Struct({
  learning_rate: Schema.optional(Schema.Finite),
  beta1: Schema.optional(Schema.Finite),
  beta2: Schema.optional(Schema.Finite),
  eps: Schema.optional(Schema.Finite),
  weight_decay: Schema.optional(Schema.Finite),
  grad_clip_norm: Schema.optional(Schema.Finite),
})
export type AdamParams = typeof AdamParams.Type

/**
 * gyre's `AdamParams` (camelCase) as the wire's `adam_params` (snake_case): the one
 * mapping between the two. Decodes a wire object to gyre's, with the checks of
 * `Contract.AdamParams`; a failure names the wire field (`learning_rate`).
 * @since 0.1.0 @category models
 */
export const AdamParamsFromWire = Contract.AdamParams.pipe(
  Schema.encodeKeys({ learningRate: "learning_rate", weightDecay: "weight_decay", gradClipNorm: "grad_clip_norm" }),
)

/** gyre's AdamParams -> the wire's `adam_params` (what the client sends). @since 0.1.0 @category combinators */
export const adamParamsToWire = (a: Contract.AdamParams): AdamParams => ({
  learning_rate: a.learningRate,
  beta1: a.beta1,
  beta2: a.beta2,
  eps: a.eps,
  weight_decay: a.weightDecay,
  grad_clip_norm: a.gradClipNorm,
})

/**
 * The wire's `adam_params` -> gyre's AdamParams (what the server decodes): absent fields
 * take Tinker's defaults (`Contract.adamParams()`); a failure is one line naming
 * `adam_params.<field>`.
 * @since 0.1.0 @category combinators
 */
export const adamParamsFromWire = (w: AdamParams): Result.Result<Contract.AdamParams, string> =>
  decode(AdamParamsFromWire, "adam_params")({
    ...adamParamsToWire(Contract.adamParams()),
    ...Object.fromEntries(Object.entries(w).filter(([, v]) => v !== undefined)),
  })

/** @since 0.1.0 @category models */
export const StopSequences = Schema.Union([Schema.String, Schema.Array(Schema.String), Schema.Array(Schema.Int)])

/** @since 0.1.0 @category models */
export const SamplingParams = Schema.Struct({
  max_tokens: Schema.optional(Schema.NullOr(Schema.Int)),
  seed: Schema.optional(Schema.NullOr(Schema.Int)),
  stop: Schema.optional(Schema.NullOr(StopSequences)),
  temperature: Schema.optional(Schema.Finite),
  top_k: Schema.optional(Schema.Int),
  top_p: Schema.optional(Schema.Finite),
})
export type SamplingParams = typeof SamplingParams.Type

/**
 * Request bodies of the Tinker wire (JSON, snake_case), one Schema per route, as the
 * Python SDK sends them.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"
import { AdamParams, ForwardBackwardInput, ModelInput, NonNegativeInt, PositiveInt, SamplingParams } from "./WireData.ts"

/** @since 0.1.0 @category constants */
export const Headers = {
  apiKey: "x-api-key",
  idempotencyKey: "x-idempotency-key",
  minPolicyVersion: "x-min-policy-version",
  affinityKey: "x-affinity-key",
  requestType: "x-tinker-request-type",
  requestIteration: "x-tinker-request-iteration",
  retryAfter: "retry-after",
  retryAfterMs: "retry-after-ms",
  waitMillis: "x-gyre-wait-ms",
} as const

/** @since 0.1.0 @category requests */
export const CreateSessionRequest = Schema.Struct({
  tags: Schema.optional(Schema.Array(Schema.String)),
  user_metadata: Schema.optional(Schema.NullOr(Schema.Record(Schema.String, Schema.Unknown))),
  sdk_version: Schema.optional(Schema.String),
  project_id: Schema.optional(Schema.NullOr(Schema.String)),
  type: Schema.optional(Schema.Literal("create_session")),
})

/** @since 0.1.0 @category requests */
export const SessionHeartbeatRequest = Schema.Struct({
  session_id: Schema.String,
  type: Schema.optional(Schema.Literal("session_heartbeat")),
})

/** @since 0.1.0 @category requests */
export const LoraConfig = Schema.Struct({
  rank: PositiveInt,
  seed: Schema.optional(Schema.NullOr(Schema.Int)),
  train_unembed: Schema.optional(Schema.Boolean),
  train_mlp: Schema.optional(Schema.Boolean),
  train_attn: Schema.optional(Schema.Boolean),
})

/** @since 0.1.0 @category requests */
export const CreateModelRequest = Schema.Struct({
  session_id: Schema.String,
  model_seq_id: NonNegativeInt,
  base_model: Schema.String,
  user_metadata: Schema.optional(Schema.NullOr(Schema.Record(Schema.String, Schema.Unknown))),
  lora_config: Schema.optional(Schema.NullOr(LoraConfig)),
  type: Schema.optional(Schema.Literal("create_model")),
})

/** @since 0.1.0 @category requests */
export const CreateSamplingSessionRequest = Schema.Struct({
  session_id: Schema.String,
  sampling_session_seq_id: NonNegativeInt,
  base_model: Schema.optional(Schema.NullOr(Schema.String)),
  model_path: Schema.optional(Schema.NullOr(Schema.String)),
  type: Schema.optional(Schema.Literal("create_sampling_session")),
})

/** @since 0.1.0 @category requests */
export const UnloadModelRequest = Schema.Struct({
  model_id: Schema.String,
  type: Schema.optional(Schema.Literal("unload_model")),
})

/** @since 0.1.0 @category requests */
export const GetInfoRequest = Schema.Struct({
  model_id: Schema.String,
  type: Schema.optional(Schema.Literal("get_info")),
})

/** @since 0.1.0 @category requests */
export const ForwardBackwardRequest = Schema.Struct({
  forward_backward_input: ForwardBackwardInput,
  model_id: Schema.String,
  seq_id: NonNegativeInt,
})

/** @since 0.1.0 @category requests */
export const ForwardRequest = Schema.Struct({
  forward_input: ForwardBackwardInput,
  model_id: Schema.String,
  seq_id: NonNegativeInt,
})

/** @since 0.1.0 @category requests */
export const OptimStepRequest = Schema.Struct({
  adam_params: AdamParams,
  model_id: Schema.String,
  seq_id: NonNegativeInt,
  type: Schema.optional(Schema.Literal("optim_step")),
})

/** @since 0.1.0 @category requests */
export const SaveWeightsRequest = Schema.Struct({
  model_id: Schema.String,
  path: Schema.optional(Schema.NullOr(Schema.String)),
  seq_id: NonNegativeInt,
  ttl_seconds: Schema.optional(Schema.NullOr(Schema.Int)),
  overwrite: Schema.optional(Schema.Boolean),
  type: Schema.optional(Schema.Literal("save_weights")),
})

/** @since 0.1.0 @category requests */
export const SaveWeightsForSamplerRequest = Schema.Struct({
  model_id: Schema.String,
  path: Schema.optional(Schema.NullOr(Schema.String)),
  seq_id: NonNegativeInt,
  sampling_session_seq_id: Schema.optional(Schema.NullOr(NonNegativeInt)),
  ttl_seconds: Schema.optional(Schema.NullOr(Schema.Int)),
  type: Schema.optional(Schema.Literal("save_weights_for_sampler")),
})

/** @since 0.1.0 @category requests */
export const LoadWeightsRequest = Schema.Struct({
  model_id: Schema.optional(Schema.NullOr(Schema.String)),
  seq_id: Schema.optional(Schema.NullOr(NonNegativeInt)),
  session_id: Schema.optional(Schema.NullOr(Schema.String)),
  model_seq_id: Schema.optional(Schema.NullOr(NonNegativeInt)),
  path: Schema.String,
  optimizer: Schema.optional(Schema.Boolean),
  type: Schema.optional(Schema.Literal("load_weights")),
})

/** @since 0.1.0 @category requests */
export const SampleRequest = Schema.Struct({
  num_samples: Schema.optional(Schema.Int),
  prompt: ModelInput,
  sampling_params: SamplingParams,
  sampling_session_id: Schema.optional(Schema.NullOr(Schema.String)),
  seq_id: Schema.optional(Schema.NullOr(Schema.Int)),
  base_model: Schema.optional(Schema.NullOr(Schema.String)),
  model_path: Schema.optional(Schema.NullOr(Schema.String)),
  prompt_logprobs: Schema.optional(Schema.NullOr(Schema.Boolean)),
  topk_prompt_logprobs: Schema.optional(Schema.Int),
  type: Schema.optional(Schema.Literal("sample")),
})
export type SampleRequest = typeof SampleRequest.Type

/** @since 0.1.0 @category requests */
export const RetrieveFutureRequest = Schema.Struct({
  request_id: Schema.String,
  allow_metadata_only: Schema.optional(Schema.Boolean),
})

/**
 * `retrieve_futures` (SDK 0.39): the sample futures of one sampling session that finished
 * after `prev_cursor`; `timeout` bounds the hold in seconds.
 * @since 0.1.0 @category requests
 */
export const RetrieveFuturesRequest = Schema.Struct({
  target: Schema.Struct({
    type: Schema.optional(Schema.Literal("sampling_session")),
    sampling_session_id: Schema.String,
    cloned_sampler_id: Schema.optional(NonNegativeInt),
  }),
  prev_cursor: Schema.optional(NonNegativeInt),
  timeout: Schema.optional(Schema.NullOr(Schema.Finite.check(Schema.isGreaterThanOrEqualTo(0)))),
})

/** The answer to `retrieve_futures`: the completions, and the cursor to send next. @since 0.1.0 @category responses */
export const RetrieveFuturesResponse = Schema.Struct({
  completions: Schema.Array(Schema.Struct({ state: Schema.optional(Schema.String), request_id: Schema.String })),
  cursor: Schema.Int,
})

/** The `X-Gyre-Wait-Ms` header of a submission, in milliseconds. @since 0.1.0 @category requests */
export const WaitHeader = Schema.Struct({
  [Headers.waitMillis]: Schema.optional(Schema.NumberFromString.check(Schema.isInt(), Schema.isBetween({ minimum: 0, maximum: 3_600_000 }))),
})

/** Headers of `asample` read by the server. @since 0.1.0 @category requests */
export const SampleHeaders = Schema.Struct({
  [Headers.minPolicyVersion]: Schema.optional(Schema.NumberFromString.check(Schema.isInt(), Schema.isGreaterThanOrEqualTo(0))),
  [Headers.affinityKey]: Schema.optional(Schema.String.check(Schema.isMaxLength(1024))),
})

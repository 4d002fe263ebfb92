/**
 * Schemas of the Tinker wire protocol (JSON bodies, snake_case), as the Python SDK
 * speaks it: request bodies, future states and results. Both the client and the
 * server decode every body they receive with these.
 *
 * Extensions (ignored by the Python SDK, which drops unknown fields):
 * - `policy_version` on the results of `optim_step`, `save_weights_for_sampler`,
 *   `asample`, `get_info` and `GET samplers/{id}`: the number of optimizer steps behind
 *   the weights (the Loops `SampleResult.policy_version`);
 * - request header `X-Min-Policy-Version` on `asample` (as Loops sends it): the
 *   sampler waits until it serves at least that version;
 * - request header `X-Affinity-Key` on `asample`: requests with one key go to one
 *   sampler replica;
 * - `top_k_logprobs` in `forward_backward_input` / `forward_input`, answered with the
 *   `topk_*` tensors of `loss_fn_outputs`;
 * - `reason` on a failed future: the `BackendError` reason, so it survives the trip;
 * - request header `X-Gyre-Wait-Ms` on a submission: the server may hold the answer
 *   up to that long and put the future's outcome in it (`result`), sparing the poll.
 *
 * @since 0.1.0
 */
import { type Result, Schema } from "effect"
import * as Contract from "../../Contract.ts"
import { decode } from "./Decode.ts"
import { Metrics } from "./WireMetrics.ts"

/** Every endpoint lives under this prefix. @since 0.1.0 @category constants */
export const API_PREFIX = "/api/v1"

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

const NonNegativeInt = Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))
const PositiveInt = Schema.Int.check(Schema.isGreaterThanOrEqualTo(1))

// ---------------------------------------------------------------------------
// values

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

export { Metrics, MetricValue } from "./WireMetrics.ts"

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

// ---------------------------------------------------------------------------
// requests

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

/** The `X-Gyre-Wait-Ms` header of a submission, in milliseconds. @since 0.1.0 @category requests */
export const WaitHeader = Schema.Struct({
  [Headers.waitMillis]: Schema.optional(Schema.NumberFromString.check(Schema.isInt(), Schema.isBetween({ minimum: 0, maximum: 3_600_000 }))),
})

/** Headers of `asample` read by the server. @since 0.1.0 @category requests */
export const SampleHeaders = Schema.Struct({
  [Headers.minPolicyVersion]: Schema.optional(Schema.NumberFromString.check(Schema.isInt(), Schema.isGreaterThanOrEqualTo(0))),
  [Headers.affinityKey]: Schema.optional(Schema.String.check(Schema.isMaxLength(1024))),
})

// ---------------------------------------------------------------------------
// responses

/** @since 0.1.0 @category responses */
export const UntypedFuture = Schema.Struct({
  request_id: Schema.String,
  model_id: Schema.optional(Schema.String),
})

/**
 * The answer to a submission. `result` is an extension: when the request carried
 * `X-Gyre-Wait-Ms` and the work finished within that time, it holds what
 * `retrieve_future` would answer, and the client need not poll.
 * @since 0.1.0 @category responses
 */
export const SubmitResponse = Schema.Struct({
  request_id: Schema.String,
  model_id: Schema.optional(Schema.String),
  result: Schema.optional(Schema.Unknown),
})

/** @since 0.1.0 @category responses */
export const TryAgain = Schema.Struct({
  type: Schema.Literal("try_again"),
  request_id: Schema.String,
  queue_state: Schema.optional(Schema.String),
  queue_state_reason: Schema.optional(Schema.NullOr(Schema.String)),
})

/** @since 0.1.0 @category responses */
export const CompleteMetadata = Schema.Struct({
  status: Schema.Literal("complete_metadata"),
  response_payload_size: Schema.optional(Schema.Int),
})

/** @since 0.1.0 @category models */
export const ErrorReason = Schema.Literals(["InvalidInput", "Unavailable", "Transport", "Rejected", "Timeout", "Internal"])

/** A future that resolved to a failure. @since 0.1.0 @category responses */
export const FutureError = Schema.Struct({
  error: Schema.String,
  category: Schema.optional(Schema.Literals(["unknown", "server", "user"])),
  request_id: Schema.optional(Schema.String),
  reason: Schema.optional(ErrorReason),
})
export type FutureError = typeof FutureError.Type

/** The body of a non-2xx answer from this server (the client also reads `error` / `message`). @since 0.1.0 @category responses */
export const ErrorBody = Schema.Struct({
  detail: Schema.optional(Schema.String),
  error: Schema.optional(Schema.String),
  message: Schema.optional(Schema.String),
})

/** @since 0.1.0 @category responses */
export const Healthz = Schema.Struct({ status: Schema.String })

/** @since 0.1.0 @category responses */
export const ServerCapabilities = Schema.Struct({
  supported_models: Schema.Array(
    Schema.Struct({
      model_name: Schema.optional(Schema.NullOr(Schema.String)),
      max_context_length: Schema.optional(Schema.NullOr(Schema.Int)),
    }),
  ),
})

/** @since 0.1.0 @category responses */
export const CreateSessionResponse = Schema.Struct({
  type: Schema.optional(Schema.Literal("create_session")),
  session_id: Schema.String,
  info_message: Schema.optional(Schema.NullOr(Schema.String)),
  warning_message: Schema.optional(Schema.NullOr(Schema.String)),
  error_message: Schema.optional(Schema.NullOr(Schema.String)),
})

/** @since 0.1.0 @category responses */
export const SessionHeartbeatResponse = Schema.Struct({ type: Schema.optional(Schema.String) })

/** @since 0.1.0 @category responses */
export const CreateSamplingSessionResponse = Schema.Struct({
  type: Schema.optional(Schema.String),
  sampling_session_id: Schema.String,
})

/** @since 0.1.0 @category responses */
export const CreateModelResponse = Schema.Struct({
  model_id: Schema.String,
  type: Schema.optional(Schema.String),
})

/** @since 0.1.0 @category responses */
export const GetInfoResponse = Schema.Struct({
  type: Schema.optional(Schema.String),
  model_data: Schema.Struct({
    arch: Schema.optional(Schema.NullOr(Schema.String)),
    model_name: Schema.optional(Schema.NullOr(Schema.String)),
    tokenizer_id: Schema.optional(Schema.NullOr(Schema.String)),
  }),
  model_id: Schema.String,
  is_lora: Schema.optional(Schema.NullOr(Schema.Boolean)),
  lora_rank: Schema.optional(Schema.NullOr(Schema.Int)),
  model_name: Schema.optional(Schema.NullOr(Schema.String)),
  policy_version: Schema.optional(Schema.Int),
  max_sequence_length: Schema.optional(Schema.Int),
})

/** @since 0.1.0 @category responses */
export const ForwardBackwardOutput = Schema.Struct({
  loss_fn_output_type: Schema.optional(Schema.String),
  loss_fn_outputs: Schema.Array(Schema.Record(Schema.String, TensorData)),
  metrics: Metrics,
})
export type ForwardBackwardOutput = typeof ForwardBackwardOutput.Type

/** @since 0.1.0 @category responses */
export const OptimStepResponse = Schema.Struct({
  type: Schema.optional(Schema.String),
  metrics: Schema.optional(Schema.NullOr(Metrics)),
  policy_version: Schema.optional(Schema.Int),
})

/** @since 0.1.0 @category responses */
export const SaveWeightsResponse = Schema.Struct({
  type: Schema.optional(Schema.String),
  path: Schema.String,
})

/** @since 0.1.0 @category responses */
export const SaveWeightsForSamplerResponse = Schema.Struct({
  type: Schema.optional(Schema.String),
  path: Schema.optional(Schema.NullOr(Schema.String)),
  sampling_session_id: Schema.optional(Schema.NullOr(Schema.String)),
  policy_version: Schema.optional(Schema.Int),
})

/** @since 0.1.0 @category responses */
export const LoadWeightsResponse = Schema.Struct({
  type: Schema.optional(Schema.String),
  path: Schema.optional(Schema.NullOr(Schema.String)),
  model_id: Schema.optional(Schema.NullOr(Schema.String)),
})

/** @since 0.1.0 @category responses */
export const SampledSequence = Schema.Struct({
  stop_reason: Schema.Literals(["stop", "length"]),
  tokens: Schema.Array(Schema.Int),
  logprobs: Schema.optional(Schema.NullOr(Schema.Array(Schema.Number))),
})

/** @since 0.1.0 @category responses */
export const SampleResponse = Schema.Struct({
  type: Schema.optional(Schema.String),
  sequences: Schema.Array(SampledSequence),
  prompt_logprobs: Schema.optional(Schema.NullOr(Schema.Array(Schema.NullOr(Schema.Number)))),
  policy_version: Schema.optional(Schema.Int),
})
export type SampleResponse = typeof SampleResponse.Type

/** @since 0.1.0 @category responses */
export const SamplerInfo = Schema.Struct({
  sampler_id: Schema.String,
  base_model: Schema.String,
  model_path: Schema.optional(Schema.NullOr(Schema.String)),
  policy_version: Schema.optional(Schema.Int),
})

/** Request types named in `X-Tinker-Request-Type`. @since 0.1.0 @category models */
export type RequestType =
  | "CreateModel"
  | "UnloadModel"
  | "ForwardBackward"
  | "Forward"
  | "OptimStep"
  | "SaveWeights"
  | "SaveWeightsForSampler"
  | "LoadWeights"
  | "Sample"

export {
  METRIC_KEYS,
  METRIC_REDUCTIONS,
  metricFromWire,
  metricKeyFromWire,
  metricKeyToWire,
  metricsFromWire,
  metricsToWire,
  metricToWire,
} from "./WireMetrics.ts"

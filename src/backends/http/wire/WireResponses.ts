/**
 * Response bodies of the Tinker wire (JSON, snake_case): submissions, future states,
 * errors and results, one Schema per route.
 *
 * @since 0.1.0
 */
import { Option, Schema } from "effect"
import { DatumIssue } from "../../../contract/DatumIssue.ts"
import { Metrics } from "./WireMetrics.ts"
import { TensorData } from "./WireData.ts"

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
  /** a refused datum's issue (an extension: gyre's names and positions; read with {@link issueOf}) */
  issue: Schema.optional(Schema.Unknown),
})
export type FutureError = typeof FutureError.Type

/** The body of a non-2xx answer from this server (the client also reads `error` / `message`). @since 0.1.0 @category responses */
export const ErrorBody = Schema.Struct({
  detail: Schema.optional(Schema.String),
  error: Schema.optional(Schema.String),
  message: Schema.optional(Schema.String),
  /** a refused datum's issue (an extension: gyre's names and positions; read with {@link issueOf}) */
  issue: Schema.optional(Schema.Unknown),
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

/**
 * The `issue` of an error body or failed future as a `DatumIssue`, or undefined when there is
 * none or it does not decode (another server's field of that name, a newer gyre's kind of
 * issue): the error itself is never lost over it.
 * @since 0.1.0 @category combinators
 */
export const issueOf = (issue: unknown): DatumIssue | undefined =>
  issue === undefined ? undefined : Option.getOrUndefined(Schema.decodeUnknownOption(DatumIssue)(issue))

/**
 * Schemas of the Loops control plane (`/v1/loops/*` on Baseten's management API), one
 * per request and response of each route gyre uses, as the Loops API reference
 * documents them (docs.baseten.co/reference/loops-api, OpenAPI "Baseten management API
 * 1.0.0"; the component names below are the reference's).
 *
 * | route | request | response |
 * |---|---|---|
 * | `GET /v1/loops/capabilities` | - | `GetLoopsCapabilitiesResponseV1` |
 * | `POST /v1/loops/sessions` | no body | `CreateLoopsSessionResponseV1` |
 * | `GET /v1/loops/sessions/{session_id}` | - | `GetLoopsSessionResponseV1` |
 * | `POST /v1/loops/runs` | `CreateLoopsRunRequestV1` | `CreateLoopsRunResponseV1` |
 * | `GET /v1/loops/runs` | `run_id?`, `base_model?`, `scope?` | `ListLoopsRunsResponseV1` |
 * | `GET /v1/loops/runs/{run_id}` | - | `GetLoopsRunResponseV1` |
 * | `POST /v1/loops/runs/{run_id}/deactivate` | no body | `DeactivateLoopsRunResponseV1` |
 * | `GET /v1/loops/deployments/{deployment_id}` | - | `GetLoopsDeploymentResponseV1` |
 * | `GET /v1/loops/checkpoints` | exactly one of `run_id`, `base_model`, `checkpoint_path` | `ListLoopsCheckpointsResponseV1` |
 * | `GET /v1/loops/checkpoints/{checkpoint_id}/files` | `page_size` (1000), `page_token` (0) | `LoopsCheckpointFilesResponseV1` |
 *
 * Requests carry only documented fields. Answers are read liberally, so that nothing a
 * live service says can stop a run from being found or deactivated: fields the API may
 * add are ignored; fields gyre never reads (`user`, `instance_type`, ...) are optional;
 * a status name is any string (the values the reference lists are in `RUN_STATUS`,
 * `SAMPLER_STATUS`, `DEPLOYMENT_STATUS`; another one is "not ready yet" to
 * `Provision.ts`); a run's and a sampler's `base_url` may be `null` or absent while the
 * run comes up. A run needs only its `id` (`RunId`, the decoder read first after a
 * create). Other fields gyre reads keep their documented type, and a mismatch names the
 * route and the field.
 *
 * Not used, so not modelled: trainer-only runs (`POST /v1/loops/trainers`), standalone
 * samplers (`/v1/loops/samplers`), checkpoint validation and deployment
 * (`/v1/loops/checkpoints/validate`, `/deploy`), deployment lists, logs and metrics,
 * `user_config`, the team-scoped twins (`/v1/teams/{team_id}/loops/...`), and the newer
 * reference's serverless `scope` field of run creation.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"

const NonNegativeInt = Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))
const PositiveInt = Schema.Int.check(Schema.isGreaterThanOrEqualTo(1))

/** `UserV1`: who owns a resource. @since 0.1.0 @category models */
export const User = Schema.Struct({ email: Schema.optional(Schema.NullOr(Schema.String)) })

// ---------------------------------------------------------------------------
// capabilities

/** `SupportedModelV1`. @since 0.1.0 @category models */
export const SupportedModel = Schema.Struct({
  model_name: Schema.String,
  max_context_length: Schema.Int,
  supports_vision_language: Schema.optional(Schema.Boolean),
})
export type SupportedModel = typeof SupportedModel.Type

/** `GetLoopsCapabilitiesResponseV1`. @since 0.1.0 @category models */
export const CapabilitiesResponse = Schema.Struct({ supported_models: Schema.Array(SupportedModel) })
export type CapabilitiesResponse = typeof CapabilitiesResponse.Type

// ---------------------------------------------------------------------------
// sessions

/** `LoopsSessionV1`. @since 0.1.0 @category models */
export const Session = Schema.Struct({ id: Schema.String })
export type Session = typeof Session.Type

/** `CreateLoopsSessionResponseV1` and `GetLoopsSessionResponseV1`. @since 0.1.0 @category models */
export const SessionResponse = Schema.Struct({ session: Session })

// ---------------------------------------------------------------------------
// runs and their samplers

/** `DeploymentStatusV1`: the sampler statuses the reference lists. @since 0.1.0 @category constants */
export const SAMPLER_STATUS: ReadonlyArray<string> = [
  "BUILDING",
  "DEPLOYING",
  "DEPLOY_FAILED",
  "LOADING_MODEL",
  "ACTIVE",
  "UNHEALTHY",
  "BUILD_FAILED",
  "BUILD_STOPPED",
  "DEACTIVATING",
  "INACTIVE",
  "FAILED",
  "UPDATING",
  "SCALED_TO_ZERO",
  "WAKING_UP",
]

/**
 * A status as the service names it: any string (see the module doc), with whatever the
 * service says about it (read when it is text: `statusMessageOf`).
 */
const Status = Schema.Struct({ name: Schema.String, message: Schema.optional(Schema.Unknown), reason: Schema.optional(Schema.Unknown) })

/** `LoopsSamplerV1`: the sampler paired with a run. @since 0.1.0 @category models */
export const Sampler = Schema.Struct({
  id: Schema.optional(Schema.String),
  /** null or absent until the sampler is deployed */
  base_url: Schema.optional(Schema.NullOr(Schema.String)),
  base_model: Schema.optional(Schema.String),
  created_at: Schema.optional(Schema.String),
  model_id: Schema.optional(Schema.NullOr(Schema.String)),
  deployment_id: Schema.optional(Schema.NullOr(Schema.String)),
  status: Schema.optional(Status),
  user: Schema.optional(User),
  node_count: Schema.optional(Schema.Int),
})
export type Sampler = typeof Sampler.Type

/** `LoopsRunStatusNameV1`: `ACTIVE` while the run is live, `INACTIVE` once replaced or shut down. @since 0.1.0 @category constants */
export const RUN_STATUS: ReadonlyArray<string> = ["ACTIVE", "INACTIVE"]

/**
 * Run statuses of a run that has ended: `INACTIVE` (the reference's), and those a live
 * service reports for a run that failed or was torn down, which the reference does not
 * list (`FAILED`, `TERMINATED`, ...). Such a run never becomes ready and serves nothing.
 * @since 0.1.0 @category constants
 */
export const RUN_ENDED: ReadonlySet<string> = new Set(["INACTIVE", "FAILED", "TERMINATED", "STOPPED", "PREEMPTED", "ERROR", "ERRORED", "CANCELLED", "CANCELED"])

/**
 * The smallest reading of a created run: its id, so that it can be recorded and
 * deactivated whatever else its answer holds.
 * @since 0.1.0 @category models
 */
export const RunId = Schema.Struct({ run: Schema.Struct({ id: Schema.String.check(Schema.isMinLength(1)) }) })

/** `LoopsRunV1`: a trainer ("run") with its paired sampler. @since 0.1.0 @category models */
export const Run = Schema.Struct({
  id: Schema.String,
  session_id: Schema.optional(Schema.String),
  deployment_id: Schema.optional(Schema.NullOr(Schema.String)),
  name: Schema.optional(Schema.NullOr(Schema.String)),
  base_model: Schema.optional(Schema.String),
  /** the trainer's URL; null or absent until the run is up */
  base_url: Schema.optional(Schema.NullOr(Schema.String)),
  created_at: Schema.optional(Schema.String),
  status: Schema.optional(Status),
  user: Schema.optional(User),
  sampler: Schema.optional(Schema.NullOr(Sampler)),
  /** not in the reference: what a service may say of a run's status (read when it is text) */
  status_message: Schema.optional(Schema.Unknown),
  error: Schema.optional(Schema.Unknown),
})
export type Run = typeof Run.Type

/**
 * What the control plane says about a run's status, when it says anything as text:
 * `status.message`, `status.reason`, `status_message` or `error`; undefined otherwise.
 * @since 0.1.0 @category combinators
 */
export const statusMessageOf = (run: Run): string | undefined => {
  for (const v of [run.status?.message, run.status?.reason, run.status_message, run.error]) {
    if (typeof v === "string" && v.trim() !== "") return v.length > 500 ? `${v.slice(0, 500)}...` : v
  }
  return undefined
}

/** A run's status as shown in messages: its name, with what the control plane says of it. @since 0.1.0 @category combinators */
export const describeStatus = (run: Run): string => {
  const message = statusMessageOf(run)
  return `${run.status?.name ?? "not reported"}${message === undefined ? "" : ` (${message})`}`
}

/** `CreateLoopsRunResponseV1` and `GetLoopsRunResponseV1`. @since 0.1.0 @category models */
export const RunResponse = Schema.Struct({ run: Run })

/** `ListLoopsRunsResponseV1`. @since 0.1.0 @category models */
export const ListRunsResponse = Schema.Struct({ runs: Schema.Array(Run) })

/** `V1AvailabilityModel`. @since 0.1.0 @category models */
export const AvailabilityModel = Schema.Literals(["dedicated", "spot"])

/**
 * `CreateLoopsRunRequestV1`: `session_id` and `base_model` are required; the rest take
 * the API's defaults when absent (`lora_rank` 64, `scale_down_delay_seconds` 3600,
 * `availability_model` dedicated, `replicas` 1). `path` starts the trainer from a
 * `bt://loops:<run_id>/weights/<name>` checkpoint.
 * @since 0.1.0 @category models
 */
export const CreateRunRequest = Schema.Struct({
  session_id: Schema.String,
  base_model: Schema.String,
  name: Schema.optional(Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(255))),
  max_seq_len: Schema.optional(PositiveInt),
  lora_rank: Schema.optional(PositiveInt),
  seed: Schema.optional(Schema.Int),
  scale_down_delay_seconds: Schema.optional(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 3600 }))),
  availability_model: Schema.optional(AvailabilityModel),
  replicas: Schema.optional(PositiveInt),
  path: Schema.optional(Schema.String),
  reuse_from_run_id: Schema.optional(Schema.String),
})
export type CreateRunRequest = typeof CreateRunRequest.Type

/** Query of `GET /v1/loops/runs`. @since 0.1.0 @category models */
export const ListRunsQuery = Schema.Struct({
  run_id: Schema.optional(Schema.String),
  base_model: Schema.optional(Schema.String),
  /** `org` lists every run of the organization; default the caller's own */
  scope: Schema.optional(Schema.Literal("org")),
})
export type ListRunsQuery = typeof ListRunsQuery.Type

/** `DeactivateLoopsRunResponseV1`. @since 0.1.0 @category models */
export const DeactivateRunResponse = Schema.Struct({
  id: Schema.String,
  base_model: Schema.optional(Schema.String),
  user: Schema.optional(User),
})
export type DeactivateRunResponse = typeof DeactivateRunResponse.Type

// ---------------------------------------------------------------------------
// deployments (the trainer's provisioning state)

/** `LoopsDeploymentStatus`: the trainer deployment statuses the reference lists. @since 0.1.0 @category constants */
export const DEPLOYMENT_STATUS: ReadonlyArray<string> = ["CREATED", "DEPLOYING", "RUNNING", "SCALED_TO_ZERO", "FAILED", "STOPPED", "PREEMPTED"]

/** `LoopsDeploymentV1` (the fields gyre reads). @since 0.1.0 @category models */
export const Deployment = Schema.Struct({
  id: Schema.String,
  base_model: Schema.optional(Schema.String),
  base_url: Schema.optional(Schema.NullOr(Schema.String)),
  status: Schema.optional(Status),
  active_run_id: Schema.optional(Schema.NullOr(Schema.String)),
  latest_run_id: Schema.optional(Schema.NullOr(Schema.String)),
  created_at: Schema.optional(Schema.String),
  availability_model: Schema.optional(AvailabilityModel),
  node_count: Schema.optional(Schema.Int),
  sampler: Schema.optional(Schema.NullOr(Sampler)),
})
export type Deployment = typeof Deployment.Type

/** `GetLoopsDeploymentResponseV1`. @since 0.1.0 @category models */
export const DeploymentResponse = Schema.Struct({ deployment: Deployment })

// ---------------------------------------------------------------------------
// checkpoints

/** `TrainerCheckpointTarget`: `trainer` (`weights/`, resumable) or `sampler` (`sampler_weights/`, deployable). @since 0.1.0 @category models */
export const CheckpointTarget = Schema.Literals(["sampler", "trainer"])

/** `LoopsCheckpointV1`: `checkpoint_id` is the name (`step-3`), `id` the global id of the files route. @since 0.1.0 @category models */
export const Checkpoint = Schema.Struct({
  checkpoint_id: Schema.String,
  created_at: Schema.String,
  checkpoint_type: Schema.String,
  base_model: Schema.optional(Schema.NullOr(Schema.String)),
  lora_adapter_config: Schema.optional(Schema.NullOr(Schema.Record(Schema.String, Schema.Unknown))),
  size_bytes: Schema.Int,
  sync_status: Schema.optional(Schema.NullOr(Schema.String)),
  id: Schema.String,
  run_id: Schema.String,
  target: CheckpointTarget,
})
export type Checkpoint = typeof Checkpoint.Type

/** `ListLoopsCheckpointsResponseV1`. @since 0.1.0 @category models */
export const ListCheckpointsResponse = Schema.Struct({ checkpoints: Schema.Array(Checkpoint) })

/** Query of `GET /v1/loops/checkpoints`: exactly one filter. @since 0.1.0 @category models */
export type CheckpointsQuery =
  | { readonly run_id: string }
  | { readonly base_model: string }
  | { readonly checkpoint_path: string }

/** `CheckpointFile`: one file of a checkpoint folder, at a presigned URL. @since 0.1.0 @category models */
export const CheckpointFile = Schema.Struct({
  url: Schema.String,
  relative_file_name: Schema.String,
  node_rank: NonNegativeInt,
  size_bytes: NonNegativeInt,
  last_modified: Schema.optional(Schema.String),
})
export type CheckpointFile = typeof CheckpointFile.Type

/** `LoopsCheckpointFilesResponseV1`: one page; `next_page_token` is the next offset, null after the last page. @since 0.1.0 @category models */
export const CheckpointFilesResponse = Schema.Struct({
  presigned_urls: Schema.Array(CheckpointFile),
  next_page_token: Schema.optional(Schema.NullOr(NonNegativeInt)),
  total_count: NonNegativeInt,
})
export type CheckpointFilesResponse = typeof CheckpointFilesResponse.Type

/** Query of the files route. @since 0.1.0 @category models */
export interface FilesPage {
  readonly page_size?: number | undefined
  readonly page_token?: number | undefined
}

// ---------------------------------------------------------------------------
// checkpoint URIs

/** A parsed `bt://loops:<run_id>/(weights|sampler_weights)/<name>`. @since 0.1.0 @category models */
export interface CheckpointUri {
  readonly runId: string
  readonly kind: "weights" | "sampler_weights"
  readonly name: string
}

/**
 * Parses a Loops checkpoint URI; `undefined` when `uri` is not one.
 *
 * @example
 * ```ts
 * parseCheckpointUri("bt://loops:k4q95w5/sampler_weights/step-100")
 * // => { runId: "k4q95w5", kind: "sampler_weights", name: "step-100" }
 * ```
 * @since 0.1.0 @category combinators
 */
export const parseCheckpointUri = (uri: string): CheckpointUri | undefined => {
  const [, runId, kind, name] = /^bt:\/\/loops:([^/]+)\/(weights|sampler_weights)\/(.+)$/.exec(uri) ?? []
  if (runId === undefined || name === undefined || (kind !== "weights" && kind !== "sampler_weights")) return undefined
  return { runId, kind, name }
}

/**
 * The Loops data plane's wire: the HTTP a run's trainer (`run.base_url`, a "dp_worker")
 * and its paired sampler (`run.sampler.base_url`) speak. Loops documents this wire only
 * at the level of its Python SDK, so this is the one module that holds what gyre had to
 * establish from public evidence, and what it had to assume. Each route says which.
 *
 * Sources: the Loops SDK reference (docs.baseten.co/reference/sdk/loops: training-client,
 * sampling-client, errors; "SDK"), the Loops API reference ("API"), and public code that
 * calls a live trainer over raw HTTP ("code": scripts of `JackRao123/experiment-artefacts`
 * @ d6de90bb, e.g. `glm/klprobe/scripts/synthetic_15k_klprobe.py`, `glm/scripts/cp_rl_parity.py`,
 * with the trainer's access logs; `basetenlabs/truss` `truss/cli/loops_commands.py`).
 *
 * Trainer, every long operation (submit and retrieve):
 * | route | status | what |
 * |---|---|---|
 * | `POST /{op}` + `Idempotency-Key` | code, SDK ("submit-and-retrieve") | 202 `{operation_id}`; 422 for a body the server refuses; one operation at a time, in submission order |
 * | `GET /operations/{id}` | code, SDK ("`.result()` long-polls") | held ~30 s; 408 = poll again; 200 `{status: "done", result}` or `{status: "error", error: "Class: message"}` |
 * | 404 on a poll | SDK (errors page) | the server lost the operation (restart, result expired): resubmit with the same key |
 * | 503 | SDK (errors page) | the server is shutting down: retry |
 * | `GET /health` | SDK, code (truss) | 200 when ready |
 * | `GET /policy_version` | SDK ("each access issues a GET /policy_version") | body assumed `{policy_version: n}` (a bare number is read too) |
 *
 * Trainer operations (`{op}`), with their bodies:
 * | op | status | body | result |
 * |---|---|---|---|
 * | `forward_backward`, `forward` | code | `{data, loss_fn, loss_fn_config?}`; Datums as Tinker's (`model_input` chunks, `loss_fn_inputs` TensorData), targets shifted (`target_tokens[i]` = token i+1) | `{loss, loss_fn_outputs: [{logprobs}]}`; `metrics` assumed optional |
 * | `top_k_logprobs` on them | assumed | a top-level field, as gyre's Tinker extension | `topk_*` tensors, as gyre's Tinker extension |
 * | `optim_step` | code | `{adam_params: {learning_rate, beta1, beta2, eps, weight_decay, grad_clip_norm}}` | `{metrics: {grad_norm, ...}}`; bumps the policy version |
 * | `save_weights_for_sampler` | code | `{name, run_id, bump_version?}` | assumed `{path?}`; gyre builds `bt://loops:<run>/sampler_weights/<name>` when absent |
 * | `save_state` | code (422 without `run_id`) | `{name, run_id}` | assumed `{path?}`; else `bt://loops:<run>/weights/<name>` |
 * | `load_state`, `load_state_with_optimizer` | assumed (named after the SDK's methods) | `{path}` | ignored |
 *
 * Sampler (Baseten's vLLM OpenAI server with LoRA; SDK: `/v1/models` entries with a
 * `parent` are adapters, the policy-version floor travels as `X-Min-Policy-Version` and
 * the sampler holds the request until it serves that version):
 * | route | status | what |
 * |---|---|---|
 * | `GET /v1/models` | SDK | `{data: [{id, parent}]}` |
 * | `POST /v1/completions` | assumed (the route the SDK's `sample()` calls is not public) | vLLM's: token-id `prompt`, `n`, `max_tokens`, `logprobs`, `prompt_logprobs`, `return_tokens_as_token_ids`; answers `choices[i].logprobs.{tokens: ["token_id:N"], token_logprobs}`, `finish_reason`, `choices[i].prompt_logprobs` (vLLM's place; a top-level `prompt_logprobs` is read too) |
 * | `policy_version` in that answer | SDK ("every sample result reports the policy version"); its place assumed | a top-level field |
 *
 * Authentication on both: `Authorization: Api-Key <key>` (assumed: what the truss CLI
 * sends to `{run.base_url}/health`; the API accepts `Api-Key` and `Bearer` alike).
 *
 * Not found anywhere public: the SDK's source, the route and body of `load_state`, the
 * sampler route `sample()` uses, the `/policy_version` body, the operation TTL, whether
 * a forward result carries `metrics`, and the reference (base-model) scoring route.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"
import * as Wire from "../http/wire/Wire.ts"

/** @since 0.1.0 @category constants */
export const Headers = {
  idempotencyKey: "idempotency-key",
  minPolicyVersion: "x-min-policy-version",
  /** assumed: the SDK's `sample()` takes an affinity key; gyre sends it as its Tinker extension does */
  affinityKey: "x-affinity-key",
  authorization: "authorization",
} as const

/** The authorization scheme of the data plane (assumed, see the module doc). @since 0.1.0 @category constants */
export const AUTH_SCHEME = "Api-Key"

/** The trainer's operations and their routes. @since 0.1.0 @category constants */
export const OPERATIONS = ["forward_backward", "forward", "optim_step", "save_state", "save_weights_for_sampler", "load_state", "load_state_with_optimizer"] as const
export type Operation = (typeof OPERATIONS)[number]

const Finite = Schema.Finite
const Int = Schema.Int
const NonNegativeInt = Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))

/** `forward_backward` and `forward`. @since 0.1.0 @category requests */
export const ForwardRequest = Schema.Struct({
  data: Schema.Array(Wire.Datum),
  /** the SDK's default is `cross_entropy` */
  loss_fn: Schema.optional(Schema.String),
  loss_fn_config: Schema.optional(Schema.NullOr(Schema.Record(Schema.String, Finite))),
  top_k_logprobs: Schema.optional(NonNegativeInt),
})
export type ForwardRequest = typeof ForwardRequest.Type

/** `optim_step`. @since 0.1.0 @category requests */
export const OptimStepRequest = Schema.Struct({ adam_params: Wire.AdamParams })

/** `save_state` and `save_weights_for_sampler`. @since 0.1.0 @category requests */
export const SaveRequest = Schema.Struct({
  name: Schema.String,
  run_id: Schema.optional(Schema.NullOr(Schema.String)),
  bump_version: Schema.optional(Schema.Boolean),
})

/** `load_state` and `load_state_with_optimizer`. @since 0.1.0 @category requests */
export const LoadStateRequest = Schema.Struct({ path: Schema.String })

/** A submission's answer. @since 0.1.0 @category responses */
export const Submitted = Schema.Struct({ operation_id: Schema.String })

/** An operation's outcome (`GET /operations/{id}`, 200). @since 0.1.0 @category responses */
export const OperationState = Schema.Struct({
  status: Schema.String,
  result: Schema.optional(Schema.Unknown),
  error: Schema.optional(Schema.NullOr(Schema.String)),
  error_class: Schema.optional(Schema.NullOr(Schema.String)),
  /** gyre's own server adds the `BackendError` reason */
  reason: Schema.optional(Schema.String),
})
export type OperationState = typeof OperationState.Type

/** A result tensor: `dtype` is not always sent. @since 0.1.0 @category responses */
export const ResultTensor = Schema.Struct({
  data: Schema.Array(Schema.NullOr(Schema.Number)),
  dtype: Schema.optional(Schema.String),
  shape: Schema.optional(Schema.Array(NonNegativeInt)),
})

/** `forward_backward` / `forward` result. @since 0.1.0 @category responses */
export const ForwardResult = Schema.Struct({
  /** dropped by the server when not finite */
  loss: Schema.optional(Schema.NullOr(Schema.Number)),
  loss_fn_outputs: Schema.Array(Schema.Record(Schema.String, ResultTensor)),
  metrics: Schema.optional(Schema.NullOr(Schema.Record(Schema.String, Schema.Number))),
})
export type ForwardResult = typeof ForwardResult.Type

/** `optim_step` result. @since 0.1.0 @category responses */
export const OptimStepResult = Schema.Struct({
  metrics: Schema.optional(Schema.NullOr(Schema.Record(Schema.String, Schema.Number))),
  grad_norm: Schema.optional(Schema.Number),
  policy_version: Schema.optional(Int),
})

/** `save_state` / `save_weights_for_sampler` result. @since 0.1.0 @category responses */
export const SaveResult = Schema.Struct({ path: Schema.optional(Schema.NullOr(Schema.String)), policy_version: Schema.optional(Int) })

/** `GET /policy_version`: an object with the number, or the bare number. @since 0.1.0 @category responses */
export const PolicyVersion = Schema.Union([Schema.Struct({ policy_version: NonNegativeInt }), NonNegativeInt])

/** `GET /v1/models`. @since 0.1.0 @category responses */
export const Models = Schema.Struct({
  data: Schema.Array(Schema.Struct({ id: Schema.String, parent: Schema.optional(Schema.NullOr(Schema.String)) })),
})

/** `POST /v1/completions` (the fields gyre sends; vLLM's names). @since 0.1.0 @category requests */
export const CompletionRequest = Schema.Struct({
  model: Schema.String,
  prompt: Schema.Array(NonNegativeInt),
  n: Schema.optional(Schema.Int.check(Schema.isGreaterThanOrEqualTo(1))),
  max_tokens: Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)),
  temperature: Schema.optional(Finite),
  top_p: Schema.optional(Finite),
  top_k: Schema.optional(Int),
  seed: Schema.optional(Int),
  stop: Schema.optional(Schema.Array(Schema.String)),
  stop_token_ids: Schema.optional(Schema.Array(NonNegativeInt)),
  /** log-probs of the sampled tokens (gyre sends 1: the sampled token's own) */
  logprobs: Schema.optional(NonNegativeInt),
  /** log-probs of the prompt's tokens (0: each token's own) */
  prompt_logprobs: Schema.optional(NonNegativeInt),
  return_tokens_as_token_ids: Schema.optional(Schema.Boolean),
})
export type CompletionRequest = typeof CompletionRequest.Type

/** A prompt position's log-probs (vLLM: token id -> `{logprob}`); null at position 0. @since 0.1.0 @category responses */
export const PromptLogprob = Schema.NullOr(Schema.Record(Schema.String, Schema.Struct({ logprob: Schema.Number })))

/** One completion. @since 0.1.0 @category responses */
export const Choice = Schema.Struct({
  index: Schema.optional(Int),
  text: Schema.optional(Schema.String),
  logprobs: Schema.Struct({
    /** `token_id:N` with `return_tokens_as_token_ids` */
    tokens: Schema.Array(Schema.String),
    token_logprobs: Schema.Array(Schema.NullOr(Schema.Number)),
  }),
  finish_reason: Schema.NullOr(Schema.String),
  /** where vLLM puts the prompt's log-probs: in each choice */
  prompt_logprobs: Schema.optional(Schema.NullOr(Schema.Array(PromptLogprob))),
})

/** `POST /v1/completions` answer. @since 0.1.0 @category responses */
export const CompletionResponse = Schema.Struct({
  choices: Schema.Array(Choice),
  /** read when no choice carries them */
  prompt_logprobs: Schema.optional(Schema.NullOr(Schema.Array(PromptLogprob))),
  policy_version: Schema.optional(Int),
})
export type CompletionResponse = typeof CompletionResponse.Type

/** `token_id:N` -> N, or undefined when it is not that form. @since 0.1.0 @category combinators */
export const tokenIdOf = (token: string): number | undefined => {
  const m = /^token_id:(\d+)$/.exec(token)
  return m === null ? undefined : Number(m[1])
}

/** The checkpoint URI of a save that did not name one. @since 0.1.0 @category combinators */
export const checkpointUri = (runId: string, kind: "weights" | "sampler_weights", name: string) => `bt://loops:${runId}/${kind}/${name}`

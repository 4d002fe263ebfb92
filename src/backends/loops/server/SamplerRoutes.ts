/**
 * The sampler half of gyre's Loops data-plane server, on the route `DataWire.ts`
 * assumes (vLLM's `/v1/completions` with token ids), over gyre's `Sampler`.
 *
 * `GET /v1/models` lists the base model, and once the trainer has published, the run's
 * adapter (`<run>-policy`, whose `parent` is the base). A request names one of them: the
 * adapter (or the base before anything was published) is the trained policy; the base
 * once training has published is refused, since the embedded sampler serves the adapter.
 * `X-Min-Policy-Version` holds the request until that version is served (at most the
 * server's ready timeout); `X-Affinity-Key` keeps a group on one sampler replica.
 *
 * @since 0.1.0
 */
import { Effect, Result, Schema } from "effect"
import { type BackendError, modelInputFromTokens } from "../../../contract/Contract.ts"
import { decode } from "../../../util/Decode.ts"
import type { SamplerShape } from "../../../services/Sampler.ts"
import * as DataWire from "../DataWire.ts"
import { Refusal, strict } from "./TrainerRoutes.ts"

/** @since 0.1.0 @category models */
export interface Options {
  readonly sampler: SamplerShape
  readonly modelName: string
  readonly runId: string
  /** the policy version published so far */
  readonly published: Effect.Effect<number, BackendError>
}

const Headers = Schema.Struct({
  [DataWire.Headers.minPolicyVersion]: Schema.optional(Schema.NumberFromString.check(Schema.isInt(), Schema.isGreaterThanOrEqualTo(0))),
  [DataWire.Headers.affinityKey]: Schema.optional(Schema.String.check(Schema.isMaxLength(1024))),
})

const unavailable = (e: BackendError) => new Refusal({ status: e.reason === "InvalidInput" ? 422 : e.reason === "Timeout" ? 408 : 503, message: `${e.operation}: ${e.message}` })

/** The adapter's name in `/v1/models`. @since 0.1.0 @category combinators */
export const adapterId = (runId: string) => `${runId}-policy`

/** `GET /v1/models`. */
const models = (o: Options) =>
  Effect.map(o.published.pipe(Effect.mapError(unavailable)), (version) => ({
    object: "list",
    data: [
      { id: o.modelName, object: "model", parent: null },
      ...(version > 0 ? [{ id: adapterId(o.runId), object: "model", parent: o.modelName, policy_version: version }] : []),
    ],
  }))

/** The sampling parameters of a completion request as gyre's. */
const paramsOf = (req: DataWire.CompletionRequest) => {
  const stop = [...(req.stop ?? []), ...(req.stop_token_ids ?? [])]
  return {
    maxTokens: req.max_tokens,
    temperature: req.temperature ?? 1,
    ...(req.top_p !== undefined ? { topP: req.top_p } : {}),
    ...(req.top_k !== undefined && req.top_k > 0 ? { topK: req.top_k } : {}),
    ...(req.seed !== undefined ? { seed: req.seed } : {}),
    ...(stop.length > 0 ? { stop } : {}),
  }
}

/** `POST /v1/completions`. */
const completions = (o: Options, counter: { n: number }) => (body: unknown, headers: Readonly<Record<string, string | undefined>>) =>
  Effect.gen(function* () {
    const req = yield* strict(DataWire.CompletionRequest, body)
    const h = decode(Headers, "headers")({ [DataWire.Headers.minPolicyVersion]: headers[DataWire.Headers.minPolicyVersion], [DataWire.Headers.affinityKey]: headers[DataWire.Headers.affinityKey] })
    if (Result.isFailure(h)) return yield* new Refusal({ status: 400, message: h.failure })
    const published = yield* o.published.pipe(Effect.mapError(unavailable))
    if (req.model !== o.modelName && req.model !== adapterId(o.runId)) {
      return yield* new Refusal({ status: 404, message: `body.model ${JSON.stringify(req.model.slice(0, 200))} is not served here: GET /v1/models lists what is` })
    }
    if (req.model === o.modelName && published > 0) {
      return yield* new Refusal({ status: 400, message: `body.model names the base model, but this sampler serves the run's adapter (${adapterId(o.runId)}, policy version ${published}), not the base weights` })
    }
    if (req.logprobs !== undefined && req.logprobs > 1) return yield* new Refusal({ status: 422, message: `body.logprobs is ${req.logprobs}; this sampler returns the sampled token's own log-prob only (send 0 or 1)` })
    if (req.prompt_logprobs !== undefined && req.prompt_logprobs > 0) return yield* new Refusal({ status: 422, message: `body.prompt_logprobs is ${req.prompt_logprobs}; this sampler scores the prompt's own tokens only (send 0)` })
    const min = h.success[DataWire.Headers.minPolicyVersion]
    const key = h.success[DataWire.Headers.affinityKey]
    const r = yield* o.sampler.sample(modelInputFromTokens(req.prompt), paramsOf(req), {
      numSamples: req.n ?? 1,
      ...(min !== undefined ? { minPolicyVersion: min } : {}),
      ...(key !== undefined ? { affinityKey: key } : {}),
      ...(req.prompt_logprobs !== undefined ? { includePromptLogprobs: true } : {}),
    }).pipe(Effect.mapError(unavailable))
    return {
      id: `cmpl-${++counter.n}`,
      object: "text_completion",
      model: req.model,
      choices: r.sequences.map((s, index) => ({
        index,
        text: "",
        logprobs: { tokens: s.tokens.map((t) => `token_id:${t}`), token_logprobs: [...s.logprobs] },
        finish_reason: s.stopReason,
      })),
      ...(r.promptLogprobs !== undefined ? { prompt_logprobs: r.promptLogprobs.map((lp, i) => (i === 0 ? null : { [String(req.prompt[i])]: { logprob: lp } })) } : {}),
      policy_version: r.policyVersion,
    }
  })

/** The sampler's routes: `GET /v1/models` and `POST /v1/completions`. @since 0.1.0 @category constructors */
export const make = (o: Options) => ({ models: models(o), completions: completions(o, { n: 0 }) })

/**
 * The server's sampling endpoints: `create_sampling_session`, `asample` and
 * `GET samplers/{id}`.
 *
 * A sample goes to the sampler of the model it names (a sampling session or a
 * `tinker://.../sampler_weights/...` path), or to the base model's. Among that
 * sampler's replicas it is routed by `X-Affinity-Key` (consistent hashing; round
 * robin without one). A sample pinned to a policy version (`X-Min-Policy-Version`, or
 * the version its sampling session was published at) waits for that version at most
 * `readyTimeout`, then fails with reason `Timeout` naming the version waited for and
 * the version served; the wait holds no sampler resources, and it counts against the
 * server's bound on pending futures.
 *
 * A sampling session of the base model (`create_sampling_session` with `base_model`, or
 * with neither `base_model` nor `model_path`) serves the frozen base weights, which a KL
 * penalty's reference log-probs come from. A server without a model factory trains its
 * one adapter on the base model's own sampler, so it refuses such a session: once
 * trained, that sampler no longer serves the base. A session's `sampling_session_seq_id`
 * is taken from the session's sampler counter (the one named samplers are numbered by),
 * and one already naming another sampler is refused (400).
 *
 * @since 0.1.0
 */
import { type Duration, Effect, Result, SubscriptionRef } from "effect"
import { awaitVersion } from "../../../services/Sampler.ts"
import * as Alignment from "../wire/Alignment.ts"
import type { FutureTable } from "./Futures.ts"
import * as SessionFutures from "./SessionFutures.ts"
import type { Model, Registry, SamplerTarget } from "./Models.ts"
import { bad, decodeOr400, decodeRequestOr400, notFound, Reject, samplingParamsFromWire } from "./Requests.ts"
import type { Handler } from "./TrainingRoutes.ts"
import * as Wire from "../wire/Wire.ts"

/** A sampler a sampling session or a sampler path names: a model's (by id), or the base model's. @since 0.1.0 @category models */
export interface Published {
  readonly modelId: string | undefined
  readonly version: number
  readonly modelPath: string | undefined
}

/** @since 0.1.0 @category models */
export interface Context {
  readonly registry: Registry
  readonly futures: FutureTable
  /** the completions `retrieve_futures` reports, by sampling session */
  readonly sessionFutures: SessionFutures.SessionFutures
  readonly base: SamplerTarget
  readonly modelName: string
  readonly vocabSize: number | undefined
  readonly maxLength: number
  readonly maxSamples: number
  readonly readyTimeout: Duration.Input
  readonly gather: (key: string) => Effect.Effect<void>
  readonly samplingSessions: Map<string, Published>
  readonly samplerPaths: Map<string, Published>
  /** the sampler a `model_path` names: `samplerPaths`, else one restored from an earlier run of the server (`RestoredSamplers.ts`) */
  readonly samplerPath: (modelPath: string) => Effect.Effect<Published | undefined, Reject>
  /** samples served, by replica of the base sampler */
  readonly replicaRequests: Array<number>
  /**
   * why the base sampler cannot serve the base weights (it is the sampler of the one
   * adapter this server trains), or undefined when it serves them
   */
  readonly baseNotServed: string | undefined
  /** simulated sampling time: each answer waits `perRequestMillis` plus `perTokenMillis` per token of its longest sequence */
  readonly latency: { readonly perRequestMillis: number; readonly perTokenMillis: number }
}

/** What the handlers share: the context and the round-robin counter of samples without an affinity key. */
interface Routes extends Context {
  roundRobin: number
}

/** The base model's sampler. */
const BASE: Published = { modelId: undefined, version: 0, modelPath: undefined }

const targetOf = (ctx: Routes, p: Published): Effect.Effect<{ readonly target: SamplerTarget; readonly model: Model | undefined }, Reject> =>
  p.modelId === undefined
    ? Effect.succeed({ target: ctx.base, model: undefined })
    : Effect.map(ctx.registry.getModel(p.modelId, "the sampler's model"), (m) => ({ target: m.sampler, model: m }))

const servedVersion = (target: SamplerTarget) =>
  Effect.map(Effect.forEach(target.replicas, (r) => r.version, { concurrency: "unbounded" }), (vs) => Math.min(...vs))

/** Waits (at most the ready timeout) until the target serves `min`. */
const ready = (ctx: Routes, target: SamplerTarget, min: number | undefined) =>
  Effect.gen(function* () {
    if (min === undefined || (yield* SubscriptionRef.get(target.published)) >= min) return
    // published without this server (another client of the same backend)
    const served = yield* servedVersion(target)
    if (served >= min) return yield* SubscriptionRef.update(target.published, (v) => Math.max(v, served))
    yield* awaitVersion(target.published, "sample", min, ctx.readyTimeout)
  })

const badBaseModel = (ctx: Routes, name: string) => bad(`base_model ${JSON.stringify(name)} is not served here; this server serves ${JSON.stringify(ctx.modelName)}`)

const createSamplingSession =
  (ctx: Routes): Handler =>
  (body) =>
    Effect.gen(function* () {
      const req = yield* decodeRequestOr400(Wire.CreateSamplingSessionRequest, "create_sampling_session")(body)
      const session = yield* ctx.registry.getSession(req.session_id)
      let published: Published = BASE
      if (req.model_path !== undefined && req.model_path !== null) {
        const p = yield* ctx.samplerPath(req.model_path)
        if (p === undefined) return yield* notFound(`model_path ${JSON.stringify(req.model_path)} is not a sampler checkpoint of this server`)
        published = p
      } else if (req.base_model !== undefined && req.base_model !== null && req.base_model !== ctx.modelName) {
        return yield* badBaseModel(ctx, req.base_model)
      } else if (ctx.baseNotServed !== undefined) {
        return yield* bad(`a sampling session of the base model ${JSON.stringify(ctx.modelName)} cannot be served here: ${ctx.baseNotServed}`)
      }
      const id = `${req.session_id}:sample:${req.sampling_session_seq_id}`
      const existing = ctx.samplingSessions.get(id)
      if (existing !== undefined && (existing.modelId !== published.modelId || existing.version !== published.version || existing.modelPath !== published.modelPath)) {
        return yield* bad(
          `sampling_session_seq_id ${req.sampling_session_seq_id} of this session already names another sampler; use ${Math.max(session.samplers, req.sampling_session_seq_id + 1)}`,
        )
      }
      // samplers published later without a seq id of their own are numbered after this one
      session.samplers = Math.max(session.samplers, req.sampling_session_seq_id + 1)
      ctx.samplingSessions.set(id, published)
      return { type: "create_sampling_session", sampling_session_id: id }
    })

/** The prompt's tokens, or the 400 saying why they cannot be sampled from. */
const promptTokens = (ctx: Routes, req: typeof Wire.SampleRequest.Type) =>
  Effect.gen(function* () {
    const tokens = req.prompt.chunks.flatMap((c) => c.tokens)
    if (tokens.length === 0) return yield* bad("prompt is empty")
    if (tokens.length > ctx.maxLength) return yield* bad(`prompt has ${tokens.length} tokens, more than the context length ${ctx.maxLength}`)
    const badAt = tokens.findIndex((t) => t < 0 || (ctx.vocabSize !== undefined && t >= ctx.vocabSize))
    if (badAt >= 0) return yield* bad(`prompt token ${badAt} is ${tokens[badAt]}, outside the vocabulary [0, ${ctx.vocabSize ?? "?"})`)
    return tokens
  })

/** The sampler an `asample` names: its sampling session, its model path, or the base model. */
const publishedOf = (ctx: Routes, req: typeof Wire.SampleRequest.Type) =>
  Effect.gen(function* () {
    if (req.sampling_session_id !== undefined && req.sampling_session_id !== null) {
      const p = ctx.samplingSessions.get(req.sampling_session_id)
      if (p === undefined) return yield* notFound(`sampling_session_id ${JSON.stringify(req.sampling_session_id)} is unknown`)
      return p
    }
    if (req.model_path !== undefined && req.model_path !== null) {
      const p = yield* ctx.samplerPath(req.model_path)
      if (p === undefined) return yield* notFound(`model_path ${JSON.stringify(req.model_path)} is not a sampler checkpoint of this server`)
      return p
    }
    if (req.base_model !== undefined && req.base_model !== null) {
      if (req.base_model !== ctx.modelName) return yield* badBaseModel(ctx, req.base_model)
      return BASE
    }
    return yield* bad("asample needs sampling_session_id, model_path or base_model")
  })

/** The replica of `target` a sample goes to: by affinity key, else round robin; counted when it is a base replica. */
const pickReplica = (ctx: Routes, target: SamplerTarget, key: string | undefined) => {
  const index = key !== undefined ? target.route(key) : ctx.roundRobin++ % target.replicas.length
  const replica = target.replicas[index]
  if (replica === undefined) throw new Error(`sampler ${target.key}: routed to replica ${index} of ${target.replicas.length}`)
  // one count per base replica: the server builds the counts from the same replicas
  if (target === ctx.base) ctx.replicaRequests[index] = (ctx.replicaRequests[index] ?? 0) + 1
  return { index, replica }
}

/** The simulated sampling time of an answer (none unless `serve` was given one). */
const simulatedLatency = (ctx: Routes, sequences: ReadonlyArray<{ readonly tokens: ReadonlyArray<number> }>) => {
  const { perRequestMillis, perTokenMillis } = ctx.latency
  const millis = perRequestMillis + perTokenMillis * Math.max(0, ...sequences.map((s) => s.tokens.length))
  return millis > 0 ? Effect.sleep(millis) : Effect.void
}

const asample =
  (ctx: Routes): Handler =>
  (body, headers) =>
    Effect.gen(function* () {
      const req = yield* decodeRequestOr400(Wire.SampleRequest, "asample")(body)
      const h = yield* decodeOr400(Wire.SampleHeaders, "headers")({
        [Wire.Headers.minPolicyVersion]: headers[Wire.Headers.minPolicyVersion],
        [Wire.Headers.affinityKey]: headers[Wire.Headers.affinityKey],
      })
      const numSamples = req.num_samples ?? 1
      if (numSamples < 1 || numSamples > ctx.maxSamples) return yield* bad(`num_samples is ${numSamples}; it must be in [1, ${ctx.maxSamples}]`)
      if ((req.topk_prompt_logprobs ?? 0) !== 0) return yield* bad("topk_prompt_logprobs is not supported by this server; send 0")
      const params = samplingParamsFromWire(req.sampling_params, ctx.maxLength)
      if (Result.isFailure(params)) return yield* bad(params.failure)
      const tokens = yield* promptTokens(ctx, req)
      const published = yield* publishedOf(ctx, req)
      const { target, model } = yield* targetOf(ctx, published)
      const pinned = h[Wire.Headers.minPolicyVersion]
      const minVersion = published.version > 0 || pinned !== undefined ? Math.max(pinned ?? 0, published.version) : undefined
      const key = h[Wire.Headers.affinityKey]
      const { index, replica } = pickReplica(ctx, target, key)
      const promptLogprobs = req.prompt_logprobs === true
      const work = ready(ctx, target, minVersion).pipe(
        Effect.andThen(ctx.gather(`${target.key}#${index}`)),
        Effect.andThen(
          replica.sample({ chunks: [{ type: "encoded_text", tokens }] }, params.success, {
            numSamples,
            ...(key !== undefined ? { affinityKey: key } : {}),
            ...(minVersion !== undefined ? { minPolicyVersion: minVersion } : {}),
            ...(promptLogprobs ? { includePromptLogprobs: true } : {}),
          }),
        ),
        Effect.map((r) => ({
          type: "sample",
          sequences: r.sequences.map((s) => ({ stop_reason: s.stopReason, tokens: s.tokens, logprobs: s.logprobs === undefined ? undefined : Alignment.toFloat32(s.logprobs) })),
          ...(promptLogprobs && r.promptLogprobs !== undefined ? { prompt_logprobs: Alignment.promptLogprobsToWire(r.promptLogprobs) } : {}),
          policy_version: r.policyVersion,
        })),
        Effect.tap((r) => simulatedLatency(ctx, r.sequences)),
      )
      // a sampling session's completions are reported to its retrieve_futures polls too
      const session = req.sampling_session_id ?? undefined
      const stream = session === undefined ? undefined : SessionFutures.streamOf(session, Math.floor((req.seq_id ?? 0) / 1e9))
      const id = yield* ctx.futures.start(
        "Sample",
        model === undefined ? work : ctx.registry.tracked(model, work),
        model === undefined ? undefined : ctx.registry.touch(model),
        stream === undefined ? undefined : (done) => ctx.sessionFutures.record(stream, done),
      )
      // newer SDKs (0.32) require one sequence id per sample on the promise
      return { request_id: id, sample_sequence_ids: Array.from({ length: numSamples }, (_, i) => `${id}:${i}`) }
    })

/** `GET samplers/{id}`: the sampler's base model, path and served version. */
const samplerInfo = (ctx: Routes) => (id: string) =>
  Effect.gen(function* () {
    const p = ctx.samplingSessions.get(id)
    if (p === undefined && id !== ctx.modelName) return yield* notFound(`sampler ${JSON.stringify(id.slice(0, 100))} is unknown`)
    const { target } = yield* targetOf(ctx, p ?? BASE)
    const version = yield* servedVersion(target).pipe(Effect.mapError((e) => new Reject({ status: 503, message: e.message })))
    return { sampler_id: id, base_model: ctx.modelName, ...(p?.modelPath ? { model_path: p.modelPath } : {}), policy_version: version }
  })

/** @since 0.1.0 @category constructors */
export const make = (context: Context) => {
  const ctx: Routes = { ...context, roundRobin: 0 }
  const post: Record<string, Handler> = {
    create_sampling_session: createSamplingSession(ctx),
    asample: asample(ctx),
  }
  return { post, samplerInfo: samplerInfo(ctx) }
}

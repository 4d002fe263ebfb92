/**
 * Serves any `Trainer | Sampler` over the Tinker wire protocol (JSON), so that the
 * HTTP client (or the Python SDK) can train and sample through it.
 *
 * - Every body is decoded with the Schemas of `Wire.ts`; bad input gets a 400 whose
 *   `detail` names the field (`forward_backward_input.data[2].loss_fn_inputs.advantages: ...`).
 *   Datums are checked by the one Datum validator before any work (`TrainingRoutes.ts`).
 * - Long operations answer `{request_id}` at once and run as futures (`Futures.ts`);
 *   `retrieve_future` holds the poll up to `pollWait` and answers `try_again` if the
 *   work is not done. At most `maxPendingFutures` run at once (beyond: 429). A
 *   submission sent with `X-Gyre-Wait-Ms` is answered when its future is done (or
 *   that wait, capped at `pollWait`, ends), with the outcome in `result`.
 * - Idempotency keys (`Idempotency.ts`), `seq_id` order (`SeqOrder.ts`), sampling
 *   (`SamplingRoutes.ts`: replicas, gathering, pinned versions with `readyTimeout`).
 * - Sessions and models (`Models.ts`): with `models` (a factory) each `create_model`
 *   gets its own adapter of the rank it asks for, within `memoryBudget`; idle sessions
 *   expire after `sessionIdleTimeout` and free their models.
 * - Checkpoints (`CheckpointIndex.ts`): every checkpoint saved is recorded in
 *   `stateDir`'s durable index, read at start, so a restarted server still loads and
 *   hands out the checkpoints of its earlier runs, and serves their sampler paths again
 *   (`RestoredSamplers.ts`). Downloads (`Archives.ts`): the archive
 *   route answers a download URL of a training checkpoint, whose file lies in `stateDir`.
 * - Policy versions: `optim_step`, `save_weights_for_sampler`, `asample`, `get_info` and
 *   `GET samplers/{id}` answer a `policy_version` field: the number of optimizer steps
 *   behind the weights.
 *
 * @since 0.1.0
 */
import { Context, Duration, Effect, Layer, Option, type Scope } from "effect"
import { DEFAULT_READY_TIMEOUT, Sampler, type SamplerShape } from "../../../services/Sampler.ts"
import { Trainer, type TrainerShape } from "../../../services/Trainer.ts"
import * as PlatformHttpServer from "../../../platform/HttpServer.ts"
import * as Archives from "./Archives.ts"
import * as CheckpointIndex from "./CheckpointIndex.ts"
import * as ClockCycle from "./ClockCycle.ts"
import * as Dispatch from "./Dispatch.ts"
import * as Futures from "./Futures.ts"
import * as Gather from "./Gather.ts"
import * as Idempotency from "./Idempotency.ts"
import * as Models from "./Models.ts"
import * as RestoredSamplers from "./RestoredSamplers.ts"
import * as RestRoutes from "./RestRoutes.ts"
import * as ServiceRoutes from "./ServiceRoutes.ts"
import { decodeRequestOr400, Reject } from "./Requests.ts"
import * as SamplingRoutes from "./SamplingRoutes.ts"
import * as SessionFutures from "./SessionFutures.ts"
import {
  bodyLimitOf,
  DEFAULT_MAX_BODY_BYTES,
  DEFAULT_MAX_PENDING_FUTURES,
  DEFAULT_MEMORY_BUDGET_BYTES,
  DEFAULT_SESSION_IDLE_TIMEOUT,
  type Handle,
  type Options,
  type Stats,
} from "./ServerOptions.ts"
import * as TrainingRoutes from "./TrainingRoutes.ts"
import * as Wire from "../wire/Wire.ts"

export { makeRouter } from "./Router.ts"
export type { ModelFactory, ServedModel } from "./Models.ts"

export * from "./ServerOptions.ts"

/** What the server derives from its options and the trainer's info. */
interface Settings {
  readonly modelName: string
  /** the trainer's context length, as `get_server_capabilities` reports it */
  readonly contextLength: number
  /** the longest sequence accepted */
  readonly maxLength: number
  readonly pollWait: Duration.Input
  readonly ttlMillis: number
  readonly maxBody: number
  readonly idleMillis: number
}

const settingsOf = (options: Options, info: { readonly modelName: string; readonly maxSequenceLength: number }): Settings => ({
  modelName: options.modelName ?? info.modelName,
  contextLength: info.maxSequenceLength,
  maxLength: info.maxSequenceLength > 0 ? info.maxSequenceLength : Number.MAX_SAFE_INTEGER,
  pollWait: options.pollWait ?? "20 seconds",
  ttlMillis: Duration.toMillis(Duration.fromInputUnsafe(options.futureTtl ?? "15 minutes")),
  maxBody: options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES,
  idleMillis: Duration.toMillis(Duration.fromInputUnsafe(options.sessionIdleTimeout ?? DEFAULT_SESSION_IDLE_TIMEOUT)),
})

/** Fresh ids: a counter, and a random part so that ids differ across restarts. */
const idMaker = () => {
  let counter = 0
  return (prefix: string) => `${prefix}-${(++counter).toString(36)}-${globalThis.crypto.randomUUID().slice(0, 8)}`
}

/** The server's parts: what the routes, the sweep and the stats share. */
interface Parts {
  readonly options: Options
  readonly settings: Settings
  readonly replicas: ReadonlyArray<SamplerShape>
  readonly scope: Scope.Scope
  readonly now: Effect.Effect<number>
  readonly futures: Futures.FutureTable
  /** the sample futures each sampling session finished, for `retrieve_futures` */
  readonly sessionFutures: SessionFutures.SessionFutures
  readonly idempotency: Idempotency.IdempotencyCache
  /** the base model's sampler */
  readonly base: Models.SamplerTarget
  readonly registry: Models.Registry
  readonly gather: (key: string) => Effect.Effect<void>
  /** what each sampling session serves */
  readonly samplingSessions: Map<string, SamplingRoutes.Published>
  /** what each sampler path published by this run of the server serves */
  readonly samplerPaths: Map<string, SamplingRoutes.Published>
  readonly replicaRequests: Array<number>
  readonly checkpoints: CheckpointIndex.CheckpointIndex
  readonly restoredSamplers: RestoredSamplers.RestoredSamplers
  readonly archives: Archives.Archives
  /** the simulated clock-cycle trainer (`serve --clock-cycle`), when asked for */
  readonly clock: ClockCycle.Clock | undefined
}

const makeParts = (options: Options, settings: Settings, trainer: TrainerShape, replicas: ReadonlyArray<SamplerShape>) =>
  Effect.gen(function* () {
    const scope = yield* Effect.scope
    const newId = idMaker()
    const now = Effect.clockWith((c) => c.currentTimeMillis).pipe(Effect.map(Number))
    const futures = Futures.make({ scope, ttlMillis: settings.ttlMillis, maxPending: options.maxPendingFutures ?? DEFAULT_MAX_PENDING_FUTURES, newId: () => newId("req"), now })
    const idempotency = Idempotency.make({ ttlMillis: settings.ttlMillis, now })
    const base = yield* Models.makeTarget("base", replicas)
    const registry = Models.make({
      base: { trainer, sampler: base },
      factory: options.models,
      memoryBudget: options.memoryBudget ?? DEFAULT_MEMORY_BUDGET_BYTES,
      idleMillis: settings.idleMillis,
      now,
      newId,
    })
    // models still alive when the server stops are freed with it
    yield* Effect.addFinalizer(() => Effect.asVoid(registry.freeAll))
    const gatherMillis = Duration.toMillis(Duration.fromInputUnsafe(options.sampleGather ?? "10 millis"))
    const gather = Gather.make({ maxMillis: gatherMillis, quietMillis: Duration.toMillis(Duration.fromInputUnsafe(options.sampleGatherQuiet ?? "3 millis")), scope, now })
    const samplerPaths = new Map<string, SamplingRoutes.Published>()
    const checkpoints = yield* CheckpointIndex.open(options.stateDir, now)
    const restoredSamplers = RestoredSamplers.make({ registry, checkpoints, samplerPaths, canBuild: options.models !== undefined })
    const archives = Archives.make({
      stateDir: options.stateDir,
      checkpoints,
      pack: options.archivePack,
      now,
      ttlMillis: options.archiveTtl === undefined ? undefined : Duration.toMillis(Duration.fromInputUnsafe(options.archiveTtl)),
    })
    const samplingSessions = new Map<string, SamplingRoutes.Published>()
    const replicaRequests = replicas.map(() => 0)
    const cycleMillis = options.simulate?.cycleMillis ?? 0
    const clock = cycleMillis > 0 ? yield* ClockCycle.make({ cycleMillis, scope }) : undefined
    const sessionFutures = SessionFutures.make()
    return { options, settings, replicas, scope, now, futures, sessionFutures, idempotency, base, registry, gather, samplingSessions, samplerPaths, replicaRequests, checkpoints, restoredSamplers, archives, clock } satisfies Parts
  })

const trainingRoutes = (p: Parts) =>
  TrainingRoutes.make({
    registry: p.registry,
    futures: p.futures,
    modelName: p.settings.modelName,
    tokenizerId: p.options.tokenizerId,
    vocabSize: p.options.vocabSize,
    maxLength: p.settings.maxLength,
    maxDatums: p.options.maxDatums ?? 4096,
    turnTimeout: p.options.turnTimeout ?? "10 minutes",
    checkpoints: p.checkpoints,
    published: (model, samplingSessionId, uri, version) => {
      const published = { modelId: model.id, version, modelPath: uri }
      p.samplingSessions.set(samplingSessionId, published)
      p.samplerPaths.set(uri, published)
    },
    clock: p.clock,
    publishLatencyMillis: p.options.simulate?.publishMillis ?? 0,
  })

const samplingRoutes = (p: Parts) =>
  SamplingRoutes.make({
    registry: p.registry,
    futures: p.futures,
    sessionFutures: p.sessionFutures,
    base: p.base,
    modelName: p.settings.modelName,
    vocabSize: p.options.vocabSize,
    maxLength: p.settings.maxLength,
    maxSamples: p.options.maxSamples ?? 256,
    readyTimeout: p.options.readyTimeout ?? DEFAULT_READY_TIMEOUT,
    gather: p.gather,
    samplingSessions: p.samplingSessions,
    samplerPaths: p.samplerPaths,
    samplerPath: p.restoredSamplers.lookup,
    replicaRequests: p.replicaRequests,
    latency: { perRequestMillis: p.options.simulate?.sampleMillis ?? 0, perTokenMillis: p.options.simulate?.sampleTokenMillis ?? 0 },
    baseNotServed:
      p.options.models === undefined
        ? "this server trains one adapter on the base model's own sampler (it has no model factory: `serve --workers` runs that way), " +
          "so once trained that sampler no longer serves the base weights. Start the server without --workers to serve base-model " +
          "sampling sessions (a KL penalty's reference needs them)"
        : undefined,
  })

/** `retrieve_future`: the future's outcome, held up to `pollWait`, else `try_again`. */
const retrieveFuture =
  (p: Parts): TrainingRoutes.Handler =>
  (body) =>
    Effect.gen(function* () {
      const req = yield* decodeRequestOr400(Wire.RetrieveFutureRequest, "retrieve_future")(body)
      const reply = yield* p.futures.await(req.request_id, p.settings.pollWait)
      return Option.isSome(reply) ? reply.value.body : { type: "try_again", request_id: req.request_id, queue_state: "active" }
    })

/** `retrieve_futures`: a sampling session's finished sample futures after the poll's cursor, held up to `pollWait` (or the poll's own `timeout`). */
const retrieveFutures =
  (p: Parts): TrainingRoutes.Handler =>
  (body) =>
    Effect.gen(function* () {
      const req = yield* decodeRequestOr400(Wire.RetrieveFuturesRequest, "retrieve_futures")(body)
      const session = req.target.sampling_session_id
      if (!p.samplingSessions.has(session)) return yield* new Reject({ status: 404, message: `target.sampling_session_id ${JSON.stringify(session.slice(0, 100))} is unknown` })
      const hold = Math.min(Duration.toMillis(Duration.fromInputUnsafe(p.settings.pollWait)), req.timeout == null ? Number.POSITIVE_INFINITY : req.timeout * 1000)
      return yield* p.sessionFutures.poll(SessionFutures.streamOf(session, req.target.cloned_sampler_id ?? 0), req.prev_cursor ?? 0, hold)
    })

/** Every route the dispatch knows: the POST handlers, the fixed GETs, the REST reads and `GET samplers/{id}`. */
const routeTables = (p: Parts) => {
  const training = trainingRoutes(p)
  const sampling = samplingRoutes(p)
  const rest = RestRoutes.make({ checkpoints: p.checkpoints, modelName: p.settings.modelName, liveModels: p.registry.list, now: p.now })
  const post: Record<string, TrainingRoutes.Handler> = {
    ...ServiceRoutes.make({ maxDatums: p.options.maxDatums ?? 4096, compressForwardBackward: p.options.compressForwardBackward ?? false }),
    ...rest.post,
    ...training,
    ...sampling.post,
    retrieve_future: retrieveFuture(p),
    retrieve_futures: retrieveFutures(p),
  }
  const get: Record<string, () => Effect.Effect<unknown, Reject>> = {
    healthz: () => Effect.succeed({ status: "ok" }),
    // the simulated clock's counts (`serve --clock-cycle`)
    clock: () =>
      p.clock === undefined ? Effect.fail(new Reject({ status: 404, message: "this server runs no clock: start it with serve --clock-cycle <ms>" })) : Effect.succeed(p.clock.report()),
    get_server_capabilities: () => Effect.succeed({ supported_models: [{ model_name: p.settings.modelName, max_context_length: p.settings.contextLength, trainable: true, sampleable: true }] }),
  }
  return { post, get, rest: rest.get, samplerInfo: sampling.samplerInfo }
}

/** Forgets expired futures, idempotency keys and download URLs, and expires idle sessions with what they published. */
const sweep = (p: Parts) =>
  Effect.gen(function* () {
    yield* p.futures.sweep
    yield* p.idempotency.sweep(p.futures.has)
    yield* p.archives.sweep
    const expired = yield* p.registry.expire
    // what the expired sessions published goes with them
    for (const id of expired) {
      for (const k of p.samplingSessions.keys()) if (k.startsWith(`${id}:`)) p.samplingSessions.delete(k)
      for (const k of p.samplerPaths.keys()) if (k.startsWith(`tinker://${id}:`)) p.samplerPaths.delete(k)
    }
  })

/** Serves `app` on the options' host and port; answers the URL clients reach it at. */
const listen = (p: Parts, app: ReturnType<typeof Dispatch.make>["app"]) =>
  Effect.gen(function* () {
    const host = p.options.host ?? "127.0.0.1"
    const server = yield* PlatformHttpServer.make({ port: p.options.port ?? 0, host, bodyLimit: bodyLimitOf(p.settings.maxBody) })
    yield* server.serve(app)
    const address = server.address
    const port = address._tag === "UnixPathAddress" ? 0 : address.port
    const shown = host === "0.0.0.0" || host === "::" ? "127.0.0.1" : host
    const url = `http://${shown.includes(":") ? `[${shown}]` : shown}:${port}`
    const replicas = p.replicas.length
    yield* Effect.logInfo(`serving ${p.settings.modelName} on ${url} (${replicas} sampler replica${replicas === 1 ? "" : "s"}${p.options.models ? ", one adapter per model" : ""})`)
    return { url, port }
  })

/** The counters, read when asked. */
const statsOf = (p: Parts, requests: () => number): Stats => ({
  get requests() {
    return requests()
  },
  get submissions() {
    return p.futures.started()
  },
  get deduplicated() {
    return p.idempotency.deduplicated()
  },
  get pending() {
    return p.futures.pending()
  },
  get futures() {
    return p.futures.size()
  },
  get sessions() {
    return p.registry.sessions()
  },
  get models() {
    return p.registry.models()
  },
  get memoryUsed() {
    return p.registry.used()
  },
  executed: p.futures.executed,
  replicaRequests: p.replicaRequests,
})

/**
 * Starts the server on the trainer and sampler in context; it stops when the scope
 * closes.
 * @since 0.1.0 @category constructors
 */
export const make = Effect.fn("HttpServer.make")(function* (options: Options = {}) {
  const trainer = yield* Trainer
  const defaultSampler = yield* Sampler
  const replicas = options.replicas !== undefined && options.replicas.length > 0 ? options.replicas : [defaultSampler]
  const settings = settingsOf(options, yield* trainer.info)
  const parts = yield* makeParts(options, settings, trainer, replicas)
  const routes = routeTables(parts)
  const sweepEvery = Duration.millis(Math.max(1000, Math.min(Futures.ANSWERED_MILLIS, settings.ttlMillis / 4, settings.idleMillis / 4)))
  yield* Effect.forkIn(sweep(parts).pipe(Effect.delay(sweepEvery), Effect.forever), parts.scope)
  const dispatch = Dispatch.make({
    maxBody: settings.maxBody,
    pollWait: settings.pollWait,
    apiKey: options.apiKey,
    ...routes,
    archives: parts.archives,
    idempotency: parts.idempotency,
    futures: parts.futures,
    now: parts.now,
  })
  const { url, port } = yield* listen(parts, dispatch.app)
  return { url, port, stats: statsOf(parts, dispatch.requests), route: parts.base.route, expireSessions: parts.registry.expire } satisfies Handle
})

/** The running server, for tests and the CLI. @since 0.1.0 @category services */
export class Running extends Context.Service<Running, Handle>()("gyre/http/Server") {}

/**
 * The server as a layer on the `Trainer | Sampler` it is given: starts when built,
 * stops when released.
 * @since 0.1.0 @category layers
 */
export const layer = (options: Options = {}) => Layer.effect(Running, make(options))

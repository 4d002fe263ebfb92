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
import { Context, Duration, Effect, Layer, Option, type Redacted } from "effect"
import { DEFAULT_READY_TIMEOUT, Sampler, type SamplerShape } from "../../Sampler.ts"
import { Trainer } from "../../Trainer.ts"
import * as PlatformHttpServer from "../../platform/HttpServer.ts"
import * as Archives from "./Archives.ts"
import * as CheckpointIndex from "./CheckpointIndex.ts"
import * as Dispatch from "./Dispatch.ts"
import * as Futures from "./Futures.ts"
import type * as Tar from "./Tar.ts"
import * as Gather from "./Gather.ts"
import * as Idempotency from "./Idempotency.ts"
import * as Models from "./Models.ts"
import * as RestoredSamplers from "./RestoredSamplers.ts"
import * as RestRoutes from "./RestRoutes.ts"
import * as ServiceRoutes from "./ServiceRoutes.ts"
import { decodeOr400, type Reject } from "./Requests.ts"
import * as SamplingRoutes from "./SamplingRoutes.ts"
import * as TrainingRoutes from "./TrainingRoutes.ts"
import * as Wire from "./Wire.ts"

export { makeRouter } from "./Router.ts"
export type { ModelFactory, ServedModel } from "./Models.ts"

/** @since 0.1.0 @category constants */
export const DEFAULT_MAX_PENDING_FUTURES = 1024
/** @since 0.1.0 @category constants */
export const DEFAULT_SESSION_IDLE_TIMEOUT: Duration.Duration = Duration.minutes(5)
/** @since 0.1.0 @category constants */
export const DEFAULT_MEMORY_BUDGET_BYTES = 512 * 2 ** 20

/** @since 0.1.0 @category models */
export interface Options {
  /** 0 (the default) picks a free port */
  readonly port?: number | undefined
  /** default 127.0.0.1 */
  readonly host?: string | undefined
  /** sampler replicas of the base model; default one, the `Sampler` service */
  readonly replicas?: ReadonlyArray<SamplerShape> | undefined
  /** builds a fresh adapter per `create_model`; without it every model attaches to the `Trainer` in context */
  readonly models?: Models.ModelFactory | undefined
  /** bytes the models built by `models` may hold together (default 512 MiB); beyond it `create_model` gets 403 */
  readonly memoryBudget?: number | undefined
  /** a session not heard from this long expires and frees its models (default 5 min; the client heartbeats every 10 s) */
  readonly sessionIdleTimeout?: Duration.Input | undefined
  /** how long a sample pinned to an unpublished policy version waits (default 1 hour) */
  readonly readyTimeout?: Duration.Input | undefined
  /** the most futures running at once (default 1024); beyond it a submission gets 429 */
  readonly maxPendingFutures?: number | undefined
  /** the base model name clients must ask for; default the trainer's `modelName` */
  readonly modelName?: string | undefined
  /** reported by `get_info` */
  readonly tokenizerId?: string | undefined
  /** token ids must be below it (unchecked when absent) */
  readonly vocabSize?: number | undefined
  /** when set, every request but `healthz` must carry it as `X-API-Key` */
  readonly apiKey?: Redacted.Redacted<string> | undefined
  /** how long `retrieve_future` holds a poll (default 20 s) */
  readonly pollWait?: Duration.Input | undefined
  /** how long finished futures and idempotency keys are kept (default 15 min) */
  readonly futureTtl?: Duration.Input | undefined
  /** largest request body (default 64 MiB) */
  readonly maxBodyBytes?: number | undefined
  /** most datums in one forward(_backward) (default 4096) */
  readonly maxDatums?: number | undefined
  /** most samples in one `asample` (default 256) */
  readonly maxSamples?: number | undefined
  /** how long a training call waits for the calls with smaller seq ids (default 10 min) */
  readonly turnTimeout?: Duration.Input | undefined
  /** sampling gather window: closes `sampleGatherQuiet` after the last arrival, at most `sampleGather` after the first (3 ms / 10 ms; 0 turns it off) */
  readonly sampleGather?: Duration.Input | undefined
  readonly sampleGatherQuiet?: Duration.Input | undefined
  /**
   * the folder the backend saves checkpoints under; it holds the index of the checkpoints
   * saved through this server (`CheckpointIndex.ts`), kept across restarts, and the archive
   * route hands out the files of those that lie inside it (without it: an index in memory, no downloads)
   */
  readonly stateDir?: string | undefined
  /** the files of a checkpoint's download archive, from its state file (default: the state file alone); `serve` packs the PEFT adapter */
  readonly archivePack?: ((stateBytes: Uint8Array, entry: CheckpointIndex.Entry) => ReadonlyArray<Tar.TarFile> | string) | undefined
  /** ask clients (in their client config) to zstd-compress protobuf `forward_backward` bodies (default false) */
  readonly compressForwardBackward?: boolean | undefined
  /** how long a checkpoint download URL works (default 15 min) */
  readonly archiveTtl?: Duration.Input | undefined
}

/** Counters for tests and logs. @since 0.1.0 @category models */
export interface Stats {
  /** HTTP requests answered */
  readonly requests: number
  /** submissions that started work */
  readonly submissions: number
  /** submissions answered from the idempotency cache */
  readonly deduplicated: number
  /** futures whose work has not finished */
  readonly pending: number
  /** futures kept (running, or finished within the ttl) */
  readonly futures: number
  readonly sessions: number
  readonly models: number
  /** bytes the factory-built models hold */
  readonly memoryUsed: number
  /** operations run on the backend, by request type */
  readonly executed: Record<string, number>
  /** samples served by each replica of the base sampler */
  readonly replicaRequests: Array<number>
}

/** A running server. @since 0.1.0 @category models */
export interface Handle {
  readonly url: string
  readonly port: number
  readonly stats: Stats
  /** the base sampler's replica an affinity key is routed to */
  readonly route: (affinityKey: string) => number
  /** expires idle sessions now (it also runs on a timer) */
  readonly expireSessions: Effect.Effect<ReadonlyArray<string>>
}


/**
 * Starts the server on the trainer and sampler in context; it stops when the scope
 * closes.
 * @since 0.1.0 @category constructors
 */
export const make = Effect.fn("HttpServer.make")(function* (options: Options = {}) {
  const trainer = yield* Trainer
  const defaultSampler = yield* Sampler
  const replicas = options.replicas !== undefined && options.replicas.length > 0 ? options.replicas : [defaultSampler]
  const info0 = yield* trainer.info
  const modelName = options.modelName ?? info0.modelName
  const maxLength = info0.maxSequenceLength > 0 ? info0.maxSequenceLength : Number.MAX_SAFE_INTEGER
  const pollWait = options.pollWait ?? "20 seconds"
  const ttl = Duration.toMillis(Duration.fromInputUnsafe(options.futureTtl ?? "15 minutes"))
  const maxBody = options.maxBodyBytes ?? 64 * 1024 * 1024
  const idleMillis = Duration.toMillis(Duration.fromInputUnsafe(options.sessionIdleTimeout ?? DEFAULT_SESSION_IDLE_TIMEOUT))
  const scope = yield* Effect.scope
  let counter = 0
  const newId = (prefix: string) => `${prefix}-${(++counter).toString(36)}-${globalThis.crypto.randomUUID().slice(0, 8)}`
  const now = Effect.clockWith((c) => c.currentTimeMillis).pipe(Effect.map(Number))

  const futures = Futures.make({ scope, ttlMillis: ttl, maxPending: options.maxPendingFutures ?? DEFAULT_MAX_PENDING_FUTURES, newId: () => newId("req"), now })
  const idempotency = Idempotency.make({ ttlMillis: ttl, now })
  const base = yield* Models.makeTarget("base", replicas)
  const registry = Models.make({
    base: { trainer, sampler: base },
    factory: options.models,
    memoryBudget: options.memoryBudget ?? DEFAULT_MEMORY_BUDGET_BYTES,
    idleMillis,
    now,
    newId,
  })
  // models still alive when the server stops are freed with it
  yield* Effect.addFinalizer(() => Effect.asVoid(registry.freeAll))
  const gatherMillis = Duration.toMillis(Duration.fromInputUnsafe(options.sampleGather ?? "10 millis"))
  const gather = Gather.make({ maxMillis: gatherMillis, quietMillis: Duration.toMillis(Duration.fromInputUnsafe(options.sampleGatherQuiet ?? "3 millis")), scope, now })
  const samplingSessions = new Map<string, SamplingRoutes.Published>()
  const samplerPaths = new Map<string, SamplingRoutes.Published>()
  const replicaRequests = replicas.map(() => 0)
  const checkpoints = yield* CheckpointIndex.open(options.stateDir, now)
  const restoredSamplers = RestoredSamplers.make({ registry, checkpoints, samplerPaths, canBuild: options.models !== undefined })
  const archives = Archives.make({
    stateDir: options.stateDir,
    checkpoints,
    pack: options.archivePack,
    now,
    ttlMillis: options.archiveTtl === undefined ? undefined : Duration.toMillis(Duration.fromInputUnsafe(options.archiveTtl)),
  })

  const training = TrainingRoutes.make({
    registry,
    futures,
    modelName,
    tokenizerId: options.tokenizerId,
    vocabSize: options.vocabSize,
    maxLength,
    maxDatums: options.maxDatums ?? 4096,
    turnTimeout: options.turnTimeout ?? "10 minutes",
    checkpoints,
    published: (model, samplingSessionId, uri, version) => {
      const p = { modelId: model.id, version, modelPath: uri }
      samplingSessions.set(samplingSessionId, p)
      samplerPaths.set(uri, p)
    },
  })
  const sampling = SamplingRoutes.make({
    registry,
    futures,
    base,
    modelName,
    vocabSize: options.vocabSize,
    maxLength,
    maxSamples: options.maxSamples ?? 256,
    readyTimeout: options.readyTimeout ?? DEFAULT_READY_TIMEOUT,
    gather,
    samplingSessions,
    samplerPaths,
    samplerPath: restoredSamplers.lookup,
    replicaRequests,
    baseNotServed:
      options.models === undefined
        ? "this server trains one adapter on the base model's own sampler (it has no model factory: `serve --workers` runs that way), " +
          "so once trained that sampler no longer serves the base weights. Start the server without --workers to serve base-model " +
          "sampling sessions (a KL penalty's reference needs them)"
        : undefined,
  })

  const retrieveFuture: TrainingRoutes.Handler = (body) =>
    Effect.gen(function* () {
      const req = yield* decodeOr400(Wire.RetrieveFutureRequest)(body)
      const reply = yield* futures.await(req.request_id, pollWait)
      return Option.isSome(reply) ? reply.value.body : { type: "try_again", request_id: req.request_id, queue_state: "active" }
    })

  const rest = RestRoutes.make({ checkpoints, modelName, liveModels: registry.list, now })
  const post: Record<string, TrainingRoutes.Handler> = {
    ...ServiceRoutes.make({ maxDatums: options.maxDatums ?? 4096, compressForwardBackward: options.compressForwardBackward ?? false }),
    ...rest.post,
    ...training,
    ...sampling.post,
    retrieve_future: retrieveFuture,
  }
  const get: Record<string, () => Effect.Effect<unknown, Reject>> = {
    healthz: () => Effect.succeed({ status: "ok" }),
    get_server_capabilities: () => Effect.succeed({ supported_models: [{ model_name: modelName, max_context_length: info0.maxSequenceLength }] }),
  }

  const sweep = Effect.gen(function* () {
    yield* futures.sweep
    yield* idempotency.sweep(futures.has)
    yield* archives.sweep
    const expired = yield* registry.expire
    // what the expired sessions published goes with them
    for (const id of expired) {
      for (const k of samplingSessions.keys()) if (k.startsWith(`${id}:`)) samplingSessions.delete(k)
      for (const k of samplerPaths.keys()) if (k.startsWith(`tinker://${id}:`)) samplerPaths.delete(k)
    }
  })
  const sweepEvery = Duration.millis(Math.max(1000, Math.min(60_000, ttl / 4, idleMillis / 4)))
  yield* Effect.forkIn(sweep.pipe(Effect.delay(sweepEvery), Effect.forever), scope)

  const dispatch = Dispatch.make({
    maxBody,
    pollWait,
    apiKey: options.apiKey,
    post,
    get,
    archives,
    rest: rest.get,
    samplerInfo: sampling.samplerInfo,
    idempotency,
    futures,
    now,
  })

  const server = yield* PlatformHttpServer.make({ port: options.port ?? 0, host: options.host ?? "127.0.0.1" })
  yield* server.serve(dispatch.app)
  const address = server.address
  const port = address._tag === "UnixPathAddress" ? 0 : address.port
  const host = options.host ?? "127.0.0.1"
  const shown = host === "0.0.0.0" || host === "::" ? "127.0.0.1" : host
  const url = `http://${shown.includes(":") ? `[${shown}]` : shown}:${port}`
  yield* Effect.logInfo(`serving ${modelName} on ${url} (${replicas.length} sampler replica${replicas.length === 1 ? "" : "s"}${options.models ? ", one adapter per model" : ""})`)
  const stats: Stats = {
    get requests() {
      return dispatch.requests()
    },
    get submissions() {
      return futures.started()
    },
    get deduplicated() {
      return idempotency.deduplicated()
    },
    get pending() {
      return futures.pending()
    },
    get futures() {
      return futures.size()
    },
    get sessions() {
      return registry.sessions()
    },
    get models() {
      return registry.models()
    },
    get memoryUsed() {
      return registry.used()
    },
    executed: futures.executed,
    replicaRequests,
  }
  return { url, port, stats, route: base.route, expireSessions: registry.expire } satisfies Handle
})

/** The running server, for tests and the CLI. @since 0.1.0 @category services */
export class Running extends Context.Service<Running, Handle>()("gyre/http/Server") {}

/**
 * The server as a layer on the `Trainer | Sampler` it is given: starts when built,
 * stops when released.
 * @since 0.1.0 @category layers
 */
export const layer = (options: Options = {}) => Layer.effect(Running, make(options))

/**
 * Sessions and the models they train, on the server.
 *
 * - With a `ModelFactory` (the embedded backend's `serve` has one), every
 *   `create_model` builds a fresh LoRA adapter of the rank the client asks for, with
 *   its own optimizer state and sampler, over the shared frozen base weights. Models
 *   count against a memory budget; a model that would exceed it is refused with 403
 *   before anything is built. `unload_model` frees one.
 * - Without one, every model attaches to the one `Trainer` the server was given (and
 *   must ask for its LoRA rank): one training run per server.
 * - A session not heard from for `idleTimeout` (no heartbeat, no request naming it or
 *   its models, no poll of their futures) expires once its models have no work in
 *   flight: its models are freed and their ids answer 404.
 *
 * @since 0.1.0
 */
import { Effect, Exit, Scope, SubscriptionRef } from "effect"
import type { BackendError } from "../../../contract/Contract.ts"
import type { SamplerShape } from "../../../services/Sampler.ts"
import type { TrainerShape } from "../../../services/Trainer.ts"
import { bad, notFound, Reject } from "./Requests.ts"
import { makeRouter } from "./Router.ts"
import { makeTurns, type Turns } from "./SeqOrder.ts"

/**
 * The parts a LoRA adapter trains, as Tinker's `lora_config` names them (`train_attn`,
 * `train_mlp`); an adapter trains the attention and MLP projections by default.
 * @since 0.1.0 @category models
 */
export interface Trains {
  readonly attn: boolean
  readonly mlp: boolean
}

/** Both parts. @since 0.1.0 @category constants */
export const ALL_PARTS: Trains = { attn: true, mlp: true }

/** A trainer and its sampler replicas, as a factory builds them. @since 0.1.0 @category models */
export interface ServedModel {
  readonly trainer: TrainerShape
  readonly replicas: ReadonlyArray<SamplerShape>
  readonly loraRank: number
}

/** Builds one model per `create_model`. @since 0.1.0 @category models */
export interface ModelFactory {
  /** bytes one model of this rank holds (adapter, gradients, optimizer moments, sampler copies and caches) */
  readonly bytes: (rank: number) => number
  /** the largest rank served */
  readonly maxRank: number
  /** the rank used when `create_model` names none */
  readonly defaultRank: number
  /** a fresh adapter of `rank` on the shared base weights; released with the scope */
  readonly create: (spec: { readonly rank: number; readonly seed: number; readonly name: string; readonly trains: Trains }) => Effect.Effect<ServedModel, BackendError, Scope.Scope>
}

/** Where sampling requests go: replicas, routing, and the version they serve. @since 0.1.0 @category models */
export interface SamplerTarget {
  readonly key: string
  readonly replicas: ReadonlyArray<SamplerShape>
  readonly route: (affinityKey: string) => number
  /** the latest version published through this server */
  readonly published: SubscriptionRef.SubscriptionRef<number>
}

/** @since 0.1.0 @category models */
export interface Model extends Turns {
  readonly id: string
  /** the parts of the network its adapter trains */
  readonly trains: Trains
  readonly sessionId: string
  readonly trainer: TrainerShape
  readonly loraRank: number
  readonly sampler: SamplerTarget
  readonly bytes: number
  readonly scope: Scope.Closeable | undefined
  /** futures of this model not yet finished */
  running: number
}

/** @since 0.1.0 @category models */
export interface Session {
  readonly id: string
  lastSeen: number
  samplers: number
  readonly models: Set<string>
}

/** @since 0.1.0 @category constructors */
export const makeTarget = (key: string, replicas: ReadonlyArray<SamplerShape>) =>
  Effect.gen(function* () {
    const versions = yield* Effect.forEach(replicas, (r) => r.version)
    return { key, replicas, route: makeRouter(replicas.length), published: yield* SubscriptionRef.make(Math.min(...versions)) } satisfies SamplerTarget
  })

const MiB = (b: number) => `${(b / 2 ** 20).toFixed(1)} MiB`

/** @since 0.1.0 @category models */
export interface Options {
  readonly base: { readonly trainer: TrainerShape; readonly sampler: SamplerTarget }
  readonly factory: ModelFactory | undefined
  readonly memoryBudget: number
  readonly idleMillis: number
  readonly now: Effect.Effect<number>
  readonly newId: (prefix: string) => string
}

/** The registry's state, which its operations share. */
interface State {
  readonly options: Options
  readonly sessions: Map<string, Session>
  readonly models: Map<string, Model>
  /** ids of sessions and models that expired or were unloaded, for clearer 404s (bounded) */
  readonly gone: Map<string, string>
  /** model ids whose adapter is being built */
  readonly creating: Set<string>
  /** bytes the factory-built models hold */
  used: number
}

const remember = (st: State, id: string, why: string) => {
  st.gone.set(id, why)
  if (st.gone.size > 10_000) {
    const oldest = st.gone.keys().next()
    if (oldest.done !== true) st.gone.delete(oldest.value)
  }
}

const createSession = (st: State) =>
  Effect.gen(function* () {
    const id = st.options.newId("session")
    st.sessions.set(id, { id, lastSeen: yield* st.options.now, samplers: 0, models: new Set() })
    return id
  })

const getSession = (st: State, id: string, field: string) =>
  Effect.gen(function* () {
    const s = st.sessions.get(id)
    if (s === undefined) return yield* notFound(`${field} ${JSON.stringify(id.slice(0, 100))} is ${st.gone.get(id) ?? "unknown"}; create a session first`)
    s.lastSeen = yield* st.options.now
    return s
  })

const getModel = (st: State, id: string, field: string) =>
  Effect.gen(function* () {
    const m = st.models.get(id)
    if (m === undefined) return yield* notFound(`${field} ${JSON.stringify(id.slice(0, 100))} is ${st.gone.get(id) ?? "unknown"}; call create_model first`)
    const s = st.sessions.get(m.sessionId)
    if (s !== undefined) s.lastSeen = yield* st.options.now
    return m
  })

/** keeps the model's session alive (a poll of one of its futures) */
const touch = (st: State, m: Model) =>
  Effect.flatMap(st.options.now, (t) =>
    Effect.sync(() => {
      const s = st.sessions.get(m.sessionId)
      if (s !== undefined) s.lastSeen = t
    }),
  )

/** Without a factory: the model attaches to the one trainer the server was given, whose rank and parts it must ask for. */
const attachToBase = (st: State, session: Session, id: string, rank: number | undefined, trains: Trains) =>
  Effect.gen(function* () {
    const info = yield* st.options.base.trainer.info.pipe(Effect.mapError((e) => new Reject({ status: 503, message: e.message })))
    if (rank !== undefined && rank !== info.loraRank) {
      return yield* bad(`lora_config.rank ${rank} does not match the served adapter's rank ${info.loraRank}: this server trains one adapter`)
    }
    if (!trains.attn || !trains.mlp) {
      return yield* bad(`lora_config.${trains.attn ? "train_mlp" : "train_attn"} false is not possible here: this server trains one adapter, on the attention and MLP projections; leave it true`)
    }
    const model: Model = { id, sessionId: session.id, trains, trainer: st.options.base.trainer, loraRank: info.loraRank, sampler: st.options.base.sampler, bytes: 0, scope: undefined, running: 0, ...makeTurns() }
    st.models.set(id, model)
    session.models.add(id)
    return model
  })

/** With a factory: a fresh adapter of `rank`, counted against the memory budget (403 beyond it). */
const build = (st: State, factory: ModelFactory, session: Session, id: string, rank: number | undefined, seed: number | undefined, trains: Trains) =>
  Effect.gen(function* () {
    const r = rank ?? factory.defaultRank
    if (r > factory.maxRank) return yield* bad(`lora_config.rank ${r} exceeds the largest rank served, ${factory.maxRank}`)
    const bytes = factory.bytes(r)
    if (st.used + bytes > st.options.memoryBudget) {
      return yield* new Reject({
        status: 403,
        message:
          `a model of LoRA rank ${r} needs ${MiB(bytes)}, but ${st.models.size} model(s) already use ${MiB(st.used)} of the server's memory budget of ${MiB(st.options.memoryBudget)}: ` +
          "unload a model (unload_model), let idle sessions expire, or start the server with a larger memory budget",
      })
    }
    st.used += bytes
    st.creating.add(id)
    const scope = yield* Scope.make()
    // a failed build gives back what it took
    const release = Effect.andThen(Scope.close(scope, Exit.void), Effect.sync(() => ((st.used -= bytes), st.creating.delete(id))))
    const served = yield* factory.create({ rank: r, seed: seed ?? 0, name: id, trains }).pipe(
      Scope.provide(scope),
      Effect.tapError(() => release),
      Effect.mapError((e) => new Reject({ status: 503, message: `create_model: ${e.message}` })),
    )
    const sampler = yield* makeTarget(id, served.replicas).pipe(
      Effect.tapError(() => release),
      Effect.mapError((e) => new Reject({ status: 503, message: `create_model: ${e.message}` })),
    )
    const model: Model = { trains, id, sessionId: session.id, trainer: served.trainer, loraRank: served.loraRank, sampler, bytes, scope, running: 0, ...makeTurns() }
    st.models.set(id, model)
    st.creating.delete(id)
    session.models.add(id)
    yield* Effect.logInfo(`model ${id}: LoRA rank ${r}, ${MiB(bytes)} (${MiB(st.used)} of ${MiB(st.options.memoryBudget)} in use)`)
    return model
  })

const createModel = (st: State, sessionId: string, modelSeqId: number, rank: number | undefined, seed: number | undefined, trains: Trains) =>
  Effect.gen(function* () {
    const session = yield* getSession(st, sessionId, "session_id")
    const id = `${sessionId}:train:${modelSeqId}`
    const existing = st.models.get(id)
    if (existing !== undefined) {
      if (rank !== undefined && rank !== existing.loraRank) return yield* bad(`model_seq_id ${modelSeqId} of this session already has LoRA rank ${existing.loraRank}; use another model_seq_id for rank ${rank}`)
      return existing
    }
    if (st.creating.has(id)) return yield* new Reject({ status: 409, message: `model_seq_id ${modelSeqId} of this session is being created by another request; retry` })
    const factory = st.options.factory
    return yield* factory === undefined ? attachToBase(st, session, id, rank, trains) : build(st, factory, session, id, rank, seed, trains)
  })

const free = (st: State, m: Model, why: string) =>
  Effect.gen(function* () {
    st.models.delete(m.id)
    st.sessions.get(m.sessionId)?.models.delete(m.id)
    remember(st, m.id, why)
    if (m.scope !== undefined) {
      st.used -= m.bytes
      yield* Scope.close(m.scope, Exit.void)
    }
  })

const unloadModel = (st: State, id: string) =>
  Effect.gen(function* () {
    const m = yield* getModel(st, id, "model_id")
    if (m.running > 0 || m.pending.size > 0) return yield* new Reject({ status: 409, message: `model_id ${JSON.stringify(id)} has ${m.running} request(s) in progress; unload it when they are done` })
    yield* free(st, m, "unloaded")
  })

/** Expires idle sessions (whose models have no work in flight) and frees their models; returns the expired ids. */
const expire = (st: State) =>
  Effect.gen(function* () {
    const t = yield* st.options.now
    const idle = `${Math.round(st.options.idleMillis / 1000)} s`
    const expired: Array<string> = []
    for (const s of [...st.sessions.values()]) {
      if (t - s.lastSeen <= st.options.idleMillis) continue
      const ms = [...s.models].map((id) => st.models.get(id)).filter((m): m is Model => m !== undefined)
      if (ms.some((m) => m.running > 0 || m.pending.size > 0)) continue
      for (const m of ms) yield* free(st, m, `expired (its session was idle for more than ${idle})`)
      st.sessions.delete(s.id)
      remember(st, s.id, `expired (idle for more than ${idle})`)
      expired.push(s.id)
    }
    if (expired.length > 0) yield* Effect.logInfo(`expired ${expired.length} idle session(s): ${expired.join(", ")}`)
    return expired
  })

/** Runs `work` counted as in flight for the model (its session cannot expire meanwhile). */
const tracked = <A, E, R>(m: Model, work: Effect.Effect<A, E, R>) =>
  Effect.suspend(() => {
    m.running++
    return work.pipe(Effect.ensuring(Effect.sync(() => m.running--)))
  })

/** @since 0.1.0 @category constructors */
export const make = (options: Options) => {
  const st: State = { options, sessions: new Map(), models: new Map(), gone: new Map(), creating: new Set(), used: 0 }
  return {
    /** frees every model (the server is stopping) */
    freeAll: Effect.suspend(() => Effect.forEach([...st.models.values()], (m) => free(st, m, "gone (the server stopped)"), { discard: true })),
    createSession: createSession(st),
    getSession: (id: string, field = "session_id") => getSession(st, id, field),
    getModel: (id: string, field = "model_id") => getModel(st, id, field),
    createModel: (sessionId: string, modelSeqId: number, rank: number | undefined, seed: number | undefined, trains: Trains = ALL_PARTS) =>
      createModel(st, sessionId, modelSeqId, rank, seed, trains),
    unloadModel: (id: string) => unloadModel(st, id),
    expire: expire(st),
    tracked,
    touch: (m: Model) => touch(st, m),
    used: () => st.used,
    sessions: () => st.sessions.size,
    models: () => st.models.size,
    /** the models alive now */
    list: (): ReadonlyArray<Model> => [...st.models.values()],
  }
}

/** @since 0.1.0 @category models */
export type Registry = ReturnType<typeof make>

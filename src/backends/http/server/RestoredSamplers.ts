/**
 * Sampler checkpoints (`tinker://<model_id>/sampler_weights/<name>`) of a server's
 * earlier runs, served again after a restart.
 *
 * Sampler weights are not written to disk (a run publishes them every step). What the
 * checkpoint index keeps of one is its model and weights: `policy_version` and `loads`
 * (`CheckpointIndex.Entry`). A training checkpoint of the same model with the same two
 * holds the same weights, because only `optim_step` and `load_weights` change them. So a
 * sampler path unknown to this run of the server, whose weights a training checkpoint
 * holds (gyre's runner saves both at each checkpoint step), gets a fresh model of its
 * LoRA rank, built by the model factory within the memory budget, loaded from that state
 * file and published under the path. That model belongs to a session of its own, which
 * expires when idle like any other; the next request for the path builds it again.
 *
 * A sampler path no training checkpoint backs, or a server without a model factory
 * (`serve --workers` trains one adapter, which a restore would overwrite), gets 404
 * saying so.
 *
 * @since 0.1.0
 */
import { Deferred, Effect, Exit, SubscriptionRef } from "effect"
import { type CheckpointIndex, type Entry, stateFileOf } from "./CheckpointIndex.ts"
import type { Registry } from "./Models.ts"
import { notFound, Reject } from "./Requests.ts"
import type { Published } from "./SamplingRoutes.ts"

/** @since 0.1.0 @category models */
export interface RestoredSamplers {
  /** the sampler a path names: published by this run of the server, else restored, else undefined (unknown) */
  readonly lookup: (modelPath: string) => Effect.Effect<Published | undefined, Reject>
}

/** @since 0.1.0 @category models */
export interface Options {
  readonly registry: Registry
  readonly checkpoints: CheckpointIndex
  /** the sampler paths published by this run of the server (restored ones join them) */
  readonly samplerPaths: Map<string, Published>
  /** whether models can be built for a restore (the server has a model factory) */
  readonly canBuild: boolean
}

/** What the restores share: the options, and the models built for them. */
interface State extends Options {
  /** path -> the id of the model restored for it */
  readonly restored: Map<string, string>
  /** path -> its restore in progress */
  readonly building: Map<string, Deferred.Deferred<Published, Reject>>
  /** the session the restored models belong to, while it lives */
  sessionId: string | undefined
  modelSeq: number
}

const session = (st: State) =>
  Effect.gen(function* () {
    if (st.sessionId !== undefined && Exit.isSuccess(yield* Effect.exit(st.registry.getSession(st.sessionId)))) return st.sessionId
    const id = yield* st.registry.createSession
    st.sessionId = id
    return id
  })

const build = (st: State, uri: string, entry: Entry, file: string) =>
  Effect.gen(function* () {
    const owner = yield* session(st)
    const model = yield* Effect.uninterruptible(st.registry.createModel(owner, st.modelSeq++, entry.lora_rank, undefined))
    const unavailable = (e: { readonly message: string }) => new Reject({ status: 503, message: `${uri}: restoring its weights from ${file}: ${e.message}` })
    yield* model.trainer.loadState(file, { withOptimizer: false }).pipe(Effect.mapError(unavailable))
    const r = yield* model.trainer.saveWeightsForSampler(entry.name).pipe(Effect.mapError(unavailable))
    yield* SubscriptionRef.update(model.sampler.published, (v) => Math.max(v, r.version))
    const published: Published = { modelId: model.id, version: r.version, modelPath: uri }
    st.samplerPaths.set(uri, published)
    st.restored.set(uri, model.id)
    yield* Effect.logInfo(`${uri}: sampler weights of an earlier run of this server, served again from ${file} by model ${model.id}`)
    return published
  })

/** Builds the sampler of `uri` once, however many requests ask for it meanwhile. */
const restore = (st: State, uri: string, entry: Entry) =>
  Effect.gen(function* () {
    const pending = st.building.get(uri)
    if (pending !== undefined) return yield* Deferred.await(pending)
    if (!st.canBuild) {
      return yield* notFound(
        `model_path ${uri} was saved by an earlier run of this server, which builds no models for it (it trains one adapter: \`serve --workers\`); load a training checkpoint and save_weights_for_sampler again`,
      )
    }
    // the state file of the training checkpoint that holds the sampler checkpoint's weights
    const file = stateFileOf(st.checkpoints, entry)
    if (file === undefined) {
      return yield* notFound(
        `model_path ${uri} was saved by an earlier run of this server; sampler weights are not kept as files, and no training checkpoint of the same weights was saved (save_state at the same step): load a training checkpoint and save_weights_for_sampler again`,
      )
    }
    const done = yield* Deferred.make<Published, Reject>()
    st.building.set(uri, done)
    return yield* build(st, uri, entry, file).pipe(Effect.onExit((exit) => Effect.andThen(Deferred.done(done, exit), Effect.sync(() => st.building.delete(uri)))))
  })

const lookup = (st: State, uri: string) =>
  Effect.gen(function* () {
    const known = st.samplerPaths.get(uri)
    if (known !== undefined) {
      const restoredBy = st.restored.get(uri)
      if (restoredBy === undefined) return known
      // a restored model expires with its session like any other: build it again
      if (Exit.isSuccess(yield* Effect.exit(st.registry.getModel(restoredBy)))) return known
    }
    const entry = st.checkpoints.get(uri)
    if (entry === undefined || entry.kind !== "sampler_weights") return undefined
    return yield* restore(st, uri, entry)
  })

/** @since 0.1.0 @category constructors */
export const make = (options: Options): RestoredSamplers => {
  const st: State = { ...options, restored: new Map(), building: new Map(), sessionId: undefined, modelSeq: 0 }
  return { lookup: (uri) => lookup(st, uri) }
}

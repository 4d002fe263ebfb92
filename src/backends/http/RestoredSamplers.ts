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
import type { CheckpointIndex, Entry } from "./CheckpointIndex.ts"
import type { Registry } from "./Models.ts"
import { notFound, Reject } from "./Requests.ts"
import type { Published } from "./SamplingRoutes.ts"

/** @since 0.1.0 @category models */
export interface RestoredSamplers {
  /** the sampler a path names: published by this run of the server, else restored, else undefined (unknown) */
  readonly lookup: (modelPath: string) => Effect.Effect<Published | undefined, Reject>
}

/** The training checkpoint that holds a sampler checkpoint's weights. */
const sourceOf = (checkpoints: CheckpointIndex, sampler: Entry) =>
  sampler.policy_version === undefined || sampler.loads === undefined
    ? undefined
    : checkpoints
        .list(sampler.model_id)
        .find((e) => e.kind === "weights" && e.file !== undefined && e.policy_version === sampler.policy_version && e.loads === sampler.loads)

/** @since 0.1.0 @category constructors */
export const make = (ctx: {
  readonly registry: Registry
  readonly checkpoints: CheckpointIndex
  /** the sampler paths published by this run of the server (restored ones join them) */
  readonly samplerPaths: Map<string, Published>
  /** whether models can be built for a restore (the server has a model factory) */
  readonly canBuild: boolean
}): RestoredSamplers => {
  const { registry } = ctx
  /** path -> the id of the model restored for it */
  const restored = new Map<string, string>()
  const building = new Map<string, Deferred.Deferred<Published, Reject>>()
  let sessionId: string | undefined
  let modelSeq = 0

  const session = Effect.gen(function* () {
    if (sessionId !== undefined && Exit.isSuccess(yield* Effect.exit(registry.getSession(sessionId)))) return sessionId
    sessionId = yield* registry.createSession
    return sessionId
  })

  const build = (uri: string, entry: Entry, file: string) =>
    Effect.gen(function* () {
      const owner = yield* session
      const model = yield* Effect.uninterruptible(registry.createModel(owner, modelSeq++, entry.lora_rank, undefined))
      const unavailable = (e: { readonly message: string }) => new Reject({ status: 503, message: `${uri}: restoring its weights from ${file}: ${e.message}` })
      yield* model.trainer.loadState(file, { withOptimizer: false }).pipe(Effect.mapError(unavailable))
      const r = yield* model.trainer.saveWeightsForSampler(entry.name).pipe(Effect.mapError(unavailable))
      yield* SubscriptionRef.update(model.sampler.published, (v) => Math.max(v, r.version))
      const published: Published = { modelId: model.id, version: r.version, modelPath: uri }
      ctx.samplerPaths.set(uri, published)
      restored.set(uri, model.id)
      yield* Effect.logInfo(`${uri}: sampler weights of an earlier run of this server, served again from ${file} by model ${model.id}`)
      return published
    })

  /** Builds the sampler of `uri` once, however many requests ask for it meanwhile. */
  const restore = (uri: string, entry: Entry) =>
    Effect.gen(function* () {
      const pending = building.get(uri)
      if (pending !== undefined) return yield* Deferred.await(pending)
      if (!ctx.canBuild) {
        return yield* notFound(
          `model_path ${uri} was saved by an earlier run of this server, which builds no models for it (it trains one adapter: \`serve --workers\`); load a training checkpoint and save_weights_for_sampler again`,
        )
      }
      const source = sourceOf(ctx.checkpoints, entry)
      if (source === undefined) {
        return yield* notFound(
          `model_path ${uri} was saved by an earlier run of this server; sampler weights are not kept as files, and no training checkpoint of the same weights was saved (save_state at the same step): load a training checkpoint and save_weights_for_sampler again`,
        )
      }
      const done = yield* Deferred.make<Published, Reject>()
      building.set(uri, done)
      return yield* build(uri, entry, ctx.checkpoints.files.get(source.tinker_path)!).pipe(
        Effect.onExit((exit) => Effect.andThen(Deferred.done(done, exit), Effect.sync(() => building.delete(uri)))),
      )
    })

  const lookup: RestoredSamplers["lookup"] = (uri) =>
    Effect.gen(function* () {
      const known = ctx.samplerPaths.get(uri)
      const restoredBy = restored.get(uri)
      if (known !== undefined && restoredBy === undefined) return known
      // a restored model expires with its session like any other: build it again
      if (known !== undefined && Exit.isSuccess(yield* Effect.exit(registry.getModel(restoredBy!)))) return known
      const entry = ctx.checkpoints.get(uri)
      if (entry === undefined || entry.kind !== "sampler_weights") return undefined
      return yield* restore(uri, entry)
    })

  return { lookup }
}

/**
 * Where each step's batch comes from. In sync mode a step's groups are sampled when the
 * step starts, from the version the previous step published. In async mode the groups of
 * step s + k (k = `maxStepsOffPolicy`, default 1) are sampled while step s trains
 * (`ahead`), from the version in force then; each group remembers the version it was
 * sampled from, and when its step starts, groups more than `maxLag` versions behind the
 * trainer are requeued (sampled again from the current version) or dropped, as
 * `staleGroups` says.
 *
 * The sampler serves the latest published weights, so a publication waits for the
 * sampling in flight (`settle`): each batch is sampled from exactly one version, and a
 * seeded run is the same every time, whatever the timing.
 *
 * @since 0.1.0
 */
import { Effect, Fiber, type Scope } from "effect"
import type { Batch, Group } from "./Collect.ts"
import * as RunSpans from "./RunSpans.ts"
import type { RunError, RunSettings } from "./Settings.ts"

/** @since 0.1.0 @category models */
export interface Pipeline<R> {
  /**
   * the batch of `step`: the one sampled ahead (stale groups requeued or dropped), else
   * sampled now from `version`; stale groups are sampled again once `published` (the
   * publication of `version`, when still in flight) is done
   */
  readonly take: (step: number, version: number, published?: Effect.Effect<void, RunError, R>) => Effect.Effect<Batch, RunError, R>
  /** async: starts sampling `step` from `version` in the background (nothing in sync mode, past the last step, or when started already) */
  readonly ahead: (step: number, version: number) => Effect.Effect<void, never, R>
  /** how many steps ahead sampling runs: `maxStepsOffPolicy` in async mode, 0 in sync mode */
  readonly depth: number
  /** waits until all sampling started ahead has finished, on the version it started from */
  readonly settle: Effect.Effect<void>
}

/**
 * The pipeline of a run: `collect` samples a step's groups, `resample` one group again
 * (a requeued stale group, keeping its index and problem). Sampling started ahead runs in
 * the caller's scope: closing it (the run's end, however it ends) stops what is still in
 * flight.
 * @since 0.1.0 @category constructors
 */
export const make = Effect.fnUntraced(function* <R>(options: {
  readonly settings: RunSettings
  readonly collect: (step: number, version: number) => Effect.Effect<Batch, RunError, R>
  readonly resample: (step: number, group: Group, version: number) => Effect.Effect<Group, RunError, R>
}) {
  const { settings } = options
  const scope: Scope.Scope = yield* Effect.scope
  /** the steps whose sampling was started ahead (async only), by step */
  const pending = new Map<number, Fiber.Fiber<Batch, RunError>>()

  const take = Effect.fn("Pipeline.take")(function* (step: number, version: number, published: Effect.Effect<void, RunError, R> = Effect.void) {
    const ahead = pending.get(step)
    if (ahead === undefined) return yield* Effect.andThen(published, options.collect(step, version))
    pending.delete(step)
    return yield* refresh(step, version, yield* Fiber.join(ahead), published)
  })

  /** The batch sampled ahead with its stale groups requeued or dropped, and counted. */
  const refresh = Effect.fnUntraced(function* (step: number, version: number, batch: Batch, published: Effect.Effect<void, RunError, R>) {
    const stale = batch.groups.filter((g) => version - g.version > settings.maxLag)
    if (stale.length === 0) return { ...batch, staleGroups: 0 }
    if (settings.staleGroups === "drop") {
      return { ...batch, groups: batch.groups.filter((g) => version - g.version <= settings.maxLag), staleGroups: stale.length }
    }
    yield* published
    const fresh = yield* Effect.forEach(stale, (g) => options.resample(step, g, version), { concurrency: settings.sampleConcurrency })
    const swap = (g: Group) => fresh.find((f) => f.index === g.index) ?? g
    return {
      ...batch,
      groups: batch.groups.map(swap),
      ...(batch.dynamic !== undefined ? { dynamic: { ...batch.dynamic, drawn: batch.dynamic.drawn.map(swap) } } : {}),
      staleGroups: stale.length,
    }
  })

  const ahead = Effect.fn("Pipeline.ahead")(function* (step: number, version: number) {
    if (settings.async && step < settings.steps && !pending.has(step)) pending.set(step, yield* Effect.forkIn(options.collect(step, version).pipe(RunSpans.atStep(step + 1)), scope))
  })

  const pipeline: Pipeline<R> = {
    take,
    ahead,
    depth: settings.async ? (settings.maxStepsOffPolicy ?? 1) : 0,
    settle: Effect.suspend(() => Effect.forEach([...pending.values()], (f) => Fiber.await(f), { discard: true })),
  }
  return pipeline
})

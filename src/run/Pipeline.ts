/**
 * Where each step's batch comes from. In sync mode a step's groups are sampled when the
 * step starts, from the version the previous step published. In async mode the next step's
 * groups are sampled while this step trains (`ahead`), from the version in force then; each
 * group remembers the version it was sampled from, and when its step starts, groups more
 * than `maxLag` versions behind the trainer are requeued (sampled again from the current
 * version) or dropped, as `staleGroups` says.
 *
 * @since 0.1.0
 */
import { Effect, Fiber } from "effect"
import type { Batch, Group } from "./Collect.ts"
import type { RunError, RunSettings } from "./Settings.ts"

/** @since 0.1.0 @category models */
export interface Pipeline<R> {
  /** the batch of `step`: the one sampled ahead (stale groups requeued or dropped), else sampled now from `version` */
  readonly take: (step: number, version: number) => Effect.Effect<Batch, RunError, R>
  /** async: starts sampling `step` from `version` in the background (nothing in sync mode, or past the last step) */
  readonly ahead: (step: number, version: number) => Effect.Effect<void, never, R>
  /** waits until the sampling started ahead has finished, on the version it started from */
  readonly settle: Effect.Effect<void>
  /** stops the sampling started ahead, if any */
  readonly close: Effect.Effect<void>
}

/**
 * The pipeline of a run: `collect` samples a step's groups, `resample` one group again
 * (a requeued stale group, keeping its index and problem).
 * @since 0.1.0 @category constructors
 */
export const make = <R>(options: {
  readonly settings: RunSettings
  readonly collect: (step: number, version: number) => Effect.Effect<Batch, RunError, R>
  readonly resample: (step: number, group: Group, version: number) => Effect.Effect<Group, RunError, R>
}): Pipeline<R> => {
  const { settings } = options
  /** the next step's sampling, started ahead (async only) */
  let pending: Fiber.Fiber<Batch, RunError> | undefined

  const take = Effect.fn("Pipeline.take")(function* (step: number, version: number) {
    if (pending === undefined) return yield* options.collect(step, version)
    const sampled = yield* Fiber.join(pending)
    pending = undefined
    return yield* refresh(step, version, sampled)
  })

  /** The batch sampled ahead with its stale groups requeued or dropped, and counted. */
  const refresh = Effect.fnUntraced(function* (step: number, version: number, batch: Batch) {
    const stale = batch.groups.filter((g) => version - g.version > settings.maxLag)
    if (stale.length === 0) return { ...batch, staleGroups: 0 }
    if (settings.staleGroups === "drop") {
      return { ...batch, groups: batch.groups.filter((g) => version - g.version <= settings.maxLag), staleGroups: stale.length }
    }
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
    if (settings.async && step < settings.steps) pending = yield* Effect.forkChild(options.collect(step, version))
  })

  return {
    take,
    ahead,
    settle: Effect.suspend(() => (pending === undefined ? Effect.void : Effect.asVoid(Fiber.await(pending)))),
    close: Effect.suspend(() => (pending === undefined ? Effect.void : Fiber.interrupt(pending))),
  }
}

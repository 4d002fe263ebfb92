/**
 * The cache behind `Reward.cached`. A cache belongs to one run (or one law check), never
 * to the process: two runs, or the two scorings a determinism check compares, never
 * share scores, so a cache cannot hide a nondeterministic reward.
 *
 * @since 0.1.0
 */
import { Context, Effect } from "effect"

/** One cached leaf result. @since 0.1.0 @category models */
export interface CachedScore {
  readonly value: number | undefined
  readonly masked: string | undefined
  /** what the scorer noted (`ScoreContext.note`), replayed with the score */
  readonly notes?: ReadonlyArray<string> | undefined
}

/**
 * A bounded store of leaf scores, keyed by (leaf name, cache version, problem,
 * completion, stop reason). When full it drops its oldest entry.
 * @since 0.1.0 @category models
 */
export interface ScoreCache {
  readonly get: (key: string) => CachedScore | undefined
  readonly set: (key: string, score: CachedScore) => void
  readonly size: () => number
}

/**
 * A new, empty cache holding at most `limit` scores (default 100,000).
 * @since 0.1.0 @category constructors
 */
export const makeCache = (limit = 100_000): ScoreCache => {
  if (!(Number.isInteger(limit) && limit >= 1)) throw new TypeError(`Reward.makeCache: limit must be an integer >= 1, got ${limit}`)
  const entries = new Map<string, CachedScore>()
  return {
    get: (key) => entries.get(key),
    set: (key, score) => {
      if (!entries.has(key) && entries.size >= limit) {
        // the oldest entry goes (a Map keeps insertion order)
        const oldest = entries.keys().next()
        if (oldest.done !== true) entries.delete(oldest.value)
      }
      entries.set(key, score)
    },
    size: () => entries.size,
  }
}

/**
 * The cache `Reward.cached` leaves read and write. A run provides one for its whole
 * length (see `withCache`). Where none is provided, each `Reward.evaluate` call gets a
 * fresh one, so cached scores are shared only within one group.
 * @since 0.1.0 @category services
 */
export const RewardCache = Context.Reference<ScoreCache | undefined>("gyre/RewardCache", {
  defaultValue: () => undefined,
})

/**
 * Runs `self` with a fresh cache of its own: every `Reward.evaluate` inside it shares
 * the cache, nothing outside it does.
 *
 * @example
 * yield* Reward.withCache(Effect.forEach(groups, (g) => Reward.evaluate(reward, g)))
 * @since 0.1.0 @category services
 */
export const withCache = <A, E, R>(self: Effect.Effect<A, E, R>, limit?: number): Effect.Effect<A, E, R> =>
  Effect.suspend(() => Effect.provideService(self, RewardCache, makeCache(limit)))

/** @internal */
export const cacheKey = (name: string, version: string, rollout: { readonly problem: unknown; readonly completion: string; readonly stopReason: string }) =>
  JSON.stringify([name, version, rollout.problem, rollout.completion, rollout.stopReason])

/**
 * Reward failures are never silent: each leaf failure (an `InfraFault`, a timeout
 * included) is kept with its rollout's score (`Score.failed`), counted per component by
 * `failureCounts` (a step's `reward/<name>/failed`), and the first failure of each kind
 * is logged as a warning once per run, for every weight, 0 included.
 *
 * A run is known by its reward cache: the runner makes one per run, `withCache` one per
 * program; where none is in force, each `evaluate` call is a run of its own. A law of
 * `gyre/testing` scores with a fresh cache each time, and logs once per reward instead
 * (`FailureScope`).
 *
 * @since 0.1.0
 */
import { Context, Effect } from "effect"
import type { ScoreCache } from "./Cache.ts"
import type { Score } from "./Model.ts"

/** The kinds of failure already logged, per run. */
const logged = new WeakMap<object, Set<string>>()

/**
 * What failures are logged once per kind for, when not the run's cache: the laws of
 * `gyre/testing` set the reward under test.
 * @internal
 */
export const FailureScope = Context.Reference<object | undefined>("gyre/reward/FailureScope", { defaultValue: () => undefined })

/** Kinds of failure logged per component and run; later kinds are still counted and kept. */
const KINDS_PER_COMPONENT = 5

/**
 * The kind of a failure: its component and its message with every number left out, so
 * "prompt has 61 tokens" and "prompt has 63 tokens" are one kind.
 * @internal
 */
export const failureKind = (component: string, message: string): string => `${component}\u0000${message.replace(/\d+(?:\.\d+)?/g, "#")}`

/**
 * How many of `scores` each component failed on (`Score.failed`), 0 for the components
 * that never failed: a step's `reward/<name>/failed`.
 *
 * @example
 * Reward.failureCounts(scores) // => { correct: 0, judged: 3 }
 * @since 0.1.0 @category getters
 */
export const failureCounts = (scores: ReadonlyArray<Score>): Record<string, number> => {
  const out: Record<string, number> = {}
  for (const s of scores) {
    for (const name of Object.keys(s.components)) out[name] ??= 0
    for (const name of Object.keys(s.failed ?? {})) out[name] = (out[name] ?? 0) + 1
  }
  return out
}

/**
 * Logs, as a warning, each failure in `scores` whose kind this run has not logged yet.
 * @internal
 */
export const logFailures = (cache: ScoreCache, scores: ReadonlyArray<Score>): Effect.Effect<void> =>
  Effect.flatMap(Effect.service(FailureScope), (scope) => {
    const key = scope ?? cache
    let seen = logged.get(key)
    const fresh: Array<readonly [string, string]> = []
    for (const s of scores) {
      for (const [component, message] of Object.entries(s.failed ?? {})) {
        seen ??= new Set()
        const kind = failureKind(component, message)
        if (seen.has(kind)) continue
        const perComponent = [...seen].filter((k) => k.startsWith(`${component}\u0000`)).length
        if (perComponent >= KINDS_PER_COMPONENT) continue
        seen.add(kind)
        fresh.push([component, message])
      }
    }
    if (seen !== undefined) logged.set(key, seen)
    return Effect.forEach(
      fresh,
      ([component, message]) =>
        Effect.logWarning(
          `reward component "${component}" failed: ${message} (the first failure of this kind in this run: the next ones are not logged, each is kept with its rollout under "failed")`,
        ),
      { discard: true },
    )
  })

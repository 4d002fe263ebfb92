/**
 * Restarts of a toolset's server with a back-off: after a start (or a reconnect) fails, the
 * next one waits 250 ms, doubled after each failure in a row, at most 8 s. A call in the
 * meantime fails at once with the last start's error (its episode is masked: the
 * infrastructure failed), instead of starting a process per call while the server is
 * down. A start that succeeds resets the wait.
 *
 * @since 0.1.0
 */
import { Clock, Duration, Effect } from "effect"
import { McpError } from "./McpError.ts"
import { cappedDoubling } from "../util/Backoff.ts"

/** @since 0.1.0 @category constants */
export const FIRST_WAIT: Duration.Duration = Duration.millis(250)
/** @since 0.1.0 @category constants */
export const MAX_WAIT: Duration.Duration = Duration.seconds(8)

/** The wait after `failures` failed starts in a row (1 or more). @since 0.1.0 @category estimators */
export const waitAfter = (failures: number): number => cappedDoubling(Duration.toMillis(FIRST_WAIT), Duration.toMillis(MAX_WAIT), failures)

/** @since 0.1.0 @category models */
export interface Restarts {
  /** `start`, unless the last one failed less than its wait ago: then that failure, saying when the next try is */
  readonly guard: <A, R>(start: Effect.Effect<A, McpError, R>) => Effect.Effect<A, McpError, R>
}

/** Restarts of one server, none failed yet. @since 0.1.0 @category constructors */
export const make = (): Restarts => {
  let failures = 0
  let retryAt = 0
  let last: McpError | undefined
  return {
    guard: (start) =>
      Effect.gen(function* () {
        const now = yield* Clock.currentTimeMillis
        if (last !== undefined && now < retryAt) {
          return yield* new McpError({ ...last, message: `${last.message} (gyre tries again in ${Duration.format(Duration.millis(retryAt - now))})` })
        }
        return yield* start.pipe(
          Effect.tap(() =>
            Effect.sync(() => {
              failures = 0
              last = undefined
            })
          ),
          Effect.tapError((e) =>
            Effect.map(Clock.currentTimeMillis, (t) => {
              failures++
              retryAt = t + waitAfter(failures)
              last = e
            })
          ),
        )
      }),
  }
}

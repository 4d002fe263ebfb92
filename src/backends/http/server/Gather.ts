/**
 * Sampling requests reaching one sampler together are handed to it together, so a
 * sampler that batches concurrent requests (the embedded one does) sees a step's
 * whole burst: a window closes `quiet` after its last arrival and at most `max` after
 * its first (0 hands each request over at once).
 *
 * @since 0.1.0
 */
import { Deferred, Duration, Effect, type Scope } from "effect"

interface Window {
  readonly first: number
  last: number
  count: number
  readonly closed: Deferred.Deferred<void>
}

/**
 * Returns `gather(key)`: waits for the current window of `key` to close, opening one
 * if none is open.
 * @since 0.1.0 @category constructors
 */
export const make = (options: { readonly maxMillis: number; readonly quietMillis: number; readonly scope: Scope.Scope; readonly now: Effect.Effect<number> }) => {
  const windows = new Map<string, Window>()
  const quiet = Math.min(options.quietMillis, options.maxMillis)
  return (key: string): Effect.Effect<void> =>
    Effect.gen(function* () {
      if (options.maxMillis <= 0) return
      const t = yield* options.now
      const open = windows.get(key)
      if (open !== undefined) {
        open.last = t
        open.count++
        return yield* Deferred.await(open.closed)
      }
      const opened: Window = { first: t, last: t, count: 1, closed: yield* Deferred.make<void>() }
      windows.set(key, opened)
      const wait: Effect.Effect<void> = Effect.gen(function* () {
        const due = Math.min(opened.first + options.maxMillis, opened.last + quiet)
        const remaining = due - (yield* options.now)
        if (remaining > 0) {
          yield* Effect.sleep(Duration.millis(remaining))
          return yield* wait
        }
      })
      yield* Effect.forkIn(
        wait.pipe(
          Effect.andThen(Effect.sync(() => windows.delete(key))),
          Effect.andThen(Effect.suspend(() => Effect.logDebug(`sampler ${key}: ${opened.count} sampling request(s) gathered`))),
          Effect.andThen(Deferred.succeed(opened.closed, undefined)),
        ),
        options.scope,
        { startImmediately: true },
      )
      yield* Deferred.await(opened.closed)
    })
}

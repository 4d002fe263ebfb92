/**
 * Shared pieces of the in-process and worker-thread embedded backends: the error
 * constructors and the wait for a published policy version.
 *
 * @since 0.1.0
 */
import { Effect, Stream, SubscriptionRef } from "effect"
import { BackendError } from "../../Contract.ts"

/** @since 0.1.0 @category errors */
export const fail = (operation: string, reason: BackendError["reason"], message: string) => new BackendError({ reason, operation, message })

/** @since 0.1.0 @category errors */
export const messageOf = (e: unknown) => (e instanceof Error ? e.message : String(e))

/** Maps an unexpected throw to an `Internal` BackendError. @since 0.1.0 @category errors */
export const internal = (operation: string) => (cause: unknown) => fail(operation, "Internal", messageOf(cause))

/**
 * Waits until `published` reaches `min` (a pinned sampling client); returns at once when it
 * already has, or when no version is asked for.
 * @since 0.1.0 @category combinators
 */
export const awaitVersion = Effect.fnUntraced(function* (published: SubscriptionRef.SubscriptionRef<number>, operation: string, min: number | undefined) {
  if (min === undefined || (yield* SubscriptionRef.get(published)) >= min) return
  yield* Effect.logDebug(`${operation}: waiting for policy version ${min}`)
  yield* SubscriptionRef.changes(published).pipe(
    Stream.filter((v) => v >= min),
    Stream.take(1),
    Stream.runDrain,
  )
})

/**
 * Shared pieces of the in-process and worker-thread embedded backends: the error
 * constructors and the wait for a published policy version.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Option, Stream, SubscriptionRef } from "effect"
import { BackendError } from "../../Contract.ts"

/**
 * A loss or gradient that is not finite. The call that met it fails and changes nothing:
 * its gradient is never added to the buffer, and an optimizer step never applies it.
 * Reported as `InvalidInput`: the data (or a learning rate) made it, not a bug.
 * @since 0.1.0 @category errors
 */
export class NonFiniteError extends Error {
  override readonly name = "NonFiniteError"
}

/** @since 0.1.0 @category errors */
export const fail = (operation: string, reason: BackendError["reason"], message: string) => new BackendError({ reason, operation, message })

/** @since 0.1.0 @category errors */
export const messageOf = (e: unknown) => (e instanceof Error ? e.message : String(e))

/** Maps a throw to a BackendError: `InvalidInput` for a non-finite loss or gradient, else `Internal`. @since 0.1.0 @category errors */
export const internal = (operation: string) => (cause: unknown) =>
  fail(operation, cause instanceof NonFiniteError ? "InvalidInput" : "Internal", messageOf(cause))

/**
 * How long a request pinned to a policy version waits for that version to be published
 * before it fails with reason `Timeout`: one hour, as the Loops trainer's `ready_timeout`.
 * @since 0.1.0 @category constants
 */
export const DEFAULT_READY_TIMEOUT: Duration.Duration = Duration.hours(1)

/**
 * Waits until `published` reaches `min` (a pinned sampling client); returns at once when it
 * already has, or when no version is asked for. Fails with reason `Timeout`, naming the
 * version waited for and the version served, once `readyTimeout` passes.
 * @since 0.1.0 @category combinators
 */
export const awaitVersion = Effect.fnUntraced(function* (
  published: SubscriptionRef.SubscriptionRef<number>,
  operation: string,
  min: number | undefined,
  readyTimeout: Duration.Input = DEFAULT_READY_TIMEOUT,
) {
  if (min === undefined || (yield* SubscriptionRef.get(published)) >= min) return
  yield* Effect.logDebug(`${operation}: waiting for policy version ${min}`)
  const reached = yield* SubscriptionRef.changes(published).pipe(
    Stream.filter((v) => v >= min),
    Stream.take(1),
    Stream.runDrain,
    Effect.timeoutOption(readyTimeout),
  )
  if (Option.isNone(reached)) {
    const served = yield* SubscriptionRef.get(published)
    return yield* fail(
      operation,
      "Timeout",
      `waited ${Duration.format(Duration.fromInputUnsafe(readyTimeout))} for policy version ${min}, but the sampler still serves version ${served}: ` +
        "the trainer never published it (raise the ready timeout if publishing is just slow)",
    )
  }
})

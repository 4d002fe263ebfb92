/**
 * Shared pieces of the in-process and worker-thread embedded backends: the error
 * constructors (the wait for a published policy version is `Sampler.awaitVersion`).
 *
 * @since 0.1.0
 */
import { BackendError } from "../../contract/Contract.ts"
import { type DatumIssue, render } from "../../contract/DatumIssue.ts"

/**
 * A loss or gradient that is not finite. The call that met it fails and changes nothing:
 * its gradient is never added to the buffer, and an optimizer step never applies it.
 * Reported as `InvalidInput`: the data (or a learning rate) made it, not a bug.
 * @since 0.1.0 @category errors
 */
export class NonFiniteError extends Error {
  override readonly name = "NonFiniteError"
}

/** A failure with a message, or with a batch's issue (its message rendered from it). @since 0.1.0 @category errors */
export const fail = (operation: string, reason: BackendError["reason"], problem: string | DatumIssue) =>
  typeof problem === "string" ? new BackendError({ reason, operation, message: problem }) : new BackendError({ reason, operation, message: render(problem), issue: problem })

/** @since 0.1.0 @category errors */
export const messageOf = (e: unknown) => (e instanceof Error ? e.message : String(e))

/** Maps a throw to a BackendError: `InvalidInput` for a non-finite loss or gradient, else `Internal`. @since 0.1.0 @category errors */
export const internal = (operation: string) => (cause: unknown) =>
  fail(operation, cause instanceof NonFiniteError ? "InvalidInput" : "Internal", messageOf(cause))

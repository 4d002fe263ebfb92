/**
 * Batched retrieval of sample futures (`retrieve_futures`, Tinker SDK 0.39), where the
 * server offers it (`client/config`'s `sample_use_retrieve_futures`): one long poll per
 * sampling session reports every sample future of it that finished, instead of a long
 * poll held open per sample. A sample waits for its request id to be reported, then
 * fetches its result with one `retrieve_future`, which answers at once.
 *
 * The poll runs while some sample waits, and stops when none does. When a poll fails (it is
 * not retried), the samples waiting then poll their own futures, as they do when they hear
 * nothing for `maxWait`; after three failures in a row the session's samples always do:
 * batching only ever spares polls, it never holds a result back.
 *
 * @since 0.1.0
 */
import { Deferred, Duration, Effect, type Scope } from "effect"
import type { BackendError } from "../../../contract/Contract.ts"
import type * as Wire from "../wire/Wire.ts"

/** How long a sample waits to hear of its completion before polling its own future. @since 0.1.0 @category constants */
export const DEFAULT_MAX_WAIT: Duration.Input = "2 minutes"

/** Completions heard before their sample waited for them, kept per session (the oldest go first). */
const MAX_EARLY = 65_536

/** Poll failures in a row after which the session's samples poll their own futures. */
const MAX_FAILURES = 3

/** One `retrieve_futures` call: the body, answered with the completions and the next cursor. @since 0.1.0 @category models */
export type Poll = (body: {
  readonly target: { readonly type: "sampling_session"; readonly sampling_session_id: string; readonly cloned_sampler_id: number }
  readonly prev_cursor: number
  readonly timeout: number
}) => Effect.Effect<typeof Wire.RetrieveFuturesResponse.Type, BackendError>

interface SessionState {
  cursor: number
  running: boolean
  /** polls failed in a row */
  failures: number
  failed: boolean
  readonly waiters: Map<string, Deferred.Deferred<void>>
  readonly early: Set<string>
}

/** @since 0.1.0 @category models */
export interface FuturesPoller {
  /** waits until the session's poll reports `requestId` finished (or the sample should poll for itself) */
  readonly finished: (samplingSessionId: string, requestId: string) => Effect.Effect<void>
  /** `retrieve_futures` calls made so far */
  readonly polls: () => number
}

/**
 * A poller over `poll`, its loops run in `scope`; each poll holds up to `holdSeconds`.
 * @since 0.1.0 @category constructors
 */
export const make = (poll: Poll, scope: Scope.Scope, options: { readonly holdSeconds: number; readonly maxWait?: Duration.Input | undefined }): FuturesPoller => {
  const sessions = new Map<string, SessionState>()
  let polls = 0
  const stateOf = (id: string): SessionState => {
    let s = sessions.get(id)
    if (s === undefined) sessions.set(id, (s = { cursor: 0, running: false, failures: 0, failed: false, waiters: new Map(), early: new Set() }))
    return s
  }
  const release = (s: SessionState) =>
    Effect.suspend(() => {
      const waiting = [...s.waiters.values()]
      s.waiters.clear()
      return Effect.forEach(waiting, (d) => Deferred.succeed(d, undefined), { discard: true })
    })
  const heard = (s: SessionState, requestId: string) => {
    const waiter = s.waiters.get(requestId)
    if (waiter !== undefined) {
      s.waiters.delete(requestId)
      return Deferred.succeed(waiter, undefined)
    }
    s.early.add(requestId)
    if (s.early.size > MAX_EARLY) s.early.delete(s.early.values().next().value!)
    return Effect.void
  }
  const loop = (id: string, s: SessionState) =>
    Effect.gen(function* () {
      while (true) {
        // checked and cleared in one step: a sample that waits later starts a new loop
        if (s.waiters.size === 0) return void (s.running = false)
        polls++
        const answer = yield* poll({ target: { type: "sampling_session", sampling_session_id: id, cloned_sampler_id: 0 }, prev_cursor: s.cursor, timeout: options.holdSeconds }).pipe(Effect.result)
        if (answer._tag === "Failure") {
          // the samples waiting now poll their own futures; a later one tries the batched poll again
          s.failures++
          s.failed = s.failures >= MAX_FAILURES
          if (s.failed) yield* Effect.logWarning(`retrieve_futures failed ${s.failures} times in a row for sampling session ${id} (${answer.failure.message}); its samples poll their own futures`)
          s.running = false
          return yield* release(s)
        }
        s.failures = 0
        s.cursor = answer.success.cursor
        for (const c of answer.success.completions) yield* heard(s, c.request_id)
      }
    })
  const finished = (samplingSessionId: string, requestId: string) =>
    Effect.gen(function* () {
      const s = stateOf(samplingSessionId)
      if (s.failed || s.early.delete(requestId)) return
      const waiter = yield* Deferred.make<void>()
      s.waiters.set(requestId, waiter)
      if (!s.running) {
        s.running = true
        yield* Effect.forkIn(loop(samplingSessionId, s), scope, { startImmediately: true })
      }
      yield* Deferred.await(waiter).pipe(
        Effect.timeoutOption(options.maxWait ?? DEFAULT_MAX_WAIT),
        Effect.ensuring(Effect.sync(() => s.waiters.delete(requestId))),
      )
    })
  return { finished, polls: () => polls }
}

/**
 * Batched retrieval (`retrieve_futures`, Tinker SDK 0.39): the sample futures of each
 * sampling session (and cloned sampler, `seq_id / 1e9`) that finished, in order, each with
 * a cursor. A poll names the last cursor it has seen (those entries are acknowledged and
 * dropped) and gets every later completion, held until the first one comes or the hold
 * ends. The payload itself is still fetched with `retrieve_future`, which answers at once.
 *
 * A session that is never polled keeps at most `MAX_KEPT` completions (the oldest go
 * first), and only the `MAX_SESSIONS` sessions used last keep theirs (a run publishes a new
 * sampling session per step); a client that misses one still gets its result with
 * `retrieve_future`.
 *
 * @since 0.1.0
 */
import { Deferred, Duration, Effect } from "effect"

/** Completions a session keeps unacknowledged. @since 0.1.0 @category constants */
export const MAX_KEPT = 65_536

/** Sessions whose completions are kept, the ones recorded or polled last. @since 0.1.0 @category constants */
export const MAX_SESSIONS = 256

/** One completion as `retrieve_futures` reports it. @since 0.1.0 @category models */
export interface Completion {
  readonly state: "finished"
  readonly request_id: string
}

interface Log {
  readonly entries: Array<{ readonly cursor: number; readonly requestId: string }>
  next: number
  waiters: Array<Deferred.Deferred<void>>
}

/** @since 0.1.0 @category models */
export interface SessionFutures {
  /** records that the future `requestId` of the session's sampler `stream` finished */
  readonly record: (stream: string, requestId: string) => Effect.Effect<void>
  /** the completions after `prevCursor`, held up to `wait` for the first one */
  readonly poll: (stream: string, prevCursor: number, wait: Duration.Input) => Effect.Effect<{ readonly completions: ReadonlyArray<Completion>; readonly cursor: number }>
}

/** The key of a sampling session's sampler: the session and its clone (`seq_id / 1e9`, as the SDK numbers clones). @since 0.1.0 @category combinators */
export const streamOf = (samplingSessionId: string, clonedSamplerId: number): string => `${samplingSessionId}#${clonedSamplerId}`

/** @since 0.1.0 @category constructors */
export const make = (): SessionFutures => {
  const logs = new Map<string, Log>()
  const logOf = (stream: string): Log => {
    const log = logs.get(stream) ?? { entries: [], next: 1, waiters: [] }
    // the one used last goes last; the first goes when there are too many
    logs.delete(stream)
    logs.set(stream, log)
    if (logs.size > MAX_SESSIONS) logs.delete(logs.keys().next().value!)
    return log
  }
  const record = (stream: string, requestId: string) =>
    Effect.suspend(() => {
      const log = logOf(stream)
      log.entries.push({ cursor: log.next++, requestId })
      if (log.entries.length > MAX_KEPT) log.entries.splice(0, log.entries.length - MAX_KEPT)
      const waiters = log.waiters
      log.waiters = []
      return Effect.forEach(waiters, (w) => Deferred.succeed(w, undefined), { discard: true })
    })
  const answer = (log: Log, prevCursor: number) => {
    const first = log.entries.findIndex((e) => e.cursor > prevCursor)
    // entries at or before the cursor were seen: acknowledged
    if (first !== 0) log.entries.splice(0, first < 0 ? log.entries.length : first)
    const completions = log.entries.map((e): Completion => ({ state: "finished", request_id: e.requestId }))
    return { completions, cursor: log.entries.at(-1)?.cursor ?? prevCursor }
  }
  const poll = (stream: string, prevCursor: number, wait: Duration.Input) =>
    Effect.gen(function* () {
      const log = logOf(stream)
      const now = answer(log, prevCursor)
      if (now.completions.length > 0 || Duration.toMillis(Duration.fromInputUnsafe(wait)) <= 0) return now
      const woken = yield* Deferred.make<void>()
      log.waiters.push(woken)
      yield* Deferred.await(woken).pipe(Effect.timeoutOption(wait))
      log.waiters = log.waiters.filter((w) => w !== woken)
      return answer(log, prevCursor)
    })
  return { record, poll }
}

/**
 * The server's futures: a long operation answers `{request_id}` at once and runs in
 * the background; `retrieve_future` holds a poll until the work is done or the poll's
 * wait ends (then `try_again`).
 *
 * Pending work is bounded: at most `maxPending` futures run at once; beyond that a
 * submission is refused with 429 (and `Retry-After`) before any work starts. A finished
 * future keeps its answer for `ttl`, then a poll for it gets 410; once a poll has been
 * given the answer it is kept only `answeredMillis` more (10 s by default), long enough
 * for a client whose connection broke to ask again, so that a fast run's answers (a
 * step's log-probs are tens of MB) do not pile up for the whole ttl.
 *
 * @since 0.1.0
 */
import { Deferred, Duration, Effect, Option, type Scope } from "effect"
import type { BackendError } from "../../../contract/Contract.ts"
import { futureFailure, Reject, type Reply } from "./Requests.ts"
import type * as Wire from "../wire/Wire.ts"

interface Entry {
  readonly type: Wire.RequestType
  readonly result: Deferred.Deferred<Reply>
  /** called whenever the future is polled (keeps its session alive) */
  readonly touch: Effect.Effect<void> | undefined
  doneAt: number | undefined
  /** when a poll was first given the answer */
  answeredAt: number | undefined
}

/** How long an answer stays retrievable after a poll was given it, by default. @since 0.1.0 @category constants */
export const ANSWERED_MILLIS = 10_000

/** @since 0.1.0 @category models */
export interface FutureTable {
  /** starts `work` as a future and returns its id; 429 when `maxPending` futures are running */
  readonly start: (type: Wire.RequestType, work: Effect.Effect<unknown, BackendError>, touch?: Effect.Effect<void>, onDone?: (id: string) => Effect.Effect<void>) => Effect.Effect<string, Reject>
  /** the future's answer within `wait`, if it is done by then; 410 for an unknown id */
  readonly await: (id: string, wait: Duration.Input) => Effect.Effect<Option.Option<Reply>, Reject>
  /** futures whose work has not finished */
  readonly pending: () => number
  /** futures kept (running or finished) */
  readonly size: () => number
  /** whether the id names a kept future */
  readonly has: (id: string) => boolean
  /** futures started since the server started */
  readonly started: () => number
  /** forgets finished futures older than the ttl */
  readonly sweep: Effect.Effect<void>
  /** counts finished operations by request type */
  readonly executed: Record<string, number>
}

/** @since 0.1.0 @category constructors */
export const make = (options: {
  readonly scope: Scope.Scope
  readonly ttlMillis: number
  /** how long an answer given to a poll stays retrievable (default `ANSWERED_MILLIS`, at most the ttl) */
  readonly answeredMillis?: number | undefined
  readonly maxPending: number
  readonly newId: () => string
  readonly now: Effect.Effect<number>
}): FutureTable => {
  const futures = new Map<string, Entry>()
  const answered = Math.min(options.answeredMillis ?? ANSWERED_MILLIS, options.ttlMillis)
  const executed: Record<string, number> = {}
  let running = 0
  let started = 0

  const start = (type: Wire.RequestType, work: Effect.Effect<unknown, BackendError>, touch?: Effect.Effect<void>, onDone?: (id: string) => Effect.Effect<void>) =>
    Effect.gen(function* () {
      if (running >= options.maxPending) {
        return yield* new Reject({
          status: 429,
          retryAfter: 1,
          message: `${running} requests are in progress, the most this server runs at once (maxPendingFutures ${options.maxPending}); retry later`,
        })
      }
      const id = options.newId()
      const result = yield* Deferred.make<Reply>()
      const entry: Entry = { type, result, touch, doneAt: undefined, answeredAt: undefined }
      futures.set(id, entry)
      running++
      started++
      const run = work.pipe(
        Effect.map((body): Reply => ({ status: 200, body })),
        Effect.catchTag("BackendError", (e) => Effect.succeed<Reply>({ status: 200, body: futureFailure(e) })),
        Effect.catchCause((cause) =>
          Effect.as(Effect.logError(`${type} failed`, cause), { status: 200, body: { error: `${type}: internal error`, category: "server", reason: "Internal" } } as Reply),
        ),
        Effect.tap(() => Effect.sync(() => (executed[type] = (executed[type] ?? 0) + 1))),
        Effect.flatMap((reply) =>
          Effect.flatMap(options.now, (t) =>
            Effect.sync(() => {
              entry.doneAt = t
            }).pipe(Effect.andThen(Deferred.succeed(result, reply)), Effect.andThen(onDone === undefined ? Effect.void : onDone(id))),
          ),
        ),
        Effect.ensuring(Effect.sync(() => running--)),
      )
      yield* Effect.forkIn(run, options.scope, { startImmediately: true })
      return id
    })

  const awaitFuture = (id: string, wait: Duration.Input) =>
    Effect.gen(function* () {
      const entry = futures.get(id)
      if (entry === undefined) {
        return yield* new Reject({ status: 410, message: `request_id ${JSON.stringify(id.slice(0, 100))} is unknown or expired; resubmit the request` })
      }
      if (entry.touch !== undefined) yield* entry.touch
      const reply = Duration.toMillis(Duration.fromInputUnsafe(wait)) <= 0
        ? yield* Effect.flatMap(Deferred.poll(entry.result), (done) => Option.isSome(done) ? Effect.asSome(done.value) : Effect.succeedNone)
        : yield* Deferred.await(entry.result).pipe(Effect.timeoutOption(wait))
      if (Option.isSome(reply) && entry.answeredAt === undefined) entry.answeredAt = yield* options.now
      return reply
    })

  const sweep = Effect.gen(function* () {
    const t = yield* options.now
    for (const [id, f] of futures) {
      if (f.doneAt === undefined) continue
      if (t - f.doneAt > options.ttlMillis || (f.answeredAt !== undefined && t - f.answeredAt > answered)) futures.delete(id)
    }
  })

  return { start, await: awaitFuture, pending: () => running, size: () => futures.size, has: (id) => futures.has(id), started: () => started, sweep, executed }
}

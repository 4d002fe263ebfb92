/**
 * The operations of a Loops data-plane server (`Server.ts`): each submission becomes an
 * operation with an id, run one at a time in submission order (as a Loops trainer runs
 * them), kept after it ends for `ttl` so its outcome can be fetched, then forgotten (a
 * poll for a forgotten id answers 404 and the client resubmits).
 *
 * An `Idempotency-Key` names one operation: a submission with a key already seen on the
 * same route gets the same operation back (the work runs once); the same key with
 * another route or another body is refused.
 *
 * @since 0.1.0
 */
import { Deferred, Duration, Effect, Exit, Option } from "effect"
import { BackendError } from "../../../contract/Contract.ts"

/** An operation's outcome: its result, or the error the work failed with. @since 0.1.0 @category models */
export type Outcome = { readonly status: "done"; readonly result: unknown } | { readonly status: "error"; readonly error: BackendError }

interface Entry {
  readonly id: string
  readonly key: string
  readonly route: string
  readonly body: string
  readonly outcome: Deferred.Deferred<Outcome>
  finishedAt: number | undefined
}

/** Why a submission is refused. @since 0.1.0 @category models */
export interface Conflict {
  readonly _tag: "Conflict"
  readonly message: string
}

/** @since 0.1.0 @category constructors */
export const make = Effect.fn("Loops.OperationQueue.make")(function* (options: { readonly ttl: Duration.Input }) {
  const scope = yield* Effect.scope
  const byId = new Map<string, Entry>()
  const byKey = new Map<string, Entry>()
  let last: Deferred.Deferred<Outcome> | undefined = undefined
  let counter = 0
  let ran = 0
  const ttl = Duration.toMillis(Duration.fromInputUnsafe(options.ttl))

  /** Forgets operations that ended more than `ttl` ago. */
  const sweep = Effect.sync(() => {
    const now = Date.now()
    for (const e of byId.values()) {
      if (e.finishedAt !== undefined && now - e.finishedAt > ttl) {
        byId.delete(e.id)
        byKey.delete(e.key)
      }
    }
  })

  const start = (route: string, key: string, body: string, work: Effect.Effect<unknown, BackendError>) =>
    Effect.gen(function* () {
      const outcome = yield* Deferred.make<Outcome>()
      const id = `${(++counter).toString(16).padStart(8, "0")}${crypto.randomUUID().replaceAll("-", "").slice(8)}`
      const entry: Entry = { id, key, route, body, outcome, finishedAt: undefined }
      byId.set(id, entry)
      byKey.set(key, entry)
      const previous = last
      last = outcome
      const run = Effect.gen(function* () {
        if (previous !== undefined) yield* Deferred.await(previous)
        const exit = yield* Effect.exit(work)
        if (Exit.isFailure(exit) && Option.isNone(Exit.findErrorOption(exit))) yield* Effect.logError(`${route}: operation ${id} failed`, exit.cause)
        ran++
        entry.finishedAt = Date.now()
        const ended: Outcome = Exit.isSuccess(exit)
          ? { status: "done", result: exit.value }
          : { status: "error", error: Option.getOrElse(Exit.findErrorOption(exit), () => internalError(route)) }
        yield* Deferred.succeed(outcome, ended)
      })
      yield* Effect.forkIn(run, scope)
      return id
    })

  return {
    /** submits `work` under `key`, or answers the operation `key` already names */
    submit: (route: string, key: string, body: string, work: Effect.Effect<unknown, BackendError>): Effect.Effect<string, Conflict> =>
      Effect.gen(function* () {
        yield* sweep
        const seen = byKey.get(key)
        if (seen === undefined) return yield* start(route, key, body, work)
        if (seen.route !== route || seen.body !== body) {
          return yield* Effect.fail<Conflict>({ _tag: "Conflict", message: `Idempotency-Key ${key} already names another request (${seen.route}); use a new key for a new request` })
        }
        return seen.id
      }),
    /** the outcome of operation `id` within `wait`; none while it runs; undefined when the id is unknown */
    await: (id: string, wait: Duration.Input): Effect.Effect<Option.Option<Outcome> | undefined> =>
      Effect.gen(function* () {
        yield* sweep
        const e = byId.get(id)
        if (e === undefined) return undefined
        return yield* Deferred.await(e.outcome).pipe(Effect.timeoutOption(wait))
      }),
    /** operations run so far */
    ran: () => ran,
  }
})

/** A work's failure that is not a `BackendError` (a defect), as one. */
const internalError = (route: string) => new BackendError({ reason: "Internal", operation: route, message: "the operation failed unexpectedly (see the server's log)" })

/** The queue's interface. @since 0.1.0 @category models */
export type OperationQueue = Effect.Success<ReturnType<typeof make>>

/**
 * The client side of the Loops trainer's submit-and-retrieve protocol (`DataWire.ts`):
 * an operation is submitted with `POST /{op}` and an `Idempotency-Key`, answered with
 * its `operation_id`, and its outcome is long-polled with `GET /operations/{id}`.
 *
 * - A submission is retried (same key, so the server runs it once) on no answer, 408,
 *   429 and 5xx, with the HTTP backend's back-off (`Retry.submission`); another 4xx
 *   (422: a body the server refuses) fails at once with the server's words.
 * - A poll answered 408 is polled again at once, quietly: it is the server's normal
 *   long-poll answer (it held the poll for its wait). 5xx and no answer back off
 *   (`Retry.polling`). A 404 means the server lost the operation (a restart, an expired
 *   result): it is submitted again under the same key, at most `maxResubmits` times.
 * - `{status: "done"}` gives the result; `{status: "error"}` fails with the server's
 *   error class and message; any other status (`running`, answered at once) is "not
 *   done yet", polled again after a wait that doubles from 100 ms to 1 s (`repoll`), as
 *   public clients wait about a second.
 *
 * @since 0.1.0
 */
import { randomUUID } from "node:crypto"
import { Duration, Effect, Option, Result, type Schema } from "effect"
import { BackendError } from "../../contract/Contract.ts"
import { decode } from "../../util/Decode.ts"
import * as Retry from "../http/client/Retry.ts"
import { toBackendError, type Transport } from "../http/client/Transport.ts"
import * as DataWire from "./DataWire.ts"

/** @since 0.1.0 @category models */
export interface Options {
  readonly transport: Transport
  readonly retry: Retry.Policy
  /** how long one poll may be held (the server holds ~30 s) */
  readonly pollTimeout: Duration.Input
  /** how long a submission may take to be answered */
  readonly requestTimeout: Duration.Input
  /** the wait before polling again an operation answered not done: doubles from `min` to `max` (default 100 ms to 1 s) */
  readonly repoll?: { readonly min: Duration.Input; readonly max: Duration.Input } | undefined
}

/** The default waits between polls of an operation still running. @since 0.1.0 @category constants */
export const DEFAULT_REPOLL = { min: "100 millis", max: "1 second" } as const

/** @since 0.1.0 @category models */
export interface Operations {
  /** submits `op` with `body` and waits for its result */
  readonly run: (op: DataWire.Operation, body: unknown) => Effect.Effect<unknown, BackendError>
  /**
   * submits `op` with `body`; succeeds once the trainer has queued it (202), with the
   * effect that waits for its result (the trainer runs operations one at a time in
   * submission order, so several may be queued before the first is awaited)
   */
  readonly submit: (op: DataWire.Operation, body: unknown) => Effect.Effect<Effect.Effect<unknown, BackendError>, BackendError>
  /** a plain GET (`/health`, `/policy_version`), retried like a submission and decoded with `schema` */
  readonly get: <S extends Schema.ConstraintDecoder<unknown>>(path: string, schema: S) => Effect.Effect<S["Type"], BackendError>
}

/**
 * A body of the data plane decoded with `schema`, or an `Internal` error naming the
 * operation and the field.
 * @since 0.1.0 @category combinators
 */
export const readAs = <S extends Schema.ConstraintDecoder<unknown>>(schema: S, operation: string) => {
  const run = decode(schema)
  return (body: unknown): Effect.Effect<S["Type"], BackendError> => {
    const r = run(body)
    return Result.isSuccess(r)
      ? Effect.succeed(r.success)
      : Effect.fail(new BackendError({ reason: "Internal", operation, message: `the answer does not read as the Loops data plane's: ${r.failure}` }))
  }
}

/**
 * One request that is not an operation (a GET of the trainer, a sample): retried like a
 * submission, its answer decoded with `schema`.
 * @since 0.1.0 @category combinators
 */
export const request = <S extends Schema.ConstraintDecoder<unknown>>(
  o: { readonly transport: Transport; readonly retry: Retry.Policy; readonly timeout: Duration.Input },
  operation: string,
  method: "GET" | "POST",
  path: string,
  schema: S,
  body?: unknown,
  headers: Record<string, string> = {},
): Effect.Effect<S["Type"], BackendError> =>
  o.transport.send(method, path, body, headers, o.timeout).pipe(
    Effect.retry(o.transport.logged(`${operation} (${method} ${path})`, Retry.submission(o.retry))),
    Effect.mapError((f) => toBackendError(operation, f)),
    Effect.flatMap((x) => readAs(schema, operation)(x.body)),
  )

/** The reason of a failed operation, from the server's exception class (or gyre's own `reason`). */
const reasonOf = (state: DataWire.OperationState): BackendError["reason"] => {
  const own = state.reason
  if (own === "InvalidInput" || own === "Rejected" || own === "Timeout" || own === "Unavailable" || own === "Internal") return own
  const cls = state.error_class ?? /^(\w+):/.exec(state.error ?? "")?.[1] ?? ""
  return /Value|Validation|Type|Key|Index|Invalid/.test(cls) ? "InvalidInput" : "Rejected"
}

/** The wait before the (k+1)-th poll in a row of an operation answered not done. */
const repollDelay = (o: Options, k: number) => {
  const { max, min } = o.repoll ?? DEFAULT_REPOLL
  return Duration.millis(Math.min(Duration.toMillis(Duration.fromInputUnsafe(min)) * 2 ** Math.min(k, 20), Duration.toMillis(Duration.fromInputUnsafe(max))))
}

/**
 * Polls operation `id` of `op` until it is done or failed. A 408 (the server held the
 * poll for its wait) is polled again at once and logged at debug level only; an answer
 * "not done yet" is polled again after `repollDelay`; failures retry as `Retry.polling`.
 */
const pollUntilDone = (o: Options, op: DataWire.Operation, id: string) => {
  const t = o.transport
  const once = t.send("GET", `/operations/${encodeURIComponent(id)}`, undefined, {}, o.pollTimeout).pipe(
    Effect.map((x) => Option.some(x.body)),
    Effect.catchIf(
      (f) => f.kind === "RequestTimeout",
      () => Effect.as(Effect.logDebug(`${op}: operation ${id} is still running (the trainer held the poll for its wait)`), Option.none<unknown>()),
    ),
    Effect.retry(t.logged(`${op} (operation ${id})`, Retry.polling(o.retry))),
  )
  return Effect.gen(function* () {
    for (let waits = 0; ;) {
      const body = yield* once
      if (Option.isNone(body)) continue
      const s = yield* readAs(DataWire.OperationState, op)(body.value).pipe(Effect.mapError((e) => new Retry.HttpFailure({ kind: "Decode", message: e.message })))
      if (s.status === "done" || s.status === "error") return s
      yield* Effect.sleep(repollDelay(o, waits++))
    }
  })
}

/** Submits an operation; the effect it succeeds with polls it to its outcome (resubmitting under the same key if the trainer forgot it). */
const makeSubmit = (o: Options) => (op: DataWire.Operation, body: unknown) =>
  Effect.gen(function* () {
    const t = o.transport
    const key = randomUUID().replaceAll("-", "")
    const submit = t.send("POST", `/${op}`, body, { [DataWire.Headers.idempotencyKey]: key }, o.requestTimeout).pipe(
      Effect.retry(t.logged(op, Retry.submission(o.retry))),
      Effect.mapError((f) => toBackendError(op, f)),
      Effect.flatMap((x) => readAs(DataWire.Submitted, op)(x.body)),
    )
    const first = yield* submit
    return yield* Effect.cached(outcome(o, op, submit, (id) => pollUntilDone(o, op, id), first.operation_id))
  })

/** Polls an operation to its outcome; an operation the trainer no longer knows (404) is submitted again under the same key, at most `maxResubmits` times. */
const outcome = (
  o: Options,
  op: DataWire.Operation,
  submit: Effect.Effect<typeof DataWire.Submitted.Type, BackendError>,
  poll: (id: string) => Effect.Effect<typeof DataWire.OperationState.Type, Retry.HttpFailure>,
  firstId: string,
) =>
  Effect.gen(function* () {
    const t = o.transport
    for (let resubmits = 0; ; resubmits++) {
      const operation_id = resubmits === 0 ? firstId : (yield* submit).operation_id
      const state = yield* poll(operation_id).pipe(Effect.result)
      if (Result.isFailure(state)) {
        // the server no longer knows the operation: the same key runs it at most once
        if (state.failure.status === 404 && resubmits < o.retry.maxResubmits) {
          yield* Effect.logWarning(`${op}: operation ${operation_id} is unknown to the trainer (restarted, or its result expired); submitting it again under the same key`)
          continue
        }
        return yield* toBackendError(op, state.failure)
      }
      const s = state.success
      if (s.status === "error") {
        return yield* new BackendError({ reason: reasonOf(s), operation: op, message: t.redact(s.error ?? `the operation failed${s.error_class ? ` (${s.error_class})` : ""}`) })
      }
      return s.result
    }
  })

/** @since 0.1.0 @category constructors */
export const make = (o: Options): Operations => ({
  run: (op, body) => Effect.flatten(makeSubmit(o)(op, body)).pipe(Effect.withSpan(`Loops.${op}`)),
  submit: (op, body) => makeSubmit(o)(op, body).pipe(Effect.withSpan(`Loops.submit.${op}`)),
  get: (path, schema) => request({ transport: o.transport, retry: o.retry, timeout: o.requestTimeout }, `GET ${path}`, "GET", path, schema),
})

/**
 * The client's calls over a `Transport`: direct requests, and futures (a submission
 * POST answered with a `request_id`, then `retrieve_future` polls), with retries
 * (`Retry.ts`), idempotency keys and `seq_id` order.
 *
 * - Every submission carries an `X-Idempotency-Key`, reused by every retry and
 *   resubmission of that call, so the server applies it at most once.
 * - Submissions awaited at once ask with `X-Gyre-Wait-Ms` for the result to come with
 *   the answer; a server that does so (gyre's) spares the poll, others are polled as
 *   usual. Pipelined ones (`trainingSubmit`) do not wait: the next call is sent as soon
 *   as this one is queued.
 * - Training calls take consecutive `seq_id`s from 1 and are submitted strictly in
 *   that order (one submission at a time; the polls may overlap). A submission the
 *   server refuses for good (a 4xx that is not retried) used up its `seq_id`, on both
 *   sides (`SeqOrder.ts`): the next call takes the next one, as the official SDK does.
 *   One given up on without a refusal from the server itself (no answer, a 400 from a
 *   proxy, a billing pause that outlasted the wait) leaves its number to the next call.
 * - A poll answered `try_again` or 408 with a `queue_state` other than `active` logs a
 *   warning when the state changes (as the SDK's `lib/queue_state_logger.py`), e.g. a
 *   queue paused for capacity; the poll goes on.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Option, Result, Schema, Semaphore } from "effect"
import { BackendError } from "../../../contract/Contract.ts"
import { decode } from "../wire/Decode.ts"
import * as Retry from "./Retry.ts"
import { queueStateOf, toBackendError, type Transport } from "./Transport.ts"
import * as Wire from "../wire/Wire.ts"

type Outcome = { readonly _tag: "Done"; readonly value: unknown } | { readonly _tag: "Failed"; readonly error: Wire.FutureError }

interface Submitted {
  readonly requestId: string
  readonly early: Option.Option<Outcome>
}

const isObject = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)

const decodeAnswer = <S extends Schema.ConstraintDecoder<unknown>>(schema: S, what: string) => {
  const run = decode(schema)
  return (value: unknown): Effect.Effect<S["Type"], Retry.HttpFailure> => {
    const r = run(value)
    return Result.isSuccess(r)
      ? Effect.succeed(r.success)
      : Effect.fail(new Retry.HttpFailure({ kind: "Decode", message: `the answer to ${what} does not match the protocol: ${r.failure}` }))
  }
}

/** How the calls retry and wait. @since 0.1.0 @category models */
export interface Options {
  readonly policy: Retry.Policy
  readonly requestTimeout: Duration.Input
  readonly pollTimeout: Duration.Input
  readonly submitWaitMillis: number
}

/** What the calls of one connection share. */
interface Context {
  readonly transport: Transport
  readonly options: Options
  /** the `X-Gyre-Wait-Ms` header of every submission (none when the wait is off) */
  readonly waitHeader: Record<string, string>
  /** the `seq_id` the next training call takes */
  readonly seq: { next: number }
  /** one training submission at a time, in `seq_id` order */
  readonly turn: Semaphore.Semaphore
}

/** One submission of a future, as every retry and resubmission of it sends it again. */
interface Submission {
  readonly path: string
  readonly body: unknown
  /** the idempotency key, shared by its retries and resubmissions */
  readonly key: string
  readonly extraHeaders: Record<string, string>
  readonly operation: string
}

const newKey = () => `gyre-${globalThis.crypto.randomUUID()}`

const futureErrorToBackend = (ctx: Context, operation: string, e: Wire.FutureError): BackendError => {
  const issue = Wire.issueOf(e.issue)
  return new BackendError({
    reason: e.reason ?? (e.category === "user" ? "InvalidInput" : "Internal"),
    operation,
    message: ctx.transport.redact(e.error),
    ...(issue !== undefined ? { issue } : {}),
  })
}

/** A direct (non-future) call with submission retries. */
const direct = <S extends Schema.ConstraintDecoder<unknown>>(ctx: Context, method: "GET" | "POST", path: string, body: unknown, schema: S, operation: string) =>
  Effect.suspend(() => {
    // one key per call, shared by its retries
    const headers: Record<string, string> = method === "POST" ? { [Wire.Headers.idempotencyKey]: newKey() } : {}
    return ctx.transport.send(method, path, body, headers, ctx.options.requestTimeout).pipe(Effect.retry(ctx.transport.logged(operation, Retry.submission(ctx.options.policy))))
  }).pipe(
    Effect.flatMap((x) => decodeAnswer(schema, operation)(x.body)),
    Effect.mapError((f) => toBackendError(operation, f)),
  )

/** One request held up to the poll timeout, not retried (a batched poll: its caller decides what a failure means). */
const once = <S extends Schema.ConstraintDecoder<unknown>>(ctx: Context, path: string, body: unknown, schema: S, operation: string) =>
  ctx.transport.send("POST", path, body, {}, ctx.options.pollTimeout).pipe(
    Effect.flatMap((x) => decodeAnswer(schema, operation)(x.body)),
    Effect.mapError((f) => toBackendError(operation, f)),
  )

/** A future's answer (a poll's, or the result a submission carried): done, failed, or not yet. */
const outcomeOf = (b: unknown, operation: string): Effect.Effect<Outcome, Retry.HttpFailure> => {
  if (isObject(b) && (b["type"] === "try_again" || b["status"] === "complete_metadata")) {
    return Effect.fail(new Retry.HttpFailure({ kind: "TryAgain", message: "not done yet", ...queueStateOf(b) }))
  }
  if (isObject(b) && typeof b["error"] === "string") return Effect.map(decodeAnswer(Wire.FutureError, operation)(b), (error) => ({ _tag: "Failed", error }) as const)
  return Effect.succeed({ _tag: "Done", value: b } as const)
}

/** POSTs a submission (with retries); returns its request id and, if the server finished in time, its outcome. */
const submitRaw = (ctx: Context, s: Submission) =>
  ctx.transport.send("POST", s.path, s.body, { [Wire.Headers.idempotencyKey]: s.key, ...ctx.waitHeader, ...s.extraHeaders }, ctx.options.requestTimeout).pipe(
    Effect.retry(ctx.transport.logged(s.operation, Retry.submission(ctx.options.policy))),
    Effect.flatMap((x) => decodeAnswer(Wire.SubmitResponse, s.operation)(x.body)),
    Effect.flatMap((f) =>
      f.result === undefined
        ? Effect.succeed<Submitted>({ requestId: f.request_id, early: Option.none() })
        : outcomeOf(f.result, s.operation).pipe(
            Effect.map((o): Submitted => ({ requestId: f.request_id, early: Option.some(o) })),
            Effect.catchIf(
              (e) => e.kind === "TryAgain",
              () => Effect.succeed<Submitted>({ requestId: f.request_id, early: Option.none() }),
            ),
          ),
    ),
  )

/**
 * A submission's failure once retrying is over. A 404 names a session, model or
 * sampling session the server no longer knows: it restarted, or the session expired.
 * Its training state since the last saved checkpoint is gone with it, so the call
 * fails at once, saying how a run goes on.
 */
const submissionError = (operation: string, f: Retry.HttpFailure): BackendError =>
  f.kind === "Fatal" && f.status === 404
    ? new BackendError({
        reason: "Unavailable",
        operation,
        message:
          `HTTP 404: ${f.message}. The server no longer knows this client's session or model (it restarted, or the session expired), ` +
          "and the model's training state since its last saved checkpoint is gone with it: continue a run from that checkpoint with `gyre run --resume <run folder>`",
      })
    : toBackendError(operation, f)

const submit = (ctx: Context, s: Submission) => submitRaw(ctx, s).pipe(Effect.mapError((f) => submissionError(s.operation, f)))

/** Logs a poll's queue state when it changes to one other than `active`. */
const queueLogger = (ctx: Context, operation: string) => {
  let last: string | undefined = undefined
  return (f: Retry.HttpFailure) =>
    Effect.suspend(() => {
      if (f.queueState === undefined || f.queueState === last) return Effect.void
      last = f.queueState
      if (f.queueState === "active") return Effect.logDebug(`${operation}: the server's queue is active again`)
      const reason = f.queueStateReason !== undefined ? `: ${ctx.transport.redact(f.queueStateReason)}` : ""
      return Effect.logWarning(`${operation} is waiting in the server's queue, ${ctx.transport.redact(f.queueState)}${reason}`)
    })
}

const pollUntilDone = (ctx: Context, requestId: string, type: Wire.RequestType, operation: string) =>
  Effect.suspend(() => {
    let iteration = 0
    const logQueue = queueLogger(ctx, operation)
    const once = Effect.suspend(() =>
      ctx.transport.send(
        "POST",
        "/retrieve_future",
        { request_id: requestId, allow_metadata_only: false },
        { [Wire.Headers.requestType]: type, [Wire.Headers.requestIteration]: String(iteration++) },
        ctx.options.pollTimeout,
      ),
    ).pipe(
      Effect.flatMap((x) => outcomeOf(x.body, operation)),
      Effect.tapError(logQueue),
    )
    return once.pipe(Effect.retry(ctx.transport.logged(`${operation} (polling)`, Retry.polling(ctx.options.policy))))
  })

/** Polls a submitted future (unless its submission carried the outcome); on 410 resubmits the same body with the same key. */
const awaitFuture = <S extends Schema.ConstraintDecoder<unknown>>(
  ctx: Context,
  s: Submission,
  first: Submitted,
  type: Wire.RequestType,
  schema: S,
  notice?: Notice,
): Effect.Effect<S["Type"], BackendError> =>
  Effect.gen(function* () {
    const { operation } = s
    let submitted = first
    for (let resubmits = 0; ; resubmits++) {
      const requestId = submitted.requestId
      // batched retrieval: the first poll waits until the session's poll reports the future
      // done (a resubmission may get the same id back, whose completion was reported already)
      if (resubmits === 0 && Option.isNone(submitted.early) && notice !== undefined) yield* notice(requestId)
      const outcome = Option.isSome(submitted.early)
        ? submitted.early
        : yield* pollUntilDone(ctx, requestId, type, operation).pipe(
            Effect.map((o) => Option.some(o)),
            Effect.catchIf(
              (f) => f.kind === "Expired" && resubmits < ctx.options.policy.maxResubmits,
              (f) => Effect.as(Effect.logWarning(`${operation}: future ${requestId} expired (${f.message}); resubmitting`), Option.none<Outcome>()),
            ),
            Effect.mapError((f) => toBackendError(operation, f)),
          )
      if (Option.isNone(outcome)) {
        submitted = yield* submit(ctx, s)
        continue
      }
      if (outcome.value._tag === "Failed") return yield* futureErrorToBackend(ctx, operation, outcome.value.error)
      return yield* decodeAnswer(schema, operation)(outcome.value.value).pipe(Effect.mapError((f) => toBackendError(operation, f)))
    }
  })

/** Waits until a future is known to be done (`FuturesPoller`), so that one poll fetches it. @since 0.1.0 @category models */
export type Notice = (requestId: string) => Effect.Effect<void>

/** A future-returning call that is not ordered (sampling, create_model). */
const futureCall = <S extends Schema.ConstraintDecoder<unknown>>(
  ctx: Context,
  path: string,
  body: unknown,
  type: Wire.RequestType,
  schema: S,
  operation: string,
  extraHeaders: Record<string, string>,
  notice?: Notice,
) =>
  Effect.gen(function* () {
    const s: Submission = { path, body, key: newKey(), extraHeaders, operation }
    const submitted = yield* submit(ctx, s)
    return yield* awaitFuture(ctx, s, submitted, type, schema, notice)
  })

/**
 * Submits an ordered training call: takes the next seq id and submits in order. `wait`
 * asks the server to answer with the result (a call awaited at once); a pipelined
 * submission does not, so the next call is sent as soon as this one is queued.
 */
const submitInTurn = (ctx: Context, path: string, makeBody: (seq: number) => unknown, operation: string, wait: boolean) =>
  Semaphore.withPermits(
    ctx.turn,
    1,
  )(
    Effect.gen(function* () {
      const seq = ctx.seq.next
      const s: Submission = { path, body: makeBody(seq), key: newKey(), extraHeaders: wait ? {} : { [Wire.Headers.waitMillis]: "0" }, operation }
      const submitted = yield* submitRaw(ctx, s).pipe(
        // a refusal for good (4xx, not retried) consumed the seq id on the server too
        Effect.tapError((f) =>
          Effect.sync(() => {
            if (f.kind === "Fatal" && f.status !== undefined) ctx.seq.next = seq + 1
          }),
        ),
        Effect.mapError((f) => submissionError(operation, f)),
      )
      ctx.seq.next = seq + 1
      return { submitted, s }
    }),
  )

/**
 * An ordered training call: succeeds once the server has queued it, with the effect that
 * awaits its result (polled outside the turn when first run; a second run gives the same
 * result). `wait`: the call is awaited at once, so its submission asks for the result.
 */
const trainingSubmit = <S extends Schema.ConstraintDecoder<unknown>>(
  ctx: Context,
  path: string,
  makeBody: (seq: number) => unknown,
  type: Wire.RequestType,
  schema: S,
  operation: string,
  wait: boolean,
) => Effect.flatMap(submitInTurn(ctx, path, makeBody, operation, wait), ({ s, submitted }) => Effect.cached(awaitFuture(ctx, s, submitted, type, schema)))

/** @since 0.1.0 @category constructors */
export const make = (transport: Transport, options: Options) =>
  Effect.gen(function* () {
    const ctx: Context = {
      transport,
      options,
      waitHeader: options.submitWaitMillis > 0 ? { [Wire.Headers.waitMillis]: String(options.submitWaitMillis) } : {},
      seq: { next: 1 },
      turn: yield* Semaphore.make(1),
    }
    return {
      direct: <S extends Schema.ConstraintDecoder<unknown>>(method: "GET" | "POST", path: string, body: unknown, schema: S, operation: string) =>
        direct(ctx, method, path, body, schema, operation),
      /** one POST held up to the poll timeout, not retried */
      once: <S extends Schema.ConstraintDecoder<unknown>>(path: string, body: unknown, schema: S, operation: string) => once(ctx, path, body, schema, operation),
      /** how long one poll may be held */
      pollTimeout: options.pollTimeout,
      futureCall: <S extends Schema.ConstraintDecoder<unknown>>(
        path: string,
        body: unknown,
        type: Wire.RequestType,
        schema: S,
        operation: string,
        extraHeaders: Record<string, string> = {},
        notice?: Notice,
      ) => futureCall(ctx, path, body, type, schema, operation, extraHeaders, notice),
      /** an ordered training call, awaited */
      trainingCall: <S extends Schema.ConstraintDecoder<unknown>>(path: string, makeBody: (seq: number) => unknown, type: Wire.RequestType, schema: S, operation: string) =>
        Effect.flatten(trainingSubmit(ctx, path, makeBody, type, schema, operation, true)),
      /** an ordered training call, submitted: `wait` when it is awaited at once (see `trainingSubmit`) */
      trainingSubmit: <S extends Schema.ConstraintDecoder<unknown>>(path: string, makeBody: (seq: number) => unknown, type: Wire.RequestType, schema: S, operation: string, wait = false) =>
        trainingSubmit(ctx, path, makeBody, type, schema, operation, wait),
      futureErrorToBackend: (operation: string, e: Wire.FutureError) => futureErrorToBackend(ctx, operation, e),
    }
  })

/** @since 0.1.0 @category models */
export type Calls = Effect.Success<ReturnType<typeof make>>

/** Formats a duration input for messages. @since 0.1.0 @category combinators */
export const formatDuration = (d: Duration.Input) => Duration.format(Duration.fromInputUnsafe(d))

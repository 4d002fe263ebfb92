/**
 * One HTTP exchange of the client, and how its failures are described: every text
 * that gyre prints (errors, logs) passes through `redact`, so a server that echoes the
 * request headers cannot make gyre print the API key.
 *
 * Bodies are JSON, or protobuf both ways (`Binary`): a `Binary` request body goes as
 * `application/x-protobuf`, and a 2xx answer of that content type comes back as a
 * `Binary`. Polls of the futures whose results Tinker serves as protobuf
 * (`forward_backward`, `forward`, `asample`) accept protobuf or JSON, as the official
 * SDK asks (`lib/api_future_impl.py`), unless the transport is made JSON-only.
 *
 * A 400 whose body is not a JSON object (a proxy's HTML error page, Cloudflare's empty
 * 400) did not come from the server, whose every refusal is JSON: it is a
 * `BareBadRequest`, which `Retry.ts` retries a few times, and whose final error names
 * the status and the start of the body. A 402 is a `BillingPaused`, waited out. A 408's
 * `queue_state` travels with its failure.
 *
 * The client names itself as gyre (`User-Agent: gyre/<version> (node <version>)`),
 * never as the Python SDK.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Option, Redacted, Result, Schedule, Schema } from "effect"
import { HttpClient, HttpClientRequest } from "effect/http"
import { BackendError } from "../../../contract/Contract.ts"
import { decode } from "../wire/Decode.ts"
import { isProtoContentType, PROTO_CONTENT_TYPE, type ProtoError } from "../wire/Proto.ts"
import * as Retry from "./Retry.ts"
import * as Wire from "../wire/Wire.ts"

/** @since 0.1.0 @category constants */
export const CLIENT_VERSION = "gyre/0.1.0"

/** The `User-Agent` of every request: gyre and its runtime. @since 0.1.0 @category constants */
export const USER_AGENT = `${CLIENT_VERSION} (node ${globalThis.process?.versions?.node ?? "unknown"})`

/**
 * A protobuf body: sent as `application/x-protobuf` when it is a request body, and what
 * a 2xx protobuf answer comes back as (with the answer's headers).
 * @since 0.1.0 @category models
 */
export class Binary {
  readonly bytes: Uint8Array
  readonly headers: Readonly<Record<string, string | undefined>>
  constructor(bytes: Uint8Array, headers: Readonly<Record<string, string | undefined>> = {}) {
    this.bytes = bytes
    this.headers = headers
  }
}

/**
 * A future's result, JSON or protobuf (`Binary`, converted to JSON by `fromProto`),
 * decoded with the wire Schema; a mismatch is a `BackendError` naming the operation.
 * @since 0.1.0 @category combinators
 */
export const decodeResult = <S extends Schema.ConstraintDecoder<unknown>>(
  value: unknown,
  fromProto: (body: Binary) => Effect.Effect<unknown, ProtoError>,
  schema: S,
  operation: string,
): Effect.Effect<S["Type"], BackendError> =>
  Effect.gen(function* () {
    const json = value instanceof Binary
      ? yield* fromProto(value).pipe(Effect.mapError((e) => new BackendError({ reason: "Internal", operation, message: `the protobuf answer to ${operation} is not valid: ${e.message}` })))
      : value
    const decoded = decode(schema)(json)
    if (Result.isFailure(decoded)) return yield* new BackendError({ reason: "Internal", operation, message: `the answer to ${operation} does not match the protocol: ${decoded.failure}` })
    return decoded.success
  })

/**
 * `decodeResult` for an answer whose protobuf decoder builds the typed result itself (a
 * `forward_backward` output): protobuf answers skip the Schema check, whose cost grows with
 * every log-prob of the batch; JSON answers are checked as before.
 * @since 0.1.0 @category combinators
 */
export const decodeTypedResult = <A>(
  value: unknown,
  fromProto: (body: Binary) => Effect.Effect<A, ProtoError>,
  schema: Schema.ConstraintDecoder<unknown> & { readonly Type: A },
  operation: string,
): Effect.Effect<A, BackendError> =>
  value instanceof Binary
    ? fromProto(value).pipe(Effect.mapError((e) => new BackendError({ reason: "Internal", operation, message: `the protobuf answer to ${operation} is not valid: ${e.message}` })))
    : decodeResult(value, () => Effect.die("a JSON answer has no protobuf body"), schema, operation)

/** A 2xx answer with its body: parsed JSON, or a `Binary` for protobuf. @since 0.1.0 @category models */
export interface Exchange {
  readonly status: number
  readonly headers: Readonly<Record<string, string | undefined>>
  readonly body: unknown
}

/** Futures whose results may come as protobuf (the SDK's `PROTO_SUPPORTED_TYPES`). @since 0.1.0 @category constants */
export const PROTO_RESULTS: ReadonlySet<string> = new Set<Wire.RequestType>(["ForwardBackward", "Forward", "Sample"])

/** `Accept` of a poll for a result that may come as protobuf. @since 0.1.0 @category constants */
export const ACCEPT_PROTO = `${PROTO_CONTENT_TYPE}, application/json`

/** @since 0.1.0 @category constants */
export const REDACTED = "<redacted>"

/**
 * Removes the secret from a text: as sent, JSON-escaped and percent-encoded.
 * @since 0.1.0 @category combinators
 */
export const redactor = (secret: Option.Option<Redacted.Redacted<string>>): ((text: string) => string) => {
  if (Option.isNone(secret)) return (text) => text
  const key = Redacted.value(secret.value)
  if (key.length === 0) return (text) => text
  const forms = [...new Set([key, JSON.stringify(key).slice(1, -1), encodeURIComponent(key), key.trim()])].filter((f) => f.length >= 4)
  return (text) => forms.reduce((t, f) => t.split(f).join(REDACTED), text)
}

/**
 * Where a header value breaks HTTP's rules (a line break or another control character):
 * such a request can never be sent, so it is refused before any retry.
 * @since 0.1.0 @category combinators
 */
export const headerValueProblem = (value: string): string | undefined => {
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i)
    if (c === 10 || c === 13) return `a line break at character ${i + 1} of ${value.length}`
    if ((c < 32 && c !== 9) || c === 127) return `the control character ${c} at character ${i + 1} of ${value.length}`
    if (c > 255) return `a character outside Latin-1 at character ${i + 1} of ${value.length}`
  }
  return undefined
}

/** A body parsed as JSON, or undefined when it is not JSON. */
const parseJson = (text: string): unknown => Result.getOrUndefined(Result.try(() => JSON.parse(text) as unknown))

/** Whether an error body is a JSON object, as every refusal of a Tinker server (and of gyre's) is. */
const isJsonObject = (json: unknown): boolean => typeof json === "object" && json !== null && !Array.isArray(json)

/** The start of a body that is not JSON (a proxy's HTML page), on one line. */
const startOf = (text: string): string => {
  const t = text.replace(/\s+/g, " ").trim()
  return t.length === 0 ? "(empty body)" : t.length > 200 ? `${t.slice(0, 200)}...` : t
}

/** The `queue_state` and `queue_state_reason` of a `try_again` or 408 body, when it has them. */
export const queueStateOf = (body: unknown): { readonly queueState?: string; readonly queueStateReason?: string } => {
  if (typeof body !== "object" || body === null) return {}
  const b = body as Record<string, unknown>
  return {
    ...(typeof b["queue_state"] === "string" ? { queueState: b["queue_state"] } : {}),
    ...(typeof b["queue_state_reason"] === "string" ? { queueStateReason: b["queue_state_reason"] } : {}),
  }
}

/** The server's message in an error body, else the start of the raw text. */
const messageOf = (text: string, parsed: Option.Option<typeof Wire.ErrorBody.Type>): string => {
  const m = Option.isSome(parsed) ? (parsed.value.detail ?? parsed.value.error ?? parsed.value.message) : undefined
  if (m !== undefined) return m.length > 2000 ? `${m.slice(0, 2000)}...` : m
  const t = text.trim()
  return t.length === 0 ? "(empty body)" : t.length > 500 ? `${t.slice(0, 500)}...` : t
}

const codeOf = (cause: unknown): string | undefined => {
  for (let c: unknown = cause, depth = 0; typeof c === "object" && c !== null && depth < 4; c = (c as { cause?: unknown }).cause, depth++) {
    if ("code" in c && typeof c.code === "string") return c.code
  }
  return undefined
}

/** Node and undici codes of a request that was never sent because it is malformed. */
const UNSENDABLE = new Set(["UND_ERR_INVALID_ARG", "ERR_INVALID_CHAR", "ERR_INVALID_HTTP_TOKEN", "ERR_INVALID_URL", "ERR_INVALID_ARG_TYPE", "ERR_INVALID_ARG_VALUE"])
/** Codes of a server that cannot be reached at all. */
const UNREACHABLE = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_NONAME", "EHOSTUNREACH", "ENETUNREACH"])

/** Whether a request failed because nothing answers at the address (connection refused, no such host). @since 0.1.0 @category combinators */
export const isUnreachable = (cause: unknown): boolean => {
  const code = codeOf(cause)
  return code !== undefined && UNREACHABLE.has(code)
}

const describeCause = (cause: unknown): string => {
  if (cause instanceof Error) {
    const code = codeOf(cause)
    return code === undefined || cause.message.includes(code) ? cause.message : `${cause.message} (${code})`
  }
  return String(cause)
}

const reasonOfStatus = (status: number | undefined): BackendError["reason"] =>
  status === 400 || status === 404 || status === 413 || status === 422 ? "InvalidInput" : "Rejected"

/**
 * The failure an answer of status 300 and above stands for, from its status, headers
 * and body: its kind (`Retry.kindOfStatus`; a 400 whose body is not a JSON object is a
 * `BareBadRequest`, a 402 `BillingPaused`), the server's message or the start of the body (redacted), the
 * `Retry-After` of a 429 or 503 and the queue state of a 408.
 * @since 0.1.0 @category combinators
 */
export const failureOf = (
  status: number,
  headers: Readonly<Record<string, string | undefined>>,
  text: string,
  now: number,
  redact: (text: string) => string,
): Retry.HttpFailure => {
  const json = parseJson(text)
  if (status === 400 && !isJsonObject(json)) return new Retry.HttpFailure({ kind: "BareBadRequest", status, message: redact(startOf(text)) })
  const body = Schema.decodeUnknownOption(Wire.ErrorBody)(json)
  const issue = Option.isSome(body) ? Wire.issueOf(body.value.issue) : undefined
  return new Retry.HttpFailure({
    kind: status === 402 ? "BillingPaused" : (Retry.kindOfStatus(status) ?? "Fatal"),
    status,
    message: redact(messageOf(text, body)),
    ...(issue !== undefined ? { issue } : {}),
    retryAfterMillis: status === 429 || status === 503 ? Retry.parseRetryAfter(headers, now) : undefined,
    ...(status === 408 ? queueStateOf(json) : {}),
  })
}

/** HttpFailure -> BackendError, once retrying is over. @since 0.1.0 @category combinators */
export const toBackendError = (operation: string, f: Retry.HttpFailure): BackendError => {
  switch (f.kind) {
    case "Fatal":
    case "Expired":
      return new BackendError({
        reason: f.kind === "Expired" ? "Unavailable" : f.status === undefined ? "InvalidInput" : reasonOfStatus(f.status),
        operation,
        message: f.status === undefined ? f.message : `HTTP ${f.status}: ${f.message}`,
        ...(f.issue !== undefined ? { issue: f.issue } : {}),
      })
    case "BareBadRequest":
      return new BackendError({
        reason: "Transport",
        operation,
        message: `HTTP 400 from something between gyre and the server, not from the server (the body is not its JSON error), each time it was retried: ${f.message}`,
      })
    case "BillingPaused":
      return new BackendError({
        reason: "Rejected",
        operation,
        message: `HTTP 402: ${f.message}; the job stayed paused for billing longer than the client waits for it (the retry policy's maxBillingPause)`,
      })
    case "Transport":
      return new BackendError({ reason: "Transport", operation, message: f.message })
    case "Unreachable":
      return new BackendError({ reason: "Unavailable", operation, message: f.message })
    case "Decode":
      return new BackendError({ reason: "Internal", operation, message: f.message })
    default:
      return new BackendError({ reason: "Unavailable", operation, message: f.status === undefined ? f.message : `HTTP ${f.status}: ${f.message}` })
  }
}

/** @since 0.1.0 @category models */
export interface Transport {
  /** one exchange: a 2xx answer with its JSON (or `Binary`) body, or an HttpFailure (messages redacted); a `Binary` body goes as protobuf */
  readonly send: (method: "GET" | "POST", path: string, body: unknown, headers: Record<string, string>, timeout: Duration.Input) => Effect.Effect<Exchange, Retry.HttpFailure>
  /** removes the API key from a text */
  readonly redact: (text: string) => string
  /** a schedule that logs each retry at warning level: what is retried, why, when next, and until when (not a try_again, nor a 408 that carries a queue state) */
  readonly logged: <A>(operation: string, schedule: Schedule.Schedule<Retry.Step, Retry.HttpFailure, A>) => Schedule.Schedule<Retry.Step, Retry.HttpFailure, A>
  /** the server's base URL, as shown in messages */
  readonly where: string
}

const describeFailure = (f: Retry.HttpFailure) => `${f.status !== undefined ? `HTTP ${f.status}: ` : ""}${f.message}`

/** What the exchanges of one transport share. */
interface Context {
  readonly http: HttpClient.HttpClient
  readonly apiKey: Option.Option<Redacted.Redacted<string>>
  /** ask for protobuf results where Tinker serves them */
  readonly protobufResults: boolean
  /** the server's base URL, as shown in messages */
  readonly where: string
  /** the routes' prefix under the base URL (`/api/v1` for Tinker) */
  readonly prefix: string
  /** the base URL of the API routes */
  readonly root: string
  /** the API key's header and how its value is written */
  readonly auth: (key: string) => readonly [string, string]
  readonly redact: (text: string) => string
  /** once the server has answered, a refused connection is a restart, not a wrong address */
  readonly server: { answered: boolean }
}

/** An answer as it came: status, headers and the raw body. */
interface RawAnswer {
  readonly status: number
  readonly headers: Record<string, string | undefined>
  readonly bytes: Uint8Array
}

const withAuth = (ctx: Context, req: HttpClientRequest.HttpClientRequest) =>
  Option.match(ctx.apiKey, { onNone: () => req, onSome: (key) => HttpClientRequest.setHeader(req, ...ctx.auth(Redacted.value(key))) })

const noAnswer = (ctx: Context, path: string, cause: unknown): Retry.HttpFailure => {
  const { where } = ctx
  const code = codeOf(cause)
  const text = ctx.redact(describeCause(cause))
  if (code !== undefined && UNSENDABLE.has(code)) {
    return new Retry.HttpFailure({ kind: "Fatal", message: `the request to ${where}${ctx.prefix}${path} cannot be sent: ${text}; no retry can fix that (check the API key and header values for line breaks or control characters)` })
  }
  if (isUnreachable(cause) && !ctx.server.answered) {
    return new Retry.HttpFailure({ kind: "Unreachable", message: `nothing answers at ${where}: ${text}; check the URL (--backend / TINKER_BASE_URL) and that the server is running` })
  }
  return new Retry.HttpFailure({ kind: "Transport", message: `no answer from ${where}${ctx.prefix}${path}: ${text}` })
}

/** JSON, unless this is a poll for a result that may come as protobuf */
const acceptOf = (ctx: Context, path: string, headers: Record<string, string>) =>
  ctx.protobufResults && path === "/retrieve_future" && PROTO_RESULTS.has(headers[Wire.Headers.requestType] ?? "") ? ACCEPT_PROTO : "application/json"

/** Sends one request and reads its whole answer, whatever its status; no answer in time (or at all) is a failure. */
const exchange = (ctx: Context, method: "GET" | "POST", path: string, body: unknown, headers: Record<string, string>, timeout: Duration.Input) => {
  const url = `${ctx.root}${path}`
  let req = method === "GET" ? HttpClientRequest.get(url) : HttpClientRequest.post(url)
  req = HttpClientRequest.setHeaders(req, { accept: acceptOf(ctx, path, headers), "user-agent": USER_AGENT, ...headers })
  if (method === "POST") {
    req = body instanceof Binary ? HttpClientRequest.bodyUint8Array(req, body.bytes, PROTO_CONTENT_TYPE) : HttpClientRequest.bodyText(req, JSON.stringify(body), "application/json")
  }
  return ctx.http.execute(withAuth(ctx, req)).pipe(
    // one span per operation (Effect.fn) is enough; a span per HTTP exchange costs more than it tells
    Effect.provideService(HttpClient.TracerDisabledWhen, () => true),
    Effect.flatMap((r) => Effect.map(r.arrayBuffer, (buffer): RawAnswer => ({ status: r.status, headers: r.headers as Record<string, string | undefined>, bytes: new Uint8Array(buffer) }))),
    Effect.timeoutOrElse({
      duration: timeout,
      orElse: () =>
        Effect.fail(new Retry.HttpFailure({ kind: "Transport", message: `no answer from ${ctx.where}${ctx.prefix}${path} within ${Duration.format(Duration.fromInputUnsafe(timeout))}` })),
    }),
    Effect.catchTag("HttpClientError", (e) =>
      Effect.fail(e.reason._tag === "TransportError" ? noAnswer(ctx, path, e.reason.cause ?? e.reason.description) : noAnswer(ctx, path, new Error(e.reason._tag))),
    ),
  )
}

/** An answer's meaning: a failure for a status `Retry.ts` names, else its body as a `Binary` (protobuf) or parsed JSON. */
const exchangeOf = (ctx: Context, path: string, res: RawAnswer): Effect.Effect<Exchange, Retry.HttpFailure> =>
  Effect.gen(function* () {
    const kind = Retry.kindOfStatus(res.status)
    const text = () => new TextDecoder().decode(res.bytes)
    if (kind !== undefined) {
      const now = yield* Effect.clockWith((c) => c.currentTimeMillis)
      return yield* failureOf(res.status, res.headers, text(), Number(now), ctx.redact)
    }
    if (isProtoContentType(res.headers["content-type"])) return { status: res.status, headers: res.headers, body: new Binary(res.bytes, res.headers) }
    const parsed = Result.try(() => (res.bytes.length === 0 ? {} : (JSON.parse(text()) as unknown)))
    if (Result.isFailure(parsed)) {
      return yield* new Retry.HttpFailure({ kind: "Decode", status: res.status, message: `${path} answered ${res.status} with a body that is not JSON` })
    }
    return { status: res.status, headers: res.headers, body: parsed.success }
  })

const send = (ctx: Context): Transport["send"] => (method, path, body, headers, timeout) =>
  Effect.gen(function* () {
    const res = yield* exchange(ctx, method, path, body, headers, timeout)
    ctx.server.answered = true
    return yield* exchangeOf(ctx, path, res)
  })

const logged: Transport["logged"] = (operation, schedule) => {
  /** a billing pause is warned about at most once a minute, as the SDK does (`BILLING_EXCEPTION_LOGGING_INTERVAL_SEC`) */
  let billingWarnedAt: number | undefined = undefined
  return Schedule.tap(schedule, (meta) => {
    // a 408 with a queue state is a try_again in an error's clothes (the SDK's words); its queue state is logged when it changes
    if (meta.input.kind === "TryAgain" || (meta.input.kind === "RequestTimeout" && meta.input.queueState !== undefined)) return Effect.void
    if (meta.input.kind === "BillingPaused") {
      if (billingWarnedAt !== undefined && meta.now - billingWarnedAt < 60_000) return Effect.void
      billingWarnedAt = meta.now
    }
    return Effect.logWarning(
      `${operation}: ${describeFailure(meta.input)}; retry ${meta.attempt} in ${Duration.format(meta.output.delay)}, ` +
        `giving up at ${new Date(meta.output.giveUpAt).toISOString()} if it keeps failing`,
    )
  })
}

/** @since 0.1.0 @category constructors */
export const make = (options: {
  readonly http: HttpClient.HttpClient
  readonly base: URL
  readonly apiKey: Option.Option<Redacted.Redacted<string>>
  /** ask for protobuf results where Tinker serves them (default true) */
  readonly protobufResults?: boolean | undefined
  /** the routes' prefix (default Tinker's `/api/v1`) */
  readonly prefix?: string | undefined
  /** the API key's header and value (default Tinker's `X-API-Key: <key>`) */
  readonly auth?: ((key: string) => readonly [string, string]) | undefined
}): Transport => {
  const where = `${options.base.origin}${options.base.pathname.replace(/\/+$/, "")}`
  const ctx: Context = {
    http: options.http,
    apiKey: options.apiKey,
    protobufResults: options.protobufResults !== false,
    where,
    prefix: options.prefix ?? Wire.API_PREFIX,
    root: `${where}${options.prefix ?? Wire.API_PREFIX}`,
    auth: options.auth ?? ((key) => [Wire.Headers.apiKey, key]),
    redact: redactor(options.apiKey),
    server: { answered: false },
  }
  return { send: send(ctx), redact: ctx.redact, logged, where }
}

/**
 * The server's HTTP dispatch: from a request to a handler of the route tables and back
 * to a response.
 *
 * - Every route lies under `/api/v1/`. A download URL (`checkpoint_files/{token}`)
 *   carries its own credential, as a signed URL does; every other route but `healthz`
 *   needs the API key when the server has one.
 * - GET: the fixed routes, `samplers/{id}`, the REST reads, and the archive route (a
 *   `302` to the download URL, as Tinker answers: the SDK's `resources/weights.py`).
 * - POST: the body (at most `maxBody` bytes: beyond, a 413 naming the limit and
 *   `serve --max-body-mb`) is read as JSON, or as a protobuf `forward_backward`
 *   (`ProtoRoutes.ts`: handled by the JSON route it names); submissions go through the
 *   idempotency cache and, with `X-Gyre-Wait-Ms`, carry their result when it is ready;
 *   `retrieve_future` answers protobuf when `Accept` asks for it.
 * - A handler's `Reject` is its status with `{detail}`; a defect is a 500 with the cause
 *   logged.
 *
 * @since 0.1.0
 */
import { ByteSize, type Duration, Duration as D, Effect, Option, Redacted, Result } from "effect"
import { HttpIncomingMessage, type HttpServerError, HttpServerRequest, HttpServerResponse } from "effect/http"
import { timingSafeEqual } from "node:crypto"
import * as PlatformHttpServer from "../../../platform/HttpServer.ts"
import * as Archives from "./Archives.ts"
import type { FutureTable } from "./Futures.ts"
import type * as Idempotency from "./Idempotency.ts"
import * as NewerFields from "./NewerFields.ts"
import * as ProtoRoutes from "./ProtoRoutes.ts"
import { bodyLimitOf } from "./ServerOptions.ts"
import { bad, decodeOr400, Reject, type Reply } from "./Requests.ts"
import type { Handler } from "./TrainingRoutes.ts"
import * as Wire from "../wire/Wire.ts"

/** What the dispatch routes to. @since 0.1.0 @category models */
export interface Context {
  readonly maxBody: number
  /** how long `retrieve_future` (and a submission's `X-Gyre-Wait-Ms`) may hold */
  readonly pollWait: Duration.Input
  readonly apiKey: Redacted.Redacted<string> | undefined
  readonly post: Readonly<Record<string, Handler>>
  readonly get: Readonly<Record<string, () => Effect.Effect<unknown, Reject>>>
  readonly archives: Archives.Archives
  /** the REST reads: an answer for a GET route of theirs, none otherwise */
  readonly rest: (name: string, query: Readonly<Record<string, string>>) => Option.Option<Effect.Effect<unknown, Reject>>
  readonly samplerInfo: (id: string) => Effect.Effect<unknown, Reject>
  readonly idempotency: ReturnType<typeof Idempotency.make>
  readonly futures: FutureTable
  readonly now: Effect.Effect<number>
}

/** Whether a given secret equals the expected one, in time that does not depend on where they differ. @since 0.1.0 @category predicates */
export const sameKey = (given: string, expected: string) => {
  const a = Buffer.from(given)
  const b = Buffer.from(expected)
  return a.length === b.length && timingSafeEqual(a, b)
}

/** A refusal as the answer: its status, `detail` (and `issue` for a refused datum), and `Retry-After` when it has one. */
const rejected = (r: Reject): Reply => ({
  status: r.status,
  body: { detail: r.message, ...(r.issue !== undefined ? { issue: r.issue } : {}) },
  ...(r.retryAfter !== undefined ? { headers: { "retry-after": String(r.retryAfter) } } : {}),
})

const toReply = (e: Effect.Effect<unknown, Reject>): Effect.Effect<Reply> =>
  e.pipe(
    Effect.map((body): Reply => ({ status: 200, body })),
    Effect.catchTag("Reject", (r) => Effect.succeed(rejected(r))),
  )

/** A reply as the HTTP response: a file, raw bytes, or JSON. */
const toResponse = (reply: Reply) => {
  if (reply.file !== undefined) {
    return HttpServerResponse.stream(reply.file.stream, {
      status: reply.status,
      contentType: reply.file.contentType ?? "application/octet-stream",
      contentLength: reply.file.size,
      headers: { "content-disposition": `attachment; filename="${reply.file.filename}"` },
    })
  }
  const headers = reply.headers !== undefined ? { headers: reply.headers } : {}
  if (reply.raw !== undefined) return HttpServerResponse.uint8Array(reply.raw.bytes, { status: reply.status, contentType: reply.raw.contentType, ...headers })
  return HttpServerResponse.jsonUnsafe(reply.body, { status: reply.status, ...headers })
}

const bodyError = (ctx: Context) => (e: HttpServerError.HttpServerError) =>
  e.reason._tag === "RequestParseError" && e.reason.reason === "BodyTooLarge"
    ? new Reject({ status: 413, message: PlatformHttpServer.tooLargeMessage(bodyLimitOf(ctx.maxBody), undefined) })
    : bad("the body could not be read")

/** Bodies longer than this get a turn for other requests before they are parsed. */
const LARGE_BODY = 2 ** 20

/** A request body of `endpoint`: JSON, or a protobuf `forward_backward` read as the JSON route that handles it (`name`). */
const readBody = (ctx: Context, req: HttpServerRequest.HttpServerRequest, endpoint: string): Effect.Effect<{ readonly text: string; readonly value: unknown; readonly name?: string }, Reject> =>
  Effect.gen(function* () {
    const length = Number(req.headers["content-length"] ?? "0")
    if (length > ctx.maxBody) return yield* new Reject({ status: 413, message: PlatformHttpServer.tooLargeMessage(bodyLimitOf(ctx.maxBody), length) })
    const limit = Effect.provideService(HttpIncomingMessage.MaxBodySize, ByteSize.bytes(ctx.maxBody))
    if (ProtoRoutes.isProtoRequest(req.headers)) {
      if (endpoint !== ProtoRoutes.PROTO_ROUTE) return yield* ProtoRoutes.refuseElsewhere(endpoint)
      const bytes = yield* req.arrayBuffer.pipe(limit, Effect.mapError(bodyError(ctx)))
      return yield* ProtoRoutes.route(new Uint8Array(bytes), req.headers["content-encoding"])
    }
    const text = yield* req.text.pipe(limit, Effect.mapError(bodyError(ctx)))
    if (text.trim() === "") return { text, value: {} as unknown }
    // a large body is parsed in one piece: let the requests that came in meanwhile go first
    if (text.length > LARGE_BODY) yield* PlatformHttpServer.yieldToOthers
    const parsed = Result.try(() => JSON.parse(text) as unknown)
    if (Result.isFailure(parsed)) return yield* bad(`the body is not valid JSON: ${parsed.failure instanceof Error ? parsed.failure.message : String(parsed.failure)}`)
    return { text, value: parsed.success }
  })

/** With `X-Gyre-Wait-Ms`: holds a submission's answer until its future is done (or the wait ends) and puts the outcome in it. */
const withResult = (ctx: Context, reply: Reply, waitMillis: number): Effect.Effect<Reply> =>
  Effect.gen(function* () {
    const b = reply.body
    if (waitMillis <= 0 || reply.status !== 200 || typeof b !== "object" || b === null || !("request_id" in b) || typeof b.request_id !== "string") return reply
    const done = yield* ctx.futures.await(b.request_id, D.millis(waitMillis)).pipe(Effect.orElseSucceed(() => Option.none<Reply>()))
    return Option.isSome(done) ? { status: 200, body: { ...b, result: done.value.body } } : reply
  })

const authorized = (ctx: Context, req: HttpServerRequest.HttpServerRequest) =>
  ctx.apiKey === undefined || sameKey(String(req.headers[Wire.Headers.apiKey] ?? ""), Redacted.value(ctx.apiKey))

/** The table's own entry for `name` (never an `Object.prototype` member such as `constructor` or `toString`). */
const entry = <A>(table: Readonly<Record<string, A>>, name: string): A | undefined => (Object.hasOwn(table, name) ? table[name] : undefined)

const getRoute = (ctx: Context, req: HttpServerRequest.HttpServerRequest, name: string, path: string, query: URLSearchParams): Effect.Effect<Reply> =>
  Effect.gen(function* () {
    const g = entry(ctx.get, name)
    if (g !== undefined) return yield* toReply(g())
    if (name.startsWith("samplers/")) {
      const id = Result.try(() => decodeURIComponent(name.slice("samplers/".length)))
      if (Result.isFailure(id)) return { status: 400, body: { detail: "the sampler id in the path is not valid percent-encoding" } }
      return yield* toReply(ctx.samplerInfo(id.success))
    }
    const restGet = ctx.rest(name, Object.fromEntries(query))
    if (Option.isSome(restGet)) return yield* toReply(restGet.value)
    const [, modelId, checkpointId] = /^training_runs\/([^/]+)\/checkpoints\/(.+)\/archive$/.exec(name) ?? []
    if (modelId !== undefined && checkpointId !== undefined) {
      const host = req.headers["host"]
      const origin = typeof host === "string" && /^[A-Za-z0-9.:[\]-]+$/.test(host) ? `http://${host}` : ""
      return yield* ctx.archives.archive(modelId, checkpointId, origin).pipe(
        Effect.map((a): Reply => ({ status: 302, body: { url: a.url, expires: a.expires.toISOString() }, headers: { location: a.url, expires: a.expires.toUTCString() } })),
        Effect.catchTag("Reject", (r) => Effect.succeed(rejected(r))),
      )
    }
    return { status: entry(ctx.post, name) !== undefined ? 405 : 404, body: { detail: `no endpoint GET ${path.slice(0, 200)}` } }
  })

const postRoute = (ctx: Context, req: HttpServerRequest.HttpServerRequest, name: string, path: string): Effect.Effect<Reply> =>
  Effect.gen(function* () {
    // `sessions/{id}/finish` carries its session in the path
    const finishing = /^sessions\/([^/]+)\/finish$/.exec(name)?.[1]
    const handler = finishing !== undefined ? entry(ctx.post, "session_finish") : entry(ctx.post, name)
    const newer = entry(NewerFields.ROUTES, name)
    if (handler === undefined && newer !== undefined) return { status: 404, body: { detail: `no endpoint POST ${path.slice(0, 200)}: ${newer}` } }
    if (handler === undefined) return { status: entry(ctx.get, name) !== undefined ? 405 : 404, body: { detail: `no endpoint POST ${path.slice(0, 200)}` } }
    const body = yield* readBody(ctx, req, name).pipe(Effect.result)
    if (Result.isFailure(body)) return rejected(body.failure)
    const routed = body.success.name === undefined ? handler : (entry(ctx.post, body.success.name) ?? handler)
    const wait = yield* decodeOr400(Wire.WaitHeader, "headers")({ [Wire.Headers.waitMillis]: req.headers[Wire.Headers.waitMillis] }).pipe(Effect.result)
    if (Result.isFailure(wait)) return rejected(wait.failure)
    const waitMillis = Math.min(wait.success[Wire.Headers.waitMillis] ?? 0, D.toMillis(D.fromInputUnsafe(ctx.pollWait)))
    const value = finishing !== undefined && typeof body.success.value === "object" && body.success.value !== null ? { ...body.success.value, session_id: decodeURIComponent(finishing) } : body.success.value
    const run = toReply(routed(value, req.headers))
    if (name === "retrieve_future") {
      const reply = yield* run
      return ProtoRoutes.acceptsProto(req.headers["accept"]) ? yield* ProtoRoutes.encodeResult(reply) : reply
    }
    // a heartbeat or a batched poll changes nothing: no idempotency record
    const reply = name === "session_heartbeat" || name === "retrieve_futures" ? yield* run : yield* ctx.idempotency.run(req.headers[Wire.Headers.idempotencyKey], body.success.text, run)
    return yield* withResult(ctx, reply, waitMillis)
  })

const route = (ctx: Context, req: HttpServerRequest.HttpServerRequest, path: string, query: URLSearchParams): Effect.Effect<Reply> => {
  if (!path.startsWith(`${Wire.API_PREFIX}/`)) return Effect.succeed({ status: 404, body: { detail: `no endpoint ${req.method} ${path.slice(0, 200)}` } })
  const name = path.slice(Wire.API_PREFIX.length + 1)
  // a download URL carries its own credential (the token), as a signed URL does
  if (req.method === "GET" && name.startsWith(`${Archives.FILES_ROUTE}/`)) {
    return ctx.archives.download(name.slice(Archives.FILES_ROUTE.length + 1)).pipe(
      Effect.map((file): Reply => ({ status: 200, body: undefined, file })),
      Effect.catchTag("Reject", (r) => Effect.succeed(rejected(r))),
    )
  }
  if (name !== "healthz" && !authorized(ctx, req)) return Effect.succeed({ status: 401, body: { detail: "missing or wrong X-API-Key" } })
  if (req.method === "GET") return getRoute(ctx, req, name, path, query)
  if (req.method !== "POST") return Effect.succeed({ status: 405, body: { detail: `${req.method} is not allowed on ${path.slice(0, 200)}` } })
  return postRoute(ctx, req, name, path)
}

/** The dispatch over `ctx`: the HTTP app, and how many requests it has answered. @since 0.1.0 @category constructors */
export const make = (ctx: Context) => {
  let requests = 0
  const app = Effect.gen(function* () {
    const req = yield* HttpServerRequest.HttpServerRequest
    const started = yield* ctx.now
    requests++
    const parsedUrl = Result.try(() => new URL(req.url, "http://localhost"))
    const path = Result.isSuccess(parsedUrl) ? parsedUrl.success.pathname : ""
    const reply: Reply = yield* (Result.isFailure(parsedUrl) ? Effect.succeed<Reply>({ status: 400, body: { detail: "the request URL does not parse" } }) : route(ctx, req, path, parsedUrl.success.searchParams)).pipe(
      Effect.catchCause((cause) => Effect.as(Effect.logError(`${req.method} ${path.slice(0, 200)} failed`, cause), { status: 500, body: { detail: "internal error" } } as Reply)),
    )
    yield* Effect.logDebug(`${req.method} ${path.slice(0, 200)} ${reply.status} (${(yield* ctx.now) - started} ms)`)
    return toResponse(reply)
  })
  return { app, requests: () => requests }
}

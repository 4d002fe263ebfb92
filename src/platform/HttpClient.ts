/**
 * An `HttpClient` on undici 7 (Node 20 and later): one `Agent` per layer, so connections
 * to a server are kept alive and reused between requests, and destroyed when the layer's
 * scope closes. Time limits are left to the caller's Effect (`Effect.timeout` and the
 * like): undici's own header timeout is set to an hour and its body timeout is off, so
 * a long poll is never cut short underneath. A request that fails before any answer
 * keeps undici's error as the cause, with its `code` (`ECONNREFUSED`,
 * `UND_ERR_INVALID_ARG`, ...).
 *
 * @since 0.1.0
 */
import { Readable } from "node:stream"
import { Effect, Layer, Stream } from "effect"
import { HttpClient, HttpClientError, type HttpClientRequest, HttpClientResponse } from "effect/http"
import { Agent, type Dispatcher } from "undici"

/** What undici is told to wait for a response's headers: long enough never to act before the caller's own timeout. */
const HEADERS_TIMEOUT_MS = 60 * 60 * 1000

/** Statuses whose response has no body (a web `Response` refuses one). */
const NULL_BODY = new Set([101, 103, 204, 205, 304])

const transportError = (request: HttpClientRequest.HttpClientRequest, cause: unknown, description?: string) =>
  new HttpClientError.HttpClientError({ reason: new HttpClientError.TransportError({ request, cause, ...(description !== undefined ? { description } : {}) }) })

const bodyOf = (request: HttpClientRequest.HttpClientRequest): Effect.Effect<Dispatcher.DispatchOptions["body"], HttpClientError.HttpClientError> => {
  const body = request.body
  switch (body._tag) {
    case "Empty":
      return Effect.succeed(null)
    case "Uint8Array":
      return Effect.succeed(body.body)
    case "Raw":
      return Effect.succeed(body.body as Dispatcher.DispatchOptions["body"])
    case "Stream":
      return Effect.map(Stream.toAsyncIterableEffect(body.stream), (iterable) => Readable.from(iterable))
    case "FormData":
      return Effect.fail(transportError(request, undefined, "a multipart (FormData) body is not supported by gyre's HTTP client; send JSON or bytes"))
  }
}

const toWebHeaders = (headers: Record<string, string | Array<string> | undefined>) => {
  const out = new globalThis.Headers()
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined) continue
    for (const v of Array.isArray(value) ? value : [value]) out.append(name, v)
  }
  return out
}

/**
 * An `HttpClient` that sends through `agent`.
 * @since 0.1.0 @category constructors
 */
export const make = (agent: Dispatcher): HttpClient.HttpClient =>
  HttpClient.make((request, url, signal) =>
    Effect.gen(function* () {
      const body = yield* bodyOf(request)
      const answer = yield* Effect.tryPromise({
        try: () =>
          agent.request({
            origin: url.origin,
            path: `${url.pathname}${url.search}`,
            method: request.method as Dispatcher.HttpMethod,
            headers: request.headers as Record<string, string>,
            body,
            signal,
            headersTimeout: HEADERS_TIMEOUT_MS,
            bodyTimeout: 0,
          }),
        catch: (cause) => transportError(request, cause),
      })
      const empty = NULL_BODY.has(answer.statusCode) || request.method === "HEAD"
      if (empty) answer.body.resume()
      const web = yield* Effect.try({
        try: () =>
          new globalThis.Response(empty ? null : (Readable.toWeb(answer.body) as ReadableStream<Uint8Array>), {
            status: answer.statusCode,
            headers: toWebHeaders(answer.headers),
          }),
        catch: (cause) => {
          answer.body.destroy()
          return transportError(request, cause, `the server answered with status ${answer.statusCode}, which cannot be read as an HTTP response`)
        },
      })
      return HttpClientResponse.fromWeb(request, web)
    }),
  )

/**
 * `HttpClient` on a fresh undici `Agent`, closed with the layer.
 *
 * @example
 * ```ts
 * import * as Platform from "./src/platform/index.ts"
 * const client = Platform.HttpClient.layer
 * // => Layer<HttpClient>
 * ```
 * @since 0.1.0 @category layers
 */
export const layer: Layer.Layer<HttpClient.HttpClient> = Layer.effect(HttpClient.HttpClient)(
  Effect.map(
    Effect.acquireRelease(
      Effect.sync(() => new Agent()),
      (agent) => Effect.promise(() => agent.destroy()),
    ),
    make,
  ),
)

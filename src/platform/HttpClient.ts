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

/** Drops an answer's body unread (undici reports that as an abort, which no one listens for). */
const discard = (answer: Dispatcher.ResponseData) => {
  answer.body.on("error", () => {})
  answer.body.destroy()
}

/**
 * What effect's response reads of a web `Response` (status, headers, url, body,
 * `arrayBuffer`, `formData`), served from undici's answer: the body is read straight from
 * undici's stream into one buffer, and only a caller that streams it gets a web stream. A
 * web `Response` and a web stream per exchange cost more CPU than the exchange itself.
 */
class UndiciAnswer {
  readonly status: number
  readonly headers: Record<string, string | Array<string>>
  readonly url = undefined
  private readonly answer: Dispatcher.ResponseData
  private readonly empty: boolean
  private web: ReadableStream<Uint8Array> | null | undefined
  constructor(answer: Dispatcher.ResponseData, empty: boolean) {
    this.answer = answer
    this.empty = empty
    this.status = answer.statusCode
    const headers: Record<string, string | Array<string>> = {}
    for (const [name, value] of Object.entries(answer.headers)) if (value !== undefined) headers[name] = value
    // as web `Headers` do: each Set-Cookie apart (not enumerable, so it is no header)
    const cookies = headers["set-cookie"]
    Object.defineProperty(headers, "getSetCookie", { value: () => (cookies === undefined ? [] : Array.isArray(cookies) ? cookies : [cookies]), enumerable: false })
    this.headers = headers
  }
  get body(): ReadableStream<Uint8Array> | null {
    if (this.web === undefined) this.web = this.empty ? null : (Readable.toWeb(this.answer.body) as ReadableStream<Uint8Array>)
    return this.web
  }
  arrayBuffer(): Promise<ArrayBuffer> {
    return this.empty ? Promise.resolve(new ArrayBuffer(0)) : this.answer.body.arrayBuffer()
  }
  formData(): Promise<never> {
    discard(this.answer)
    return Promise.reject(new TypeError("gyre's HTTP client does not read multipart (FormData) answers"))
  }
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
      // what a web `Response` refuses (an informational or out-of-range status) is no answer to read
      if (answer.statusCode < 200 || answer.statusCode > 599) {
        discard(answer)
        return yield* transportError(request, undefined, `the server answered with status ${answer.statusCode}, which cannot be read as an HTTP response`)
      }
      const empty = NULL_BODY.has(answer.statusCode) || request.method === "HEAD"
      if (empty) answer.body.resume()
      // effect reads only what `UndiciAnswer` serves of a web `Response`
      return HttpClientResponse.fromWeb(request, new UndiciAnswer(answer, empty) as unknown as Response)
    }),
  )

/** How the layer's `Agent` connects. @since 0.1.0 @category models */
export interface Options {
  /**
   * the most connections kept to one origin; requests beyond them wait for a free one
   * (default: none, one connection per request in flight)
   */
  readonly connections?: number | undefined
}

/**
 * `HttpClient` on a fresh undici `Agent` with `options`, closed with the layer.
 * @since 0.1.0 @category layers
 */
export const layerWith = (options: Options = {}): Layer.Layer<HttpClient.HttpClient> =>
  Layer.effect(HttpClient.HttpClient)(
    Effect.map(
      Effect.acquireRelease(
        Effect.sync(() => new Agent(options.connections !== undefined ? { connections: options.connections } : {})),
        (agent) => Effect.promise(() => agent.destroy()),
      ),
      make,
    ),
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
export const layer: Layer.Layer<HttpClient.HttpClient> = layerWith()

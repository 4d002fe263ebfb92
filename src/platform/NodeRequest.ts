/**
 * Effect's `HttpServerRequest` read straight from a node:http `IncomingMessage`: method,
 * URL, headers and body with no web `Request` (URL, Headers, ReadableStream) built in
 * between, which on an endpoint answering thousands of small requests a step was a large
 * share of its CPU. The body is read once: as bytes (`text`, `json`, `arrayBuffer`) or as
 * a stream, within the server's body limit and Effect's `MaxBodySize`.
 *
 * @since 0.1.0
 */
import type * as Http from "node:http"
import { Effect, Inspectable, Option, Stream } from "effect"
import { Cookies, Headers, HttpIncomingMessage, HttpServerError, HttpServerRequest, Multipart, UrlParams } from "effect/http"

const parseError = (request: HttpServerRequest.HttpServerRequest, reason: "Parse" | "BodyTooLarge", cause?: unknown, description?: string) =>
  new HttpServerError.HttpServerError({ reason: new HttpServerError.RequestParseError({ request, reason, cause, description }) })

/**
 * A request's body, read at most once. A read that stops early (a body over a limit, an
 * interrupted request, an answer sent before the body was read) drains the rest instead
 * of destroying the socket, so the client still gets the answer and the connection stays
 * usable.
 * @since 0.1.0 @category models
 */
export class Body {
  private started = false
  /** set once the app's answer is being written (a stream may still be going after the request's fiber ends) */
  answered = false
  constructor(
    readonly req: Http.IncomingMessage,
    readonly res: Http.ServerResponse,
    /** the server's limit: past it, `tooLarge` answers 413 */
    readonly maxBytes: number,
    readonly tooLarge: () => void,
  ) {}

  private start() {
    this.started = true
    this.res.once("finish", () => {
      if (!this.req.complete) this.drain()
    })
  }

  private drain() {
    this.req.removeAllListeners("data")
    this.req.resume()
  }

  /** The whole body, within the server's limit and `limit` (Effect's `MaxBodySize`). */
  bytes(request: HttpServerRequest.HttpServerRequest, limit: number): Effect.Effect<Uint8Array, HttpServerError.HttpServerError> {
    return Effect.callback<Uint8Array, HttpServerError.HttpServerError>((resume) => {
      const req = this.req
      const header = req.headers["content-length"]
      const declared = header !== undefined && /^\d+$/.test(header) ? Number(header) : undefined
      // refused before it is read; node drains an unread body once the answer is sent
      if (declared !== undefined && declared > limit) return resume(Effect.fail(parseError(request, "BodyTooLarge")))
      if (this.started) return resume(Effect.fail(parseError(request, "Parse", undefined, "the request body was read already")))
      this.start()
      const chunks: Array<Buffer> = []
      let read = 0
      const stop = () => {
        req.off("data", onData)
        req.off("end", onEnd)
        req.off("error", onError)
      }
      const onData = (chunk: Buffer) => {
        read += chunk.byteLength
        if (read <= limit && read <= this.maxBytes) return void chunks.push(chunk)
        stop()
        this.drain()
        // over the server's limit: answered 413 now; over MaxBodySize: the app decides
        if (read > this.maxBytes) this.tooLarge()
        resume(Effect.fail(parseError(request, "BodyTooLarge")))
      }
      const onEnd = () => {
        stop()
        // a copy that owns its ArrayBuffer (node pools small buffers)
        const bytes = new Uint8Array(read)
        let at = 0
        for (const chunk of chunks) {
          bytes.set(chunk, at)
          at += chunk.byteLength
        }
        resume(Effect.succeed(bytes))
      }
      const onError = (cause: Error) => {
        stop()
        resume(Effect.fail(parseError(request, "Parse", cause)))
      }
      req.on("data", onData)
      req.on("end", onEnd)
      req.on("error", onError)
      return Effect.sync(() => {
        stop()
        this.drain()
      })
    })
  }

  /** The body as a web stream, read only when the app reads it; cancelling it drains the rest. */
  web(): ReadableStream<Uint8Array> {
    const req = this.req
    let controller: ReadableStreamDefaultController<Uint8Array> | undefined
    let read = 0
    const onData = (chunk: Buffer) => {
      read += chunk.byteLength
      if (read > this.maxBytes) {
        // a chunked body past the limit: refused now, the rest drained
        controller?.error(new Error(`the request body is larger than ${this.maxBytes} bytes`))
        cancel()
        return this.tooLarge()
      }
      controller?.enqueue(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength))
      if ((controller?.desiredSize ?? 0) <= 0) req.pause()
    }
    const cancel = () => {
      controller = undefined
      this.drain()
    }
    return new globalThis.ReadableStream<Uint8Array>({
      pull: (c) => {
        if (controller === undefined && this.started) return c.error(new Error("the request body was read already"))
        if (controller === undefined) {
          this.start()
          controller = c
          req.on("data", onData)
          req.once("end", () => controller?.close())
          req.once("error", (e) => controller?.error(e))
        }
        req.resume()
      },
      cancel,
    })
  }
}

const removeHost = (url: string) => {
  if (url[0] === "/") return url
  const index = url.indexOf("/", url.indexOf("//") + 2)
  return index === -1 ? "/" : url.slice(index)
}

const textDecoder = new TextDecoder()

/**
 * The `HttpServerRequest` of a node:http request; `source` is the `IncomingMessage`.
 * @since 0.1.0 @category models
 */
export class NodeRequest extends Inspectable.Class implements HttpServerRequest.HttpServerRequest {
  readonly [HttpServerRequest.TypeId] = HttpServerRequest.TypeId
  readonly [HttpIncomingMessage.TypeId] = HttpIncomingMessage.TypeId
  private cachedBytes: Effect.Effect<Uint8Array, HttpServerError.HttpServerError> | undefined
  private cachedCookies: Record<string, string> | undefined

  constructor(
    readonly source: Http.IncomingMessage,
    readonly body: Body,
    readonly url: string = removeHost(source.url ?? "/"),
    private headersOverride?: Headers.Headers,
    private readonly remoteAddressOverride?: Option.Option<string>,
    private readonly peerAddressOverride?: Option.Option<string>,
    readonly protocol: "http" | "https" | undefined = undefined,
  ) {
    super()
  }

  toJSON(): unknown {
    return HttpIncomingMessage.inspect(this, { _id: "HttpServerRequest", method: this.method, url: this.originalUrl })
  }

  modify(options: {
    readonly url?: string
    readonly headers?: Headers.Headers
    readonly remoteAddress?: Option.Option<string>
    readonly peerAddress?: Option.Option<string>
    readonly protocol?: "http" | "https"
  }): HttpServerRequest.HttpServerRequest {
    const remote = "remoteAddress" in options ? options.remoteAddress : this.remoteAddressOverride
    const request = new NodeRequest(this.source, this.body, options.url ?? this.url, options.headers ?? this.headersOverride, remote, options.peerAddress ?? this.peerAddressOverride, options.protocol ?? this.protocol)
    // one body: a copy reads what the original read
    request.cachedBytes = this.cachedBytes
    return request
  }

  get method(): string {
    return (this.source.method ?? "GET").toUpperCase()
  }
  get originalUrl(): string {
    return this.source.url ?? "/"
  }
  get remoteAddress(): Option.Option<string> {
    return this.remoteAddressOverride ?? Option.fromUndefinedOr(this.source.socket.remoteAddress)
  }
  get peerAddress(): Option.Option<string> {
    return this.peerAddressOverride ?? this.remoteAddress
  }
  get headers(): Headers.Headers {
    return (this.headersOverride ??= Headers.fromInput(this.source.headers))
  }
  get cookies(): Record<string, string> {
    return (this.cachedCookies ??= Cookies.parseHeader(this.headers.cookie ?? ""))
  }

  private get bytes(): Effect.Effect<Uint8Array, HttpServerError.HttpServerError> {
    return (this.cachedBytes ??= Effect.runSync(
      Effect.cached(Effect.withFiber((fiber) => this.body.bytes(this, Number(fiber.getRef(HttpIncomingMessage.MaxBodySize) ?? Infinity)))),
    ))
  }
  get arrayBuffer(): Effect.Effect<ArrayBuffer, HttpServerError.HttpServerError> {
    return Effect.map(this.bytes, (bytes) => bytes.buffer as ArrayBuffer)
  }
  get text(): Effect.Effect<string, HttpServerError.HttpServerError> {
    return Effect.map(this.bytes, (bytes) => textDecoder.decode(bytes))
  }
  get json(): Effect.Effect<any, HttpServerError.HttpServerError> {
    return Effect.flatMap(this.text, (text) => Effect.try({ try: () => JSON.parse(text) as unknown, catch: (cause) => parseError(this, "Parse", cause) }))
  }
  get urlParamsBody(): Effect.Effect<UrlParams.UrlParams, HttpServerError.HttpServerError> {
    return Effect.flatMap(this.text, (text) => Effect.try({ try: () => UrlParams.fromInput(new URLSearchParams(text)), catch: (cause) => parseError(this, "Parse", cause) }))
  }
  get stream(): Stream.Stream<Uint8Array, HttpServerError.HttpServerError> {
    return Stream.fromReadableStream({ evaluate: () => this.body.web(), onError: (cause) => parseError(this, "Parse", cause) })
  }
  get multipartStream(): Stream.Stream<Multipart.Part, Multipart.MultipartError> {
    return Stream.pipeThroughChannel(
      Stream.mapError(this.stream, (cause) => Multipart.MultipartError.fromReason("InternalError", cause)),
      Multipart.makeChannel(this.headers),
    )
  }
  get multipart() {
    return Multipart.toPersisted(this.multipartStream)
  }
  get upgrade(): Effect.Effect<never, HttpServerError.HttpServerError> {
    return this.upgradeWith({})
  }
  upgradeWith(_options: { readonly headers?: Headers.Input | undefined }): Effect.Effect<never, HttpServerError.HttpServerError> {
    return Effect.fail(parseError(this, "Parse", undefined, "this server does not upgrade connections"))
  }
}

/**
 * Effect's `HttpServer` on `node:http`. Each request becomes effect's `HttpServerRequest`
 * read straight from node's `IncomingMessage` (`NodeRequest.ts`) and runs the app through
 * `HttpEffect.toHandled`, so per-request scopes, middleware and error answers are Effect's
 * own; an answer of bytes (or none) is written to node's response at once, a streamed one
 * through a web `Response`, chunk by chunk with back-pressure. No web `Request` or
 * `Response` is made for the common case: on an endpoint answering thousands of small
 * requests a step they were a large share of its CPU. A client that disconnects interrupts
 * its request. When the scope closes the server stops accepting, lets requests in flight
 * finish for up to `gracefulShutdown`, then interrupts the rest and closes every connection.
 *
 * Connections: a listen backlog far above Node's 511, so that a thousand agents that
 * connect at once are all queued, and a keep-alive timeout (5 minutes) far above Node's
 * 5 s: a client whose event loop was busy past the server's timeout would otherwise send
 * its next request on a socket the server has just closed (`ECONNRESET`).
 *
 * Bodies: with a `bodyLimit`, a body over it is answered 413 naming the limit and how to
 * raise it, before it is read (by its `Content-Length`) or as soon as a chunked body
 * passes it; the rest is drained, so the connection stays usable.
 *
 * @since 0.1.0
 */
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import { Readable } from "node:stream"
import { pipeline } from "node:stream/promises"
import { Context, Duration, Effect, type Fiber, Result, type Scope } from "effect"
import { Cookies, HttpEffect, type HttpMiddleware, HttpServer, HttpServerError, HttpServerRequest, HttpServerResponse } from "effect/http"
import * as NetAddress from "effect/net/NetAddress"
import { Body, NodeRequest } from "./NodeRequest.ts"

/** @since 0.1.0 @category models */
export interface Options {
  /** the port; 0 (the default) picks a free one */
  readonly port?: number | undefined
  /** the interface to listen on (default 127.0.0.1) */
  readonly host?: string | undefined
  /** how long requests in flight may run on after the scope closes (default 20 s) */
  readonly gracefulShutdown?: Duration.Input | undefined
  /** connections the kernel queues before they are accepted (default 8192; the kernel caps it at `net.core.somaxconn`) */
  readonly backlog?: number | undefined
  /** how long an idle keep-alive connection stays open (default 5 minutes): longer than any client's gap between requests */
  readonly keepAliveTimeout?: Duration.Input | undefined
  /** the largest request body, and what the 413 beyond it says */
  readonly bodyLimit?: BodyLimit | undefined
}

/** @since 0.1.0 @category models */
export interface BodyLimit {
  /** the largest body accepted, in bytes */
  readonly maxBytes: number
  /** how a client raises the limit (a flag or a setting), named in the 413 */
  readonly raiseWith: string
  /** the 413's JSON body for its message (default `{detail: message}`) */
  readonly answer?: ((message: string) => unknown) | undefined
}

/** @since 0.1.0 @category constants */
export const DEFAULT_BACKLOG = 8192
/** @since 0.1.0 @category constants */
export const DEFAULT_KEEP_ALIVE: Duration.Duration = Duration.minutes(5)

const sizeOf = (bytes: number) => (bytes >= 2 ** 20 && bytes % 2 ** 20 === 0 ? `${bytes / 2 ** 20} MiB` : `${bytes} bytes`)

/**
 * Lets the event loop answer other requests (their sockets are read in its I/O phase)
 * before the caller goes on: a server that handles a large body in parts calls it between
 * them, so that a health check waits for one part, not for the whole body.
 * @since 0.1.0 @category combinators
 */
export const yieldToOthers: Effect.Effect<void> = Effect.callback<void>((resume) => {
  const handle = setImmediate(() => resume(Effect.void))
  return Effect.sync(() => clearImmediate(handle))
})

/** The 413's message: the body's size when known, the limit, and how to raise it. @since 0.1.0 @category combinators */
export const tooLargeMessage = (limit: BodyLimit, size: number | undefined) =>
  `the request body ${size === undefined ? "is larger than" : `has ${size} bytes, over`} this server's limit of ${sizeOf(limit.maxBytes)}: ` +
  `send less per request, or raise the limit with ${limit.raiseWith}`

/** Writes `response` to `res` when its body is bytes or empty, and `false` when it is one to stream. */
const writeDirect = (response: HttpServerResponse.HttpServerResponse, res: Http.ServerResponse, withoutBody: boolean): boolean => {
  const body = response.body
  const omits = HttpServerResponse.omitsBody(response, withoutBody)
  if (!omits && body._tag !== "Empty" && body._tag !== "Uint8Array") return false
  let headers: Record<string, string | Array<string>> = response.headers
  if (!Cookies.isEmpty(response.cookies)) headers = { ...headers, "set-cookie": Cookies.toSetCookieHeaders(response.cookies) }
  if (response.status === 204 || response.status === 205) {
    const { "content-length": _, ...rest } = headers
    headers = rest
  }
  if (omits && body._tag === "Raw" && body.body instanceof globalThis.ReadableStream) body.body.cancel().catch(() => undefined)
  res.writeHead(response.status, response.statusText ?? Http.STATUS_CODES[response.status], headers)
  if (omits || body._tag !== "Uint8Array") res.end()
  else res.end(body.text ?? body.body)
  return true
}

/** Writes a web `Response` (a streamed body) to the node:http response, with back-pressure. */
const writeWebResponse = async (web: Response, res: Http.ServerResponse) => {
  const headers: Record<string, string | Array<string>> = {}
  web.headers.forEach((value, name) => {
    if (name !== "set-cookie") headers[name] = value
  })
  const cookies = web.headers.getSetCookie()
  if (cookies.length > 0) headers["set-cookie"] = cookies
  if (web.body === null) {
    res.writeHead(web.status, headers)
    res.end()
  } else if (web.headers.has("content-length")) {
    const bytes = new Uint8Array(await web.arrayBuffer())
    res.writeHead(web.status, headers)
    res.end(bytes)
  } else {
    res.writeHead(web.status, headers)
    await pipeline(Readable.fromWeb(web.body as import("node:stream/web").ReadableStream<Uint8Array>), res)
  }
}

const answer = (res: Http.ServerResponse, status: number, detail: string, body: unknown = { detail }) => {
  if (res.headersSent) return res.destroy()
  res.writeHead(status, { "content-type": "application/json" })
  res.end(JSON.stringify(body))
}

type App = Effect.Effect<HttpServerResponse.HttpServerResponse, unknown, HttpServerRequest.HttpServerRequest | Scope.Scope>

/** Answers with `response`: bytes written at once, a stream through a web `Response` with back-pressure. */
const respond = (context: Context.Context<never>) => (request: HttpServerRequest.HttpServerRequest, response: HttpServerResponse.HttpServerResponse) => {
  const body = (request as NodeRequest).body
  const res = body.res
  // an answer already sent (a 413 while the body was read) stays the answer
  if (res.headersSent || res.destroyed) return Effect.void
  body.answered = true
  const withoutBody = request.method === "HEAD"
  const written = Result.try(() => writeDirect(response, res, withoutBody))
  if (Result.isFailure(written)) return Effect.sync(() => answer(res, 500, "internal error"))
  if (written.success) return Effect.void
  const controller = new AbortController()
  res.once("close", () => {
    if (!res.writableFinished) controller.abort(new Error("the client closed the connection"))
  })
  const web = HttpServerResponse.toWeb(HttpEffect.scopeTransferToStream(response), { withoutBody, context, signal: controller.signal })
  writeWebResponse(web, res).catch(() => res.destroy())
  return Effect.void
}

/** The node:http request listener that runs `app` for each request, as effect's `HttpServerRequest` built from it. */
const requestHandler = (context: Context.Context<never>, app: App, middleware: HttpMiddleware.HttpMiddleware | undefined, limit: BodyLimit | undefined) => {
  const handled = HttpEffect.toHandled(app, respond(context), middleware)
  return (req: Http.IncomingMessage, res: Http.ServerResponse) => {
    let fiber: Fiber.Fiber<unknown, unknown> | undefined
    const tooLarge = (size: number | undefined) => {
      if (limit === undefined || res.headersSent) return
      const message = tooLargeMessage(limit, size)
      answer(res, 413, message, limit.answer?.(message) ?? { detail: message })
      fiber?.interruptUnsafe()
    }
    const declared = Number(req.headers["content-length"] ?? "0")
    // refused before it is read; node drains the unread body once the answer is sent
    if (limit !== undefined && declared > limit.maxBytes) return tooLarge(declared)
    const body = new Body(req, res, limit?.maxBytes ?? Infinity, () => tooLarge(undefined))
    const request = new NodeRequest(req, body)
    const running = Effect.runForkWith(Context.add(context, HttpServerRequest.HttpServerRequest, request))(handled)
    fiber = running
    if (running.pollUnsafe() !== undefined) return
    res.once("close", () => {
      // the client went away before the answer was written: stop the work
      if (!res.writableFinished) running.interruptUnsafe(undefined, HttpServerError.ClientAbort.annotation)
    })
    running.addObserver(() => {
      // a fiber that ended with no answer written or under way
      if (!body.answered && !res.headersSent && !res.destroyed) answer(res, 500, "internal error")
    })
  }
}

/** Applies the connection settings: the keep-alive timeout, and header and request timeouts above it. */
const configure = (server: Http.Server, keepAlive: Duration.Input) => {
  const keepAliveMillis = Duration.toMillis(Duration.fromInputUnsafe(keepAlive))
  server.keepAliveTimeout = keepAliveMillis
  // node measures a kept-alive connection's wait for its next headers with headersTimeout: keep it above
  server.headersTimeout = keepAliveMillis + 5_000
  server.requestTimeout = Math.max(server.requestTimeout, server.headersTimeout)
}

/**
 * Listens on `options.host:options.port` and returns the `HttpServer` service; the
 * server closes with the scope.
 * @since 0.1.0 @category constructors
 */
export const make = Effect.fn("Platform.HttpServer.make")(function* (options: Options = {}) {
  const host = options.host ?? "127.0.0.1"
  const graceMillis = Duration.toMillis(Duration.fromInputUnsafe(options.gracefulShutdown ?? "20 seconds"))
  const server = Http.createServer()
  configure(server, options.keepAliveTimeout ?? DEFAULT_KEEP_ALIVE)

  const shutdown = yield* Effect.cached(
    Effect.callback<void>((resume) => {
      if (!server.listening) return resume(Effect.void)
      let done = false
      // closing a connection interrupts its request (see "close" below)
      const timer = setTimeout(() => server.closeAllConnections(), graceMillis)
      server.close(() => {
        done = true
        clearTimeout(timer)
        resume(Effect.void)
      })
      // closes keep-alive connections that are idle now (node >= 19 does this too)
      server.closeIdleConnections()
      return Effect.sync(() => {
        if (!done) clearTimeout(timer)
      })
    }),
  )
  yield* Effect.addFinalizer(() => shutdown)

  yield* Effect.callback<void, HttpServerError.ServeError>((resume) => {
    const onError = (cause: Error) => resume(Effect.fail(new HttpServerError.ServeError({ cause })))
    server.once("error", onError)
    server.listen({ port: options.port ?? 0, host, backlog: options.backlog ?? DEFAULT_BACKLOG }, () => {
      server.off("error", onError)
      resume(Effect.void)
    })
  })
  const bound = server.address() as AddressInfo
  const address = yield* Effect.fromResult(NetAddress.inetAddressFromIpString(bound.address, bound.port)).pipe(
    Effect.mapError((cause) => new HttpServerError.ServeError({ cause })),
  )

  return HttpServer.make({
    address,
    serve: (app, middleware) =>
      Effect.gen(function* () {
        const context = yield* Effect.context<never>()
        const onRequest = requestHandler(context, app, middleware, options.bodyLimit)
        yield* Effect.acquireRelease(
          Effect.sync(() => server.on("request", onRequest)),
          () => Effect.ensuring(shutdown, Effect.sync(() => server.off("request", onRequest))),
        )
      }),
  })
})

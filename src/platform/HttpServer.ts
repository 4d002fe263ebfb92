/**
 * Effect's `HttpServer` on `node:http`. Each request becomes a web `Request` that the app
 * handles through `HttpEffect.toWebHandlerWith` (so body limits, per-request scopes and
 * response encoding are Effect's own), and the web `Response` is written back: a body of
 * known length in one write, a stream chunk by chunk with back-pressure. A client that
 * disconnects interrupts its request. When the scope closes the server stops accepting,
 * lets requests in flight finish for up to `gracefulShutdown`, then interrupts the rest
 * and closes every connection.
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
import { Duration, Effect, Result, type Scope } from "effect"
import { HttpEffect, HttpServer, HttpServerError, type HttpServerRequest } from "effect/http"
import * as NetAddress from "effect/net/NetAddress"

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

/**
 * The request body as a web stream, read only when the app reads it. Cancelling it (a
 * body over the size limit) drains the rest instead of destroying the socket, so the
 * client still gets the answer; so does an answer sent before the body was read.
 */
const bodyOf = (req: Http.IncomingMessage, res: Http.ServerResponse, maxBytes: number, tooLarge: () => void): ReadableStream<Uint8Array> => {
  let started = false
  let read = 0
  let controller: ReadableStreamDefaultController<Uint8Array> | undefined
  const onData = (chunk: Buffer) => {
    read += chunk.byteLength
    if (read > maxBytes) {
      // a chunked body past the limit: refused now, the rest drained
      controller?.error(new Error(`the request body is larger than ${maxBytes} bytes`))
      drain()
      return tooLarge()
    }
    controller?.enqueue(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength))
    if ((controller?.desiredSize ?? 0) <= 0) req.pause()
  }
  const drain = () => {
    req.off("data", onData)
    controller = undefined
    req.resume()
  }
  res.once("finish", () => {
    if (started && !req.complete) drain()
  })
  return new globalThis.ReadableStream<Uint8Array>({
    pull(c) {
      if (!started) {
        started = true
        controller = c
        req.on("data", onData)
        req.once("end", () => controller?.close())
        req.once("error", (e) => controller?.error(e))
      }
      req.resume()
    },
    cancel: drain,
  })
}

/** The node:http request as a web `Request`; `undefined` when its URL or headers cannot be one. */
const toWebRequest = (req: Http.IncomingMessage, res: Http.ServerResponse, signal: AbortSignal, body: () => ReadableStream<Uint8Array>): Request | undefined => {
  const target = req.url ?? "/"
  const url = Result.try(() => new URL(target.startsWith("/") ? `http://localhost${target}` : target))
  if (Result.isFailure(url)) return undefined
  const method = req.method ?? "GET"
  const hasBody = method !== "GET" && method !== "HEAD"
  const request = Result.try(() => {
    const headers = new globalThis.Headers()
    for (let i = 0; i + 1 < req.rawHeaders.length; i += 2) headers.append(req.rawHeaders[i]!, req.rawHeaders[i + 1]!)
    return new globalThis.Request(url.success, {
      method,
      headers,
      signal,
      ...(hasBody ? { body: body(), duplex: "half" } : {}),
    } as RequestInit)
  })
  return Result.isSuccess(request) ? request.success : undefined
}

/** Writes a web `Response` to the node:http response. */
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
        const handle = HttpEffect.toWebHandlerWith<never, HttpServerRequest.HttpServerRequest | Scope.Scope>(context)(app, middleware)
        const limit = options.bodyLimit
        const onRequest = (req: Http.IncomingMessage, res: Http.ServerResponse) => {
          const controller = new AbortController()
          res.once("close", () => {
            // the client went away before the answer was written: stop the work
            if (!res.writableFinished) controller.abort(new Error("the client closed the connection"))
          })
          let refused = false
          const tooLarge = (size: number | undefined) => {
            if (limit === undefined || res.headersSent) return
            refused = true
            const message = tooLargeMessage(limit, size)
            answer(res, 413, message, limit.answer?.(message) ?? { detail: message })
            controller.abort(new Error(message))
          }
          const declared = Number(req.headers["content-length"] ?? "0")
          // refused before it is read; node drains the unread body once the answer is sent
          if (limit !== undefined && declared > limit.maxBytes) return tooLarge(declared)
          const request = toWebRequest(req, res, controller.signal, () => bodyOf(req, res, limit?.maxBytes ?? Infinity, () => tooLarge(undefined)))
          if (request === undefined) return answer(res, 400, "the request URL or a header is malformed")
          handle(request)
            // an answer already sent (a 413 while the body was read) stays the answer
            .then((web) => (refused ? undefined : writeWebResponse(web, res)))
            .catch(() => (refused ? undefined : answer(res, 500, "internal error")))
        }
        yield* Effect.acquireRelease(
          Effect.sync(() => server.on("request", onRequest)),
          () => Effect.ensuring(shutdown, Effect.sync(() => server.off("request", onRequest))),
        )
      }),
  })
})

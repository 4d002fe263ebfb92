/**
 * gyre's HttpServer writes effect's answers to node:http itself (no web Response for a
 * body of bytes): status, headers, cookies, HEAD and 204 without a body, a streamed body
 * chunk by chunk, a client that leaves mid-stream stops the stream, a request body read
 * as a stream within the body limit, and an app that dies answers 500. Exercised with
 * node's own HTTP client.
 */
import * as Http from "node:http"
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Schedule, Stream } from "effect"
import { HttpServer, HttpServerRequest, HttpServerResponse } from "effect/http"
import * as PlatformHttpServer from "../../src/platform/HttpServer.ts"

interface Answer {
  readonly status: number
  readonly headers: Http.IncomingHttpHeaders
  readonly text: string
  readonly chunks: number
}

const request = (url: string, options: { readonly method?: string; readonly chunks?: ReadonlyArray<string> } = {}) =>
  Effect.callback<Answer, Error>((resume) => {
    const req = Http.request(url, { method: options.method ?? "GET", agent: false }, (res) => {
      let text = ""
      let chunks = 0
      res.setEncoding("utf8")
      res.on("data", (d) => {
        chunks++
        text += d
      })
      res.on("end", () => resume(Effect.succeed({ status: res.statusCode ?? 0, headers: res.headers, text, chunks })))
    })
    req.on("error", (e) => resume(Effect.fail(e)))
    for (const chunk of options.chunks ?? []) req.write(chunk)
    req.end()
    return Effect.sync(() => req.destroy())
  })

const urlOf = (server: HttpServer.HttpServer["Service"]) => `http://127.0.0.1:${server.address._tag === "UnixPathAddress" ? 0 : server.address.port}`

describe("platform HttpServer answers", () => {
  it.live("writes status, headers and cookies; HEAD and 204 carry no body", () =>
    Effect.gen(function* () {
      const server = yield* PlatformHttpServer.make()
      yield* server.serve(
        Effect.map(HttpServerRequest.HttpServerRequest, (req) =>
          req.url === "/none"
            ? HttpServerResponse.empty({ status: 204 })
            : HttpServerResponse.text("hello", { status: 201, headers: { "x-one": "1" } }).pipe(HttpServerResponse.setCookieUnsafe("a", "b"))),
      )
      const url = urlOf(server)
      const got = yield* request(`${url}/`)
      assert.deepStrictEqual([got.status, got.text, got.headers["x-one"], got.headers["content-type"], got.headers["content-length"]], [201, "hello", "1", "text/plain", "5"])
      assert.deepStrictEqual(got.headers["set-cookie"], ["a=b"])
      const head = yield* request(`${url}/`, { method: "HEAD" })
      assert.deepStrictEqual([head.status, head.text, head.headers["content-length"]], [201, "", "5"])
      const none = yield* request(`${url}/none`)
      assert.deepStrictEqual([none.status, none.text, none.headers["content-length"]], [204, "", undefined])
    }).pipe(Effect.scoped))

  it.live("a streamed body arrives chunk by chunk, whole", () =>
    Effect.gen(function* () {
      const server = yield* PlatformHttpServer.make()
      const parts = Array.from({ length: 5 }, (_, i) => `data: ${i}\n\n`)
      // a pause between parts: each is written as it comes, not gathered
      const stream = Stream.fromIterable(parts).pipe(Stream.schedule(Schedule.spaced("20 millis")), Stream.encodeText)
      yield* server.serve(Effect.succeed(HttpServerResponse.stream(stream, { contentType: "text/event-stream" })))
      const got = yield* request(urlOf(server))
      assert.deepStrictEqual([got.status, got.text, got.headers["content-type"]], [200, parts.join(""), "text/event-stream"])
      assert.isAbove(got.chunks, 1)
    }).pipe(Effect.scoped))

  it.live("a streamed body of known length arrives whole, with its length", () =>
    Effect.gen(function* () {
      const server = yield* PlatformHttpServer.make()
      const text = "abc".repeat(1000)
      const stream = Stream.fromIterable([text.slice(0, 1000), text.slice(1000)]).pipe(Stream.schedule(Schedule.spaced("10 millis")), Stream.encodeText)
      // answered after a turn of the event loop: the request's fiber ends while the body is still being written
      yield* server.serve(Effect.as(Effect.sleep("1 millis"), HttpServerResponse.stream(stream, { contentLength: text.length, contentType: "application/octet-stream" })))
      const got = yield* request(urlOf(server))
      assert.deepStrictEqual([got.status, got.text, got.headers["content-length"]], [200, text, String(text.length)])
    }).pipe(Effect.scoped))

  it.live("a client that leaves during a streamed answer stops the stream", () =>
    Effect.gen(function* () {
      const started = yield* Deferred.make<void>()
      const stopped = yield* Deferred.make<void>()
      const server = yield* PlatformHttpServer.make()
      const endless = Stream.fromEffect(Deferred.succeed(started, undefined)).pipe(
        Stream.flatMap(() => Stream.fromSchedule(Schedule.spaced("10 millis"))),
        Stream.map((n) => `${n}\n`),
        Stream.encodeText,
        Stream.onExit(() => Deferred.succeed(stopped, undefined)),
      )
      yield* server.serve(Effect.succeed(HttpServerResponse.stream(endless)))
      const client = yield* Effect.forkChild(request(urlOf(server)))
      yield* Deferred.await(started)
      yield* Fiber.interrupt(client) // destroys the request
      yield* Deferred.await(stopped).pipe(Effect.timeout("5 seconds"))
    }).pipe(Effect.scoped))

  it.live("a request body read as a stream: whole within the limit, a 413 past it", () =>
    Effect.gen(function* () {
      const server = yield* PlatformHttpServer.make({ bodyLimit: { maxBytes: 1000, raiseWith: "a flag" } })
      yield* server.serve(
        Effect.flatMap(HttpServerRequest.HttpServerRequest, (req) =>
          Stream.runFold(req.stream, () => 0, (n, chunk: Uint8Array) => n + chunk.byteLength).pipe(
            Effect.map((length) => HttpServerResponse.jsonUnsafe({ length })),
            Effect.orDie,
          )),
      )
      const url = urlOf(server)
      const fits = yield* request(url, { method: "POST", chunks: ["x".repeat(500), "y".repeat(500)] })
      assert.deepStrictEqual([fits.status, JSON.parse(fits.text)], [200, { length: 1000 }])
      const over = yield* request(url, { method: "POST", chunks: ["x".repeat(600), "y".repeat(600)] })
      assert.strictEqual(over.status, 413)
      assert.match(JSON.parse(over.text).detail, /larger than this server's limit of 1000 bytes/)
    }).pipe(Effect.scoped))

  it.live("an app that dies answers 500", () =>
    Effect.gen(function* () {
      const server = yield* PlatformHttpServer.make()
      yield* server.serve(Effect.die(new Error("boom")))
      const got = yield* request(urlOf(server))
      assert.strictEqual(got.status, 500)
    }).pipe(Effect.scoped))
})

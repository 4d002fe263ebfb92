/**
 * gyre's HttpServer on node:http, exercised with node's own HTTP client: answers,
 * request bodies under Effect's size limit (the connection stays usable after a 413), a
 * client that goes away interrupts its request, and closing the scope lets a request in
 * flight finish, or interrupts it once the grace period is over.
 */
import * as Http from "node:http"
import { assert, describe, it } from "@effect/vitest"
import { ByteSize, Deferred, Effect, Exit, Fiber, Scope } from "effect"
import { HttpIncomingMessage, HttpServer, HttpServerRequest, HttpServerResponse } from "effect/http"
import * as PlatformHttpServer from "../../src/platform/HttpServer.ts"

interface Answer {
  readonly status: number
  readonly text: string
  readonly reusedSocket: boolean
}

/** One request through node:http with `agent`. */
const request = (url: string, options: { readonly method?: string; readonly body?: string; readonly chunks?: ReadonlyArray<string>; readonly agent?: Http.Agent } = {}) =>
  Effect.callback<Answer, Error>((resume) => {
    const req = Http.request(url, { method: options.method ?? "GET", agent: options.agent ?? false }, (res) => {
      let text = ""
      res.setEncoding("utf8")
      res.on("data", (d) => (text += d))
      // answered on the next turn: the agent frees the socket for the next request only after "end"
      res.on("end", () => setImmediate(() => resume(Effect.succeed({ status: res.statusCode ?? 0, text, reusedSocket: req.reusedSocket }))))
    })
    req.on("error", (e) => resume(Effect.fail(e)))
    // chunks go without a Content-Length (chunked transfer encoding)
    for (const chunk of options.chunks ?? []) req.write(chunk)
    req.end(options.body)
    return Effect.sync(() => req.destroy())
  })

/** Echoes method, path and body; the body may hold at most 1 KiB. */
const echo = Effect.gen(function* () {
  const req = yield* HttpServerRequest.HttpServerRequest
  const body = yield* req.text.pipe(Effect.provideService(HttpIncomingMessage.MaxBodySize, ByteSize.bytes(1024)), Effect.result)
  if (body._tag === "Failure") return HttpServerResponse.jsonUnsafe({ detail: "too large" }, { status: 413 })
  return HttpServerResponse.jsonUnsafe({ method: req.method, url: req.url, body: body.success })
})

const urlOf = (server: HttpServer.HttpServer["Service"]) => {
  const address = server.address
  assert.strictEqual(address._tag, "InetAddressV4")
  return `http://127.0.0.1:${address._tag === "UnixPathAddress" ? 0 : address.port}`
}

describe("platform HttpServer (node:http)", () => {
  it.live("answers requests; after a body over the limit (413) the kept-alive connection still serves", () =>
    Effect.gen(function* () {
      const server = yield* PlatformHttpServer.make()
      yield* server.serve(echo)
      const url = urlOf(server)
      const agent = new Http.Agent({ keepAlive: true, maxSockets: 1 })
      yield* Effect.addFinalizer(() => Effect.sync(() => agent.destroy()))

      const first = yield* request(`${url}/a/b?c=1`, { method: "POST", body: "hello", agent })
      assert.strictEqual(first.status, 200)
      assert.deepStrictEqual(JSON.parse(first.text), { method: "POST", url: "/a/b?c=1", body: "hello" })
      const large = yield* request(`${url}/big`, { method: "POST", body: "x".repeat(256 * 1024), agent })
      assert.strictEqual(large.status, 413)
      const after = yield* request(`${url}/after`, { agent })
      assert.strictEqual(after.status, 200)
      assert.isTrue(after.reusedSocket, "the connection that carried the oversized body is reused")
    }).pipe(Effect.scoped))

  it.live("with a bodyLimit, a body over it is a 413 naming the limit and how to raise it, declared or chunked, and the connection still serves", () =>
    Effect.gen(function* () {
      const server = yield* PlatformHttpServer.make({ bodyLimit: { maxBytes: 1000, raiseWith: "serve --max-body-mb" } })
      // reads the body without a limit of its own: the server's is the one that answers
      yield* server.serve(Effect.map(Effect.flatMap(HttpServerRequest.HttpServerRequest, (req) => Effect.orDie(req.text)), (text) => HttpServerResponse.jsonUnsafe({ length: text.length })))
      const url = urlOf(server)
      const agent = new Http.Agent({ keepAlive: true, maxSockets: 1 })
      yield* Effect.addFinalizer(() => Effect.sync(() => agent.destroy()))
      const declared = yield* request(`${url}/big`, { method: "POST", body: "x".repeat(5000), agent })
      assert.strictEqual(declared.status, 413)
      assert.strictEqual(JSON.parse(declared.text).detail, "the request body has 5000 bytes, over this server's limit of 1000 bytes: send less per request, or raise the limit with serve --max-body-mb")
      const chunked = yield* request(`${url}/big`, { method: "POST", chunks: ["x".repeat(600), "y".repeat(600)], agent })
      assert.strictEqual(chunked.status, 413)
      assert.strictEqual(JSON.parse(chunked.text).detail, "the request body is larger than this server's limit of 1000 bytes: send less per request, or raise the limit with serve --max-body-mb")
      const fits = yield* request(`${url}/ok`, { method: "POST", body: "z".repeat(1000), agent })
      assert.deepStrictEqual([fits.status, JSON.parse(fits.text).length, fits.reusedSocket], [200, 1000, true])
    }).pipe(Effect.scoped))

  it.live("a client that disconnects interrupts its request", () =>
    Effect.gen(function* () {
      const started = yield* Deferred.make<void>()
      const interrupted = yield* Deferred.make<void>()
      const server = yield* PlatformHttpServer.make()
      // effect's HTTP handlers run uninterruptibly unless they opt in, as this one does
      yield* server.serve(Effect.interruptible(Effect.andThen(Deferred.succeed(started, undefined), Effect.never)).pipe(Effect.onInterrupt(() => Deferred.succeed(interrupted, undefined))))
      const client = yield* Effect.forkChild(request(urlOf(server)))
      yield* Deferred.await(started)
      yield* Fiber.interrupt(client) // destroys the request
      yield* Deferred.await(interrupted).pipe(Effect.timeout("5 seconds"))
    }).pipe(Effect.scoped))

  it.live("closing the scope lets a request in flight finish", () =>
    Effect.gen(function* () {
      const started = yield* Deferred.make<void>()
      const scope = yield* Scope.make()
      const server = yield* PlatformHttpServer.make().pipe(Scope.provide(scope))
      yield* server.serve(Effect.andThen(Deferred.succeed(started, undefined), Effect.as(Effect.sleep("200 millis"), HttpServerResponse.text("finished")))).pipe(Scope.provide(scope))
      const client = yield* Effect.forkChild(request(urlOf(server)))
      yield* Deferred.await(started)
      yield* Scope.close(scope, Exit.void)
      const answer = yield* Fiber.join(client)
      assert.deepStrictEqual([answer.status, answer.text], [200, "finished"])
      // and the server no longer listens
      const refused = yield* Effect.flip(request(urlOf(server)))
      assert.match(refused.message, /ECONNREFUSED/)
    }))

  it.live("a request still running when the grace period ends is interrupted", () =>
    Effect.gen(function* () {
      const started = yield* Deferred.make<void>()
      const interrupted = yield* Deferred.make<void>()
      const scope = yield* Scope.make()
      const server = yield* PlatformHttpServer.make({ gracefulShutdown: "100 millis" }).pipe(Scope.provide(scope))
      yield* server.serve(Effect.interruptible(Effect.andThen(Deferred.succeed(started, undefined), Effect.never)).pipe(Effect.onInterrupt(() => Deferred.succeed(interrupted, undefined)))).pipe(Scope.provide(scope))
      const client = yield* Effect.forkChild(Effect.exit(request(urlOf(server))))
      yield* Deferred.await(started)
      yield* Scope.close(scope, Exit.void).pipe(Effect.timeout("5 seconds"))
      yield* Deferred.await(interrupted).pipe(Effect.timeout("5 seconds"))
      yield* Fiber.join(client)
    }))
})

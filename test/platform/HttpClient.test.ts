/**
 * gyre's HttpClient on undici 7, against a real node:http server on loopback: answers
 * (status, headers, body), connection reuse, undici's error codes kept in the cause, and
 * the connections closed with the layer.
 */
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Stream } from "effect"
import { Cookies, HttpClient, HttpClientRequest } from "effect/http"
import * as PlatformHttpClient from "../../src/platform/HttpClient.ts"

/** A loopback server that echoes what it got and counts the connections it accepted. */
const echoServer = Effect.acquireRelease(
  Effect.callback<{ readonly url: string; readonly connections: () => number; readonly open: () => number; readonly server: Http.Server }>((resume) => {
    let connections = 0
    let open = 0
    const server = Http.createServer((req, res) => {
      let body = ""
      req.on("data", (d) => (body += d))
      req.on("end", () => {
        if (req.url === "/weird") {
          res.writeHead(600)
          return res.end("?")
        }
        if (req.url === "/empty") {
          res.writeHead(204, { "x-kind": "empty" })
          return res.end()
        }
        res.writeHead(req.url === "/missing" ? 404 : 200, { "content-type": "application/json", "set-cookie": ["a=1", "b=2"] })
        res.end(JSON.stringify({ method: req.method, url: req.url, body, key: req.headers["x-api-key"] ?? null }))
      })
    })
    server.on("connection", (socket) => {
      connections++
      open++
      socket.once("close", () => open--)
    })
    server.listen(0, "127.0.0.1", () =>
      resume(Effect.succeed({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, connections: () => connections, open: () => open, server })),
    )
  }),
  ({ server }) =>
    Effect.callback<void>((resume) => {
      server.closeAllConnections()
      server.close(() => resume(Effect.void))
    }),
)

/** The `code` of an error or of one of its causes. */
const codeIn = (e: unknown): string | undefined => {
  for (let c: any = e, depth = 0; c !== null && typeof c === "object" && depth < 6; c = c.cause ?? c.reason, depth++) {
    if (typeof c.code === "string") return c.code
  }
  return undefined
}

describe("platform HttpClient (undici 7)", () => {
  it.live("answers with status, headers and body; POST bodies arrive", () =>
    Effect.gen(function* () {
      const server = yield* echoServer
      const http = yield* HttpClient.HttpClient
      const res = yield* http.execute(HttpClientRequest.post(`${server.url}/x?y=1`).pipe(HttpClientRequest.bodyText('{"a":1}', "application/json"), HttpClientRequest.setHeader("x-api-key", "k")))
      assert.strictEqual(res.status, 200)
      assert.strictEqual(res.headers["content-type"], "application/json")
      assert.deepStrictEqual(yield* res.json, { method: "POST", url: "/x?y=1", body: '{"a":1}', key: "k" })
      assert.deepStrictEqual(Cookies.toRecord(res.cookies), { a: "1", b: "2" }, "both set-cookie headers arrive")
      const missing = yield* http.execute(HttpClientRequest.get(`${server.url}/missing`))
      assert.strictEqual(missing.status, 404)
      const empty = yield* http.execute(HttpClientRequest.get(`${server.url}/empty`))
      assert.strictEqual(empty.status, 204)
      assert.strictEqual(empty.headers["x-kind"], "empty")
      assert.strictEqual(yield* empty.text, "")
    }).pipe(Effect.scoped, Effect.provide(PlatformHttpClient.layer)))

  it.live("reuses its connections for requests in sequence, and closes them with the layer", () =>
    Effect.gen(function* () {
      const server = yield* echoServer
      yield* Effect.gen(function* () {
        const http = yield* HttpClient.HttpClient
        for (let i = 0; i < 20; i++) yield* Effect.flatMap(http.execute(HttpClientRequest.get(`${server.url}/n${i}`)), (r) => r.text)
      }).pipe(Effect.provide(PlatformHttpClient.layer))
      // undici opens a second connection once, when the first answer's end and the next request cross
      assert.isAtMost(server.connections(), 2, "twenty requests in sequence share kept-alive connections")
      // the layer is released: its agent is destroyed, and the server sees the connection close
      for (let i = 0; i < 100 && server.open() > 0; i++) yield* Effect.sleep("10 millis")
      assert.strictEqual(server.open(), 0)
    }).pipe(Effect.scoped))

  it.live("a refused connection and an unsendable header fail with undici's code in the cause", () =>
    Effect.gen(function* () {
      const http = yield* HttpClient.HttpClient
      const port = yield* Effect.map(echoServer, (s) => new URL(s.url).port).pipe(Effect.scoped) // closed again: nothing listens there now
      const refused = yield* Effect.flip(http.execute(HttpClientRequest.get(`http://127.0.0.1:${port}/`)))
      assert.strictEqual(refused.reason._tag, "TransportError")
      assert.strictEqual(codeIn(refused.reason), "ECONNREFUSED")
      const server = yield* echoServer
      const invalid = yield* Effect.flip(http.execute(HttpClientRequest.get(server.url).pipe(HttpClientRequest.setHeader("x-api-key", "line\nbreak"))))
      assert.strictEqual(invalid.reason._tag, "TransportError")
      assert.strictEqual(codeIn(invalid.reason), "UND_ERR_INVALID_ARG")
    }).pipe(Effect.scoped, Effect.provide(Layer.fresh(PlatformHttpClient.layer))))

  it.live("keeps at most `connections` connections to a server; the requests beyond them wait their turn", () =>
    Effect.gen(function* () {
      const server = yield* echoServer
      const http = yield* HttpClient.HttpClient
      const bodies = yield* Effect.forEach(
        Array.from({ length: 12 }, (_, i) => i),
        (i) => Effect.flatMap(http.execute(HttpClientRequest.post(`${server.url}/c${i}`).pipe(HttpClientRequest.bodyText(String(i)))), (r) => r.json),
        { concurrency: "unbounded" },
      )
      assert.deepStrictEqual(bodies.map((b) => (b as { body: string }).body), Array.from({ length: 12 }, (_, i) => String(i)))
      assert.isAtMost(server.connections(), 2)
    }).pipe(Effect.scoped, Effect.provide(Layer.fresh(PlatformHttpClient.layerWith({ connections: 2 })))))

  it.live("streams a body when asked to; an answer whose status a web Response refuses is a transport error", () =>
    Effect.gen(function* () {
      const server = yield* echoServer
      const http = yield* HttpClient.HttpClient
      const res = yield* http.execute(HttpClientRequest.post(`${server.url}/s`).pipe(HttpClientRequest.bodyText("streamed")))
      const chunks = yield* Stream.runCollect(res.stream)
      assert.strictEqual(JSON.parse(Buffer.concat(chunks.map((c) => Buffer.from(c))).toString()).body, "streamed")
      const weird = yield* Effect.flip(http.execute(HttpClientRequest.get(`${server.url}/weird`)))
      assert.strictEqual(weird.reason._tag, "TransportError")
      assert.include(weird.message, "status 600")
    }).pipe(Effect.scoped, Effect.provide(Layer.fresh(PlatformHttpClient.layer))))
})

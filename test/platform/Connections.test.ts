/**
 * gyre's HttpServer under many connections: a thousand clients that connect at once are
 * all answered (the listen backlog is far above Node's 511), and a client whose event loop
 * stays busy longer than Node's default keep-alive timeout (5 s) between two requests
 * still gets its second answer on the same connection (node closes an idle connection about
 * 1 s after the timeout it advertises, so the client stays busy 8 s).
 */
import { execFileSync } from "node:child_process"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { HttpServerResponse } from "effect/http"
import * as PlatformHttpServer from "../../src/platform/HttpServer.ts"
import { burst, busyGap } from "./LoadClients.ts"

const start = Effect.gen(function* () {
  const server = yield* PlatformHttpServer.make()
  // a JSON answer of known length, as every gyre server sends
  yield* server.serve(Effect.succeed(HttpServerResponse.jsonUnsafe({ ok: true })))
  const port = server.address._tag === "UnixPathAddress" ? 0 : server.address.port
  return { url: `http://127.0.0.1:${port}/`, port }
})

/** The accept queue of the socket listening on `port`, as `ss` reports it (Send-Q of a listening socket), when `ss` is there. */
const listenBacklog = (port: number): number | undefined => {
  const out = Effect.runSync(Effect.orElseSucceed(Effect.try(() => execFileSync("ss", ["-ltnH", `sport = :${port}`], { encoding: "utf8" })), () => ""))
  const sendQ = out.trim().split(/\s+/)[2]
  return sendQ === undefined ? undefined : Number(sendQ)
}

describe("platform HttpServer connections", () => {
  it.live("1,024 connections started at once are all answered, and the listen backlog holds them", () =>
    Effect.gen(function* () {
      const { url, port } = yield* start
      const backlog = listenBacklog(port)
      // the kernel caps the backlog at net.core.somaxconn; Node's default is 511
      if (backlog !== undefined) assert.isAtLeast(backlog, 1024)
      const outcome = yield* Effect.promise(() => burst(url, 1024))
      assert.deepStrictEqual(outcome, { statuses: { "200": 1024 }, errors: {} })
    }).pipe(Effect.scoped))

  it.live("a client busy for 8 s between two requests gets its second answer on the kept-alive connection", () =>
    Effect.gen(function* () {
      const { url } = yield* start
      const outcome = yield* Effect.promise(() => busyGap(url, 8_000))
      assert.deepStrictEqual(outcome, { first: "200", second: "200", reusedSocket: true })
    }).pipe(Effect.scoped))
})

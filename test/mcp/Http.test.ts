/**
 * MCP toolsets over streamable HTTP, against a real server process
 * (test/mcp/fixtures/server.ts --http): list, call, isError, timeout, and a server that
 * goes away: that call is an error observation, and once a server answers at the URL
 * again the next call opens a fresh connection.
 */
import type { ChildProcess } from "node:child_process"
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { Cause, Effect, Exit } from "effect"
import { McpError, McpToolset, Server, type Shape } from "gyre/mcp"
import { FIXTURE, startHttp, stopHttp } from "./Fixture.ts"

const call = (ts: Shape, name: string, args: unknown = {}) =>
  Effect.map(Effect.exit(ts.tools.find((t) => t.name === name)!.run(args)), (exit) =>
    Exit.isSuccess(exit) ? exit.value : `error: ${(Cause.squash(exit.cause) as Error).message}`)

describe("MCP toolset over streamable HTTP", () => {
  let server: { child: ChildProcess; url: string }
  beforeAll(async () => {
    server = await startHttp(FIXTURE)
  })
  afterAll(async () => {
    await stopHttp(server.child)
  })

  it.live("lists the server's tools and calls them; isError and a timeout are error observations", () =>
    Effect.gen(function* () {
      const ts = yield* McpToolset.make(Server.http(server.url), { timeout: "300 millis" })
      assert.strictEqual(ts.server, server.url)
      assert.deepStrictEqual(ts.listed.map((t) => t.name), ["echo", "slow", "fail", "crash", "malformed", "pid", "spawn"])
      assert.strictEqual(yield* call(ts, "echo", { text: "over http" }), "over http")
      assert.strictEqual(yield* call(ts, "fail"), "error: the shelf is empty")
      assert.match(yield* call(ts, "slow", { ms: 5000 }), /^error: timed out after 300/)
      assert.strictEqual(yield* call(ts, "echo", { text: "still" }), "still")
      assert.strictEqual(yield* ts.pid, undefined)
    }).pipe(Effect.scoped))

  it.live("a server that goes away: that call is an error observation, the next one opens a fresh connection", () =>
    Effect.gen(function* () {
      const ts = yield* McpToolset.make(Server.http(server.url), { timeout: "5 seconds" })
      assert.strictEqual(yield* call(ts, "echo", { text: "a" }), "a")
      // the server process dies in the middle of the call (its own `crash` tool)
      assert.match(yield* call(ts, "crash"), /^error: /)
      const port = Number(new URL(server.url).port)
      yield* Effect.promise(() => stopHttp(server.child))
      server = yield* Effect.promise(() => startHttp(FIXTURE, port))
      assert.strictEqual(yield* call(ts, "echo", { text: "b" }), "b")
      assert.strictEqual(yield* ts.starts, 2)
    }).pipe(Effect.scoped))

  it.live("a URL where no server answers stops the start, naming the URL", () =>
    Effect.gen(function* () {
      const exit = yield* Effect.exit(Effect.scoped(McpToolset.make(Server.http("http://127.0.0.1:9/mcp"), { startTimeout: "5 seconds" })))
      assert.isTrue(Exit.isFailure(exit))
      const error = Cause.squash((exit as Exit.Failure<unknown, unknown>).cause) as McpError
      assert.strictEqual(error.reason, "StartFailed")
      assert.include(error.message, "cannot start the MCP server http://127.0.0.1:9/mcp")
    }))
})

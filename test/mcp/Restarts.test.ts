/**
 * A toolset's server that is down is started again with a back-off (250 ms, doubled after
 * each failed start, at most 8 s): calls in the meantime fail at once (masked) instead of
 * starting a server each. On the test clock: no real waiting.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { TestClock } from "effect/testing"
import { McpError, McpToolset, Server } from "gyre/mcp"
import * as Restarts from "../../src/mcp/Restarts.ts"
import { FIXTURE, startHttp, stopHttp } from "./Fixture.ts"

/** A start that fails `failures` times, then succeeds; counts its tries (test double). */
const flaky = (failures: number) => {
  let tries = 0
  const start = Effect.suspend(() => {
    tries++
    return tries <= failures ? Effect.fail(new McpError({ server: "s", reason: "StartFailed", message: `cannot start the MCP server s (try ${tries})` })) : Effect.succeed("up")
  })
  return { start, tries: () => tries }
}

describe("restarts with a back-off", () => {
  it("wait 250 ms after a failed start, doubled after each one, at most 8 s", () => {
    assert.deepStrictEqual([1, 2, 3, 4, 5, 6, 7, 8].map(Restarts.waitAfter), [250, 500, 1000, 2000, 4000, 8000, 8000, 8000])
  })

  it.effect("refuse a start within the wait, saying when the next try is, and try again after it", () =>
    Effect.gen(function* () {
      const server = flaky(2)
      const restarts = Restarts.make()
      const first = yield* Effect.flip(restarts.guard(server.start))
      assert.include(first.message, "(try 1)")
      const refused = yield* Effect.flip(restarts.guard(server.start))
      assert.strictEqual(server.tries(), 1, "no start within the wait")
      assert.include(refused.message, "(try 1) (gyre tries again in 250ms)")
      yield* TestClock.adjust("250 millis")
      yield* Effect.flip(restarts.guard(server.start))
      assert.strictEqual(server.tries(), 2)
      // the second failure in a row waits twice as long
      yield* TestClock.adjust("499 millis")
      yield* Effect.flip(restarts.guard(server.start))
      assert.strictEqual(server.tries(), 2)
      yield* TestClock.adjust("1 millis")
      assert.strictEqual(yield* restarts.guard(server.start), "up")
      assert.strictEqual(server.tries(), 3)
    }))

  it.effect("a start that succeeds resets the wait", () =>
    Effect.gen(function* () {
      const restarts = Restarts.make()
      const twice = flaky(1)
      yield* Effect.flip(restarts.guard(twice.start))
      yield* TestClock.adjust("250 millis")
      yield* restarts.guard(twice.start)
      const again = flaky(1)
      yield* Effect.flip(restarts.guard(again.start))
      yield* TestClock.adjust("250 millis")
      assert.strictEqual(yield* restarts.guard(again.start), "up")
    }))

  it.effect("an HTTP server that is down is not reconnected for every call; once back, it is", () =>
    Effect.gen(function* () {
      const server = yield* Effect.promise(() => startHttp(FIXTURE))
      const port = Number(new URL(server.url).port)
      let back: Awaited<ReturnType<typeof startHttp>> | undefined
      yield* Effect.addFinalizer(() => Effect.promise(async () => {
        await stopHttp(server.child)
        if (back !== undefined) await stopHttp(back.child)
      }))
      const toolset = yield* McpToolset.make(Server.http(server.url), { timeout: "5 seconds", startTimeout: "5 seconds" })
      const echo = toolset.tools.find((t) => t.name === "echo")!
      const call = echo.run({ text: "hi" })
      assert.strictEqual(yield* call, "hi")
      yield* Effect.promise(() => stopHttp(server.child))
      // the call that finds it gone, then a reconnect that fails: both the infrastructure's fault
      assert.strictEqual((yield* Effect.flip(call))._tag, "InfraFault")
      assert.strictEqual((yield* Effect.flip(call))._tag, "InfraFault")
      const starts = yield* toolset.starts
      // calls within the wait fail at once, starting nothing
      for (let i = 0; i < 5; i++) assert.include((yield* Effect.flip(call)).message, "gyre tries again in")
      assert.strictEqual(yield* toolset.starts, starts)
      back = yield* Effect.promise(() => startHttp(FIXTURE, port))
      yield* TestClock.adjust("250 millis")
      assert.strictEqual(yield* call, "hi")
      assert.strictEqual(yield* toolset.starts, starts + 1)
    }).pipe(Effect.scoped))
})

/**
 * MCP toolsets over stdio, against a real server process (test/mcp/fixtures/server.ts):
 * list, call, isError, timeout, a crash mid-call, a malformed result, schemas it cannot
 * turn, a server that fails to start, and no process left after the scope closes or
 * after an interruption.
 */
import { assert, describe, it } from "@effect/vitest"
import { Cause, Deferred, Effect, Exit, Fiber, Schema, Scope } from "effect"
import { Episode, Tool } from "gyre"
import { McpError, McpToolset, type Options, Server, type Shape } from "gyre/mcp"
import { alive, fixture, FIXTURE, gone } from "./Fixture.ts"

const toolset = (spec = fixture(), options: Options = {}) => McpToolset.make(spec, options)

/** A tool's result text, or `error: <message>` */
const call = (ts: Shape, name: string, args: unknown = {}) =>
  Effect.map(Effect.exit(ts.tools.find((t) => t.name === name)!.run(args)), (exit) =>
    Exit.isSuccess(exit) ? exit.value : `error: ${(Cause.squash(exit.cause) as Error).message}`)

const refusal = (exit: Exit.Exit<unknown, unknown>): McpError => {
  assert.isTrue(Exit.isFailure(exit), "the start was refused")
  const error = Cause.squash((exit as Exit.Failure<unknown, unknown>).cause)
  assert.instanceOf(error, McpError)
  return error as McpError
}

describe("MCP toolset over stdio", () => {
  it.live("lists the server's tools, decodes arguments with their schemas, and calls them", () =>
    Effect.gen(function* () {
      const ts = yield* toolset()
      assert.deepStrictEqual(ts.listed.map((t) => t.name), ["echo", "slow", "fail", "crash", "malformed", "pid", "spawn"])
      assert.strictEqual(yield* call(ts, "echo", { text: "hello" }), "hello")
      const echo = ts.tools.find((t) => t.name === "echo")!
      assert.isTrue(Exit.isFailure(Schema.decodeUnknownExit(echo.args)({})), "a missing required property is refused")
      assert.isTrue(Exit.isFailure(Schema.decodeUnknownExit(echo.args)({ text: 3 })), "a number for a string is refused")
      assert.deepStrictEqual(echo.parseArgs("hi there"), { text: "hi there" })
      assert.strictEqual(ts.render("brackets"), "[echo text] [slow ms] [fail] [crash] [malformed] [pid] [spawn]")
    }).pipe(Effect.scoped))

  it.live("an isError result is an error observation", () =>
    Effect.gen(function* () {
      const ts = yield* toolset()
      assert.strictEqual(yield* call(ts, "fail"), "error: the shelf is empty")
    }).pipe(Effect.scoped))

  it.live("a call past its timeout is an error observation, and the server serves the next call", () =>
    Effect.gen(function* () {
      const ts = yield* toolset(fixture(), { timeout: "300 millis" })
      const started = Date.now()
      assert.match(yield* call(ts, "slow", { ms: 5000 }), /^error: timed out after 300/)
      assert.isBelow(Date.now() - started, 4000, "the call ends at its timeout, not when the server answers")
      assert.strictEqual(yield* call(ts, "echo", { text: "still here" }), "still here")
      assert.strictEqual(yield* ts.starts, 1)
    }).pipe(Effect.scoped))

  it.live("a server that exits mid-call: that call is an error observation naming the exit and stderr, the next call gets a fresh server", () =>
    Effect.gen(function* () {
      const ts = yield* toolset()
      const first = Number(yield* call(ts, "pid"))
      const crashed = yield* call(ts, "crash")
      assert.match(crashed, /^error: MCP server .*: the server ended \(exited with code 3; stderr: fixture: crashing on purpose/)
      assert.isTrue(yield* Effect.promise(() => gone(first)), "the crashed server is gone")
      const second = Number(yield* call(ts, "pid"))
      assert.notStrictEqual(second, first)
      assert.strictEqual(yield* call(ts, "echo", { text: "again" }), "again")
      assert.strictEqual(yield* ts.starts, 2)
    }).pipe(Effect.scoped))

  it.live("a malformed result is an error observation, and the server stays", () =>
    Effect.gen(function* () {
      const ts = yield* toolset()
      assert.match(yield* call(ts, "malformed"), /^error: malformed result/)
      assert.strictEqual(yield* call(ts, "echo", { text: "ok" }), "ok")
      assert.strictEqual(yield* ts.starts, 1)
    }).pipe(Effect.scoped))

  it.live("a schema keyword it cannot turn stops the start, naming the tool and the keyword", () =>
    Effect.gen(function* () {
      const conditional = refusal(yield* Effect.exit(Effect.scoped(toolset(fixture({ FIXTURE_SCHEMA: "if" })))))
      assert.strictEqual(conditional.reason, "UnsupportedSchema")
      assert.strictEqual(conditional.tool, "conditional")
      assert.strictEqual(conditional.keyword, "if")
      assert.include(conditional.message, 'tool conditional of ')
      assert.include(conditional.message, '"if" at properties.n')
      const odd = refusal(yield* Effect.exit(Effect.scoped(toolset(fixture({ FIXTURE_SCHEMA: "unknown" })))))
      assert.strictEqual(odd.tool, "odd")
      assert.strictEqual(odd.keyword, "mustBeEven")
    }))

  it.live("a server that fails to start: the error names the command, its exit and its stderr", () =>
    Effect.gen(function* () {
      const error = refusal(yield* Effect.exit(Effect.scoped(toolset(fixture({ FIXTURE_START: "fail" })))))
      assert.strictEqual(error.reason, "StartFailed")
      assert.include(error.message, FIXTURE)
      assert.include(error.message, "exited with code 2")
      assert.include(error.message, "fixture: cannot open the database /nonexistent/db")
      const missing = refusal(yield* Effect.exit(Effect.scoped(toolset(Server.stdio({ command: "/nonexistent/mcp-server", args: ["--flag"] })))))
      assert.strictEqual(missing.reason, "StartFailed")
      assert.include(missing.message, "/nonexistent/mcp-server --flag")
      assert.include(missing.message, "ENOENT")
    }))

  it.live("closing the scope leaves no process: the server and a process it started", () =>
    Effect.gen(function* () {
      const scope = yield* Scope.make()
      const ts = yield* toolset().pipe(Scope.provide(scope))
      const server = Number(yield* call(ts, "pid"))
      const child = Number(yield* call(ts, "spawn"))
      assert.isTrue(alive(server) && alive(child))
      yield* Scope.close(scope, Exit.void)
      assert.isFalse(alive(server), "the server is gone when the scope has closed")
      assert.isTrue(yield* Effect.promise(() => gone(child, 2000)), "the server's own child is gone")
    }))

  it.live("an interrupted run leaves no process, even with a call in flight", () =>
    Effect.gen(function* () {
      const pid = yield* Deferred.make<number>()
      const fiber = yield* Effect.forkChild(
        Effect.scoped(
          Effect.gen(function* () {
            const ts = yield* toolset()
            yield* Deferred.succeed(pid, Number(yield* call(ts, "pid")))
            return yield* call(ts, "slow", { ms: 60_000 })
          }),
        ),
      )
      const server = yield* Deferred.await(pid)
      yield* Effect.sleep("200 millis")
      yield* Fiber.interrupt(fiber)
      assert.isFalse(alive(server), "the server is gone once the interrupted fiber has ended")
    }))

  it.live("its episode runs a bracket call and a hermes call, each result as an observation", () =>
    Effect.gen(function* () {
      const ts = yield* toolset()
      const episode = McpToolset.episode({ onParseError: "observe" })
      const step = (text: string, toolCalls: "brackets" | "hermes") =>
        episode.step({ state: { calls: 0 }, index: 0, text, ended: false, stopReason: "stop", toolCalls }, {}).pipe(Effect.provideService(McpToolset, ts))
      const bracket = yield* step("[echo hi there]", "brackets")
      assert.strictEqual(bracket._tag === "Observe" ? bracket.observation : bracket._tag, "=hi there;")
      const hermes = yield* step('<tool_call>\n{"name": "echo", "arguments": {"text": "hi"}}\n</tool_call>', "hermes")
      assert.include(hermes._tag === "Observe" ? hermes.observation : hermes._tag, "<tool_response>\nhi\n</tool_response>")
      const failed = yield* step("[fail]", "brackets")
      assert.strictEqual(failed._tag === "Observe" ? failed.observation : failed._tag, "=error: the shelf is empty;")
      assert.deepStrictEqual(episode.stopFor?.("brackets"), Tool.brackets.stop)
      assert.deepStrictEqual(episode.stopFor?.("hermes"), Tool.hermes.stop)
      const answer = yield* step(" 42", "brackets")
      assert.strictEqual(answer._tag, "End")
    }).pipe(Effect.scoped))

  it.live("a server per episode: each episode starts its own, and its end closes it", () =>
    Effect.gen(function* () {
      const episode = McpToolset.perEpisode(fixture(), { onParseError: "observe", timeout: "5 seconds" })
      const play = Effect.scoped(
        Effect.gen(function* () {
          const state = yield* Episode.start(episode, {})
          const next = yield* episode.step({ state, index: 0, text: "[pid]", ended: false, stopReason: "stop", toolCalls: "brackets" }, {})
          const pid = Number(/^=(\d+);$/.exec(next._tag === "Observe" ? next.observation : "")?.[1])
          assert.isTrue(alive(pid), "the episode's server runs during the episode")
          return pid
        }),
      )
      const first = yield* play
      assert.isFalse(alive(first), "the episode's end closed its server")
      const second = yield* play
      assert.notStrictEqual(second, first)
      assert.isFalse(alive(second))
    }))
})

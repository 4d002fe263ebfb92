/**
 * Polling a Loops trainer's operation (`Operations.ts`) through a test double of the
 * transport and the TestClock: a 408 (the server held the poll for its wait, its normal
 * answer) is polled again at once without a warning; an operation answered `running`
 * is polled again after a wait that grows from 100 ms to 1 s, not at once.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { TestClock } from "effect/testing"
import * as Retry from "../../../src/backends/http/client/Retry.ts"
import * as Operations from "../../../src/backends/loops/Operations.ts"
import { capture } from "./DataPlane.ts"
import { type Answer, fakeTransport } from "./FakeTransport.ts"

/** A trainer whose operation `op1` answers `poll(n)` to its n-th poll. */
const trainer = (poll: (n: number) => Answer) =>
  fakeTransport(({ method, n, path }) => (method === "POST" ? { body: { operation_id: "op1" } } : path === "/operations/op1" ? poll(n) : { status: 404 }))

const opsOn = (transport: ReturnType<typeof trainer>["transport"]) =>
  Operations.make({ transport, retry: Retry.fast, pollTimeout: "60 seconds", requestTimeout: "60 seconds" })

const done = { body: { status: "done", result: { ok: true } } }

describe("Loops operations: polling", () => {
  it.effect("a poll answered 408 is polled again at once, and no 408 is logged as a warning", () =>
    Effect.gen(function* () {
      const t = trainer((n) => (n <= 3 ? { status: 408, message: "still running" } : done))
      const logs = capture()
      const result = yield* opsOn(t.transport).run("forward", {}).pipe(Effect.provide(logs.layer))
      assert.deepStrictEqual(result, { ok: true })
      const polls = t.sent.filter((s) => s.method === "GET")
      assert.strictEqual(polls.length, 4)
      assert.deepStrictEqual(polls.map((p) => p.at), [0, 0, 0, 0], "polled again at once")
      assert.deepStrictEqual(logs.lines.filter((l) => l.startsWith("WARN") || l.startsWith("ERROR")), [])
    }))

  it.effect("an operation answered `running` is polled again after waits of 100 ms doubling to 1 s", () =>
    Effect.gen(function* () {
      const t = trainer((n) => (n <= 8 ? { body: { status: "running" } } : done))
      const fiber = yield* Effect.forkChild(opsOn(t.transport).run("forward", {}))
      yield* TestClock.adjust("30 seconds")
      assert.deepStrictEqual(yield* Fiber.join(fiber), { ok: true })
      const at = t.sent.filter((s) => s.method === "GET").map((p) => p.at)
      assert.deepStrictEqual(at.slice(1).map((x, i) => x - at[i]!), [100, 200, 400, 800, 1000, 1000, 1000, 1000])
    }))

  it.effect("waits of its own are honoured (`repoll`)", () =>
    Effect.gen(function* () {
      const t = trainer((n) => (n <= 3 ? { body: { status: "queued" } } : done))
      const ops = Operations.make({ transport: t.transport, retry: Retry.fast, pollTimeout: "1 minute", requestTimeout: "1 minute", repoll: { min: "5 millis", max: "12 millis" } })
      const fiber = yield* Effect.forkChild(ops.run("forward", {}))
      yield* TestClock.adjust("1 second")
      yield* Fiber.join(fiber)
      const at = t.sent.filter((s) => s.method === "GET").map((p) => p.at)
      assert.deepStrictEqual(at.slice(1).map((x, i) => x - at[i]!), [5, 10, 12])
    }))
})

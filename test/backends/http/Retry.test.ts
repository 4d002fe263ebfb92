import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Layer, Random, Schedule } from "effect"
import { TestClock } from "effect/testing"
import * as Client from "../../../src/backends/http/client/Client.ts"
import * as Retry from "../../../src/backends/http/client/Retry.ts"
import { adamParams } from "../../../src/contract/Contract.ts"
import { Trainer } from "../../../src/services/Trainer.ts"
import { fakeServer, type Script } from "./FakeServer.ts"

const F = (kind: Retry.FailureKind, extra: { status?: number; retryAfterMillis?: number } = {}) =>
  new Retry.HttpFailure({ kind, message: kind, ...extra })

/**
 * Runs a scripted call (fails with each failure in turn, then succeeds) under a
 * schedule on the TestClock; returns the clock time of every attempt and the exit.
 */
const attempts = (script: ReadonlyArray<Retry.HttpFailure>, schedule: Schedule.Schedule<unknown, Retry.HttpFailure>) =>
  Effect.gen(function* () {
    const times: Array<number> = []
    let i = 0
    const call = Effect.gen(function* () {
      times.push(Number(yield* Effect.clockWith((c) => c.currentTimeMillis)))
      const f = script[i++]
      if (f !== undefined) return yield* f
      return "ok"
    })
    const fiber = yield* Effect.forkChild(Effect.exit(Effect.retry(call, schedule)))
    for (let k = 0; k < 200; k++) yield* TestClock.adjust("1 second")
    const exit = yield* Fiber.join(fiber)
    return { times: times.map((t) => t - times[0]!), exit }
  })

const noJitter = Retry.policy({ jitter: 0 })

describe("Retry schedules (TestClock)", () => {
  it.effect("a submission backs off exponentially on 503 and then succeeds", () =>
    Effect.gen(function* () {
      const { times, exit } = yield* attempts([F("ServerError", { status: 503 }), F("ServerError"), F("Transport")], Retry.submission(noJitter))
      assert.isTrue(Exit.isSuccess(exit))
      assert.deepStrictEqual(times, [0, 500, 1500, 3500])
    }),
  )

  it.effect("Retry-After is honoured, and clipped to maxRetryAfter", () =>
    Effect.gen(function* () {
      const a = yield* attempts([F("RateLimited", { status: 429, retryAfterMillis: 7000 })], Retry.submission(noJitter))
      assert.deepStrictEqual(a.times, [0, 7000])
      const b = yield* attempts([F("RateLimited", { status: 429, retryAfterMillis: 600_000 })], Retry.submission(noJitter))
      assert.deepStrictEqual(b.times, [0, 60_000])
    }),
  )

  it.effect("back-off is capped at `cap`", () =>
    Effect.gen(function* () {
      const script = Array.from({ length: 9 }, () => F("Transport"))
      const { times } = yield* attempts(script, Retry.submission(noJitter))
      const gaps = times.slice(1).map((t, i) => t - times[i]!)
      assert.deepStrictEqual(gaps, [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000])
    }),
  )

  it.effect("jitter shortens each delay by at most `jitter`", () =>
    Effect.gen(function* () {
      const script = Array.from({ length: 6 }, () => F("Transport"))
      const { times } = yield* attempts(script, Retry.submission(Retry.standard)).pipe(Random.withSeed(42))
      const gaps = times.slice(1).map((t, i) => t - times[i]!)
      gaps.forEach((g, k) => {
        const full = Retry.backoffMillis(Retry.standard, k)
        assert.isAtMost(g, full)
        assert.isAtLeast(g, Math.floor(full * (1 - Retry.standard.jitter)))
      })
    }),
  )

  it.effect("other 4xx fail at once; 410 is not retried by the poll schedule", () =>
    Effect.gen(function* () {
      const a = yield* attempts([F("Fatal", { status: 400 })], Retry.submission())
      assert.deepStrictEqual(a.times, [0])
      assert.isTrue(Exit.isFailure(a.exit))
      const b = yield* attempts([F("Expired", { status: 410 })], Retry.polling())
      assert.deepStrictEqual(b.times, [0])
      const c = yield* attempts([F("Conflict", { status: 409 })], Retry.polling())
      assert.deepStrictEqual(c.times, [0])
    }),
  )

  it.effect("polls again at once on try_again, 408 and 5xx, and a real answer resets the back-off", () =>
    Effect.gen(function* () {
      const script = [F("Transport"), F("Transport"), F("TryAgain"), F("RequestTimeout"), F("ServerError", { status: 502 }), F("Transport")]
      const { times } = yield* attempts(script, Retry.polling(noJitter))
      assert.deepStrictEqual(times, [0, 500, 1500, 1500, 1500, 1500, 2000])
    }),
  )

  it.effect("gives up after maxElapsed without progress", () =>
    Effect.gen(function* () {
      const script = Array.from({ length: 1000 }, () => F("Transport"))
      const { times, exit } = yield* attempts(script, Retry.submission(Retry.policy({ jitter: 0, maxElapsed: "10 seconds" })))
      assert.isTrue(Exit.isFailure(exit))
      assert.deepStrictEqual(times, [0, 500, 1500, 3500, 7500, 10000])
    }),
  )

  // lib/api_future_impl.py: a 400 on retrieve_future is retried up to _MAX_BAD_REQUEST_RETRIES (3) times
  it.effect("a 400 that is not the server's is retried 3 times in a row; on a poll any 400 is, on a submission only that one", () =>
    Effect.gen(function* () {
      const bare = Array.from({ length: 5 }, () => F("BareBadRequest", { status: 400 }))
      const a = yield* attempts(bare, Retry.submission(noJitter))
      assert.isTrue(Exit.isFailure(a.exit))
      assert.deepStrictEqual(a.times, [0, 500, 1500, 3500])
      const b = yield* attempts([F("BareBadRequest", { status: 400 }), F("BareBadRequest", { status: 400 }), F("Transport"), ...bare.slice(0, 3)], Retry.submission(noJitter))
      assert.isTrue(Exit.isSuccess(b.exit))
      const c = yield* attempts([F("Fatal", { status: 400 }), F("Fatal", { status: 400 })], Retry.polling(noJitter))
      assert.isTrue(Exit.isSuccess(c.exit))
      const d = yield* attempts([F("Fatal", { status: 400 })], Retry.submission(noJitter))
      assert.deepStrictEqual(d.times, [0])
    }),
  )

  // lib/internal_client_holder.py _should_pause_on_billing: 5 s sleeps until billing_exception_max_pause_duration_sec
  it.effect("402 is tried again every billingRetryDelay until maxBillingPause, on a clock of its own", () =>
    Effect.gen(function* () {
      const paused = Array.from({ length: 100 }, () => F("BillingPaused", { status: 402 }))
      const a = yield* attempts(paused, Retry.submission(Retry.policy({ jitter: 0, maxBillingPause: "30 seconds" })))
      assert.isTrue(Exit.isFailure(a.exit))
      assert.deepStrictEqual(a.times, [0, 5000, 10000, 15000, 20000, 25000, 30000])
      // a pause longer than maxElapsed, with failures of another kind on either side
      const mixed = [F("Transport"), ...paused.slice(0, 30), F("Transport")]
      const b = yield* attempts(mixed, Retry.polling(Retry.policy({ jitter: 0, maxElapsed: "10 seconds" })))
      assert.isTrue(Exit.isSuccess(b.exit))
      assert.deepStrictEqual(b.times.slice(0, 3), [0, 500, 5500])
    }),
  )

  it("reads Retry-After as seconds, an HTTP date, or Retry-After-Ms", () => {
    assert.strictEqual(Retry.parseRetryAfter({ "retry-after": "3" }, 0), 3000)
    assert.strictEqual(Retry.parseRetryAfter({ "retry-after-ms": "250" }, 0), 250)
    const now = Date.parse("2026-01-01T00:00:00Z")
    assert.strictEqual(Retry.parseRetryAfter({ "retry-after": "Thu, 01 Jan 2026 00:00:05 GMT" }, now), 5000)
    assert.strictEqual(Retry.parseRetryAfter({ "retry-after": "soon" }, 0), undefined)
    assert.strictEqual(Retry.parseRetryAfter({}, 0), undefined)
  })

  it("classifies statuses", () => {
    assert.deepStrictEqual([200, 408, 409, 410, 429, 500, 503, 400, 401, 404, 422].map(Retry.kindOfStatus), [
      undefined,
      "RequestTimeout",
      "Conflict",
      "Expired",
      "RateLimited",
      "ServerError",
      "ServerError",
      "Fatal",
      "Fatal",
      "Fatal",
      "Fatal",
    ])
  })
})

// ---------------------------------------------------------------------------
// the client against a scripted fake server

const futures: Script = (path, body) => {
  if (path === "create_model") return { status: 200, body: { request_id: "r-create" } }
  if (path === "optim_step") return { status: 200, body: { request_id: `r-optim-${body.seq_id}` } }
  if (path === "retrieve_future") {
    if (body.request_id === "r-create") return { status: 200, body: { model_id: "s1:train:0" } }
    return { status: 200, body: { metrics: { grad_norm: 1 }, policy_version: 1 } }
  }
  return undefined as never
}

const connect = (fake: ReturnType<typeof fakeServer>, policy: Retry.Policy = Retry.policy({ jitter: 0 })) =>
  Client.layerNoDeps({ baseUrl: "http://fake.test", retry: policy, apiKey: undefined }).pipe(Layer.provide(fake.layer))

const optimStep = Effect.flatMap(Trainer, (t) => t.optimStep(adamParams()))

const runTimed = <A, E>(effect: Effect.Effect<A, E>) =>
  Effect.gen(function* () {
    const fiber = yield* Effect.forkChild(Effect.exit(effect))
    for (let k = 0; k < 100; k++) yield* TestClock.adjust("500 millis")
    return yield* Fiber.join(fiber)
  })

describe("the client's retries against a scripted server (TestClock)", () => {
  it.effect("503, 503, then 200 on a submission: three POSTs with one idempotency key, one step", () =>
    Effect.gen(function* () {
      const fake = fakeServer((path, body, n) => (path === "optim_step" && n <= 2 ? { status: 503, body: { detail: "busy" } } : futures(path, body, n)))
      const exit = yield* runTimed(optimStep.pipe(Effect.provide(connect(fake)), Effect.scoped))
      assert.isTrue(Exit.isSuccess(exit))
      const posts = fake.seen.filter((s) => s.path === "optim_step")
      assert.strictEqual(posts.length, 3)
      assert.strictEqual(new Set(posts.map((p) => p.key)).size, 1)
      assert.isDefined(posts[0]!.key)
      assert.deepStrictEqual(posts.map((p) => p.at - posts[0]!.at), [0, 500, 1500])
      assert.deepStrictEqual(posts.map((p) => (p.body as { seq_id: number }).seq_id), [1, 1, 1])
    }),
  )

  it.effect("429 with Retry-After: 7 waits 7 s", () =>
    Effect.gen(function* () {
      const fake = fakeServer((path, body, n) =>
        path === "optim_step" && n === 1 ? { status: 429, body: { detail: "slow down" }, headers: { "retry-after": "7" } } : futures(path, body, n),
      )
      const exit = yield* runTimed(optimStep.pipe(Effect.provide(connect(fake, Retry.policy({ jitter: 0 }))), Effect.scoped))
      assert.isTrue(Exit.isSuccess(exit))
      const posts = fake.seen.filter((s) => s.path === "optim_step")
      assert.deepStrictEqual(posts.map((p) => p.at - posts[0]!.at), [0, 7000])
    }),
  )

  it.effect("a dropped connection backs off and resends with the same key", () =>
    Effect.gen(function* () {
      const fake = fakeServer((path, body, n) => (path === "optim_step" && n === 1 ? "drop" : futures(path, body, n)))
      const exit = yield* runTimed(optimStep.pipe(Effect.provide(connect(fake)), Effect.scoped))
      assert.isTrue(Exit.isSuccess(exit))
      const posts = fake.seen.filter((s) => s.path === "optim_step")
      assert.strictEqual(posts.length, 2)
      assert.strictEqual(posts[0]!.key, posts[1]!.key)
    }),
  )

  it.effect("try_again and 408 re-poll at once; 410 resubmits the same request with the same key", () =>
    Effect.gen(function* () {
      let polls = 0
      const fake = fakeServer((path, body, n) => {
        if (path === "retrieve_future" && String(body.request_id).startsWith("r-optim")) {
          polls++
          if (polls === 1) return { status: 200, body: { type: "try_again", request_id: body.request_id, queue_state: "active" } }
          if (polls === 2) return { status: 408, body: { detail: "still working" } }
          if (polls === 3) return { status: 410, body: { detail: "expired" } }
        }
        return futures(path, body, n)
      })
      const exit = yield* runTimed(optimStep.pipe(Effect.provide(connect(fake)), Effect.scoped))
      assert.isTrue(Exit.isSuccess(exit))
      const posts = fake.seen.filter((s) => s.path === "optim_step")
      assert.strictEqual(posts.length, 2)
      assert.strictEqual(posts[0]!.key, posts[1]!.key)
      assert.deepStrictEqual(posts[0]!.body, posts[1]!.body)
      const pollTimes = fake.seen.filter((s) => s.path === "retrieve_future" && String((s.body as { request_id: string }).request_id).startsWith("r-optim"))
      assert.strictEqual(pollTimes.length, 4)
      assert.strictEqual(pollTimes[2]!.at, pollTimes[0]!.at)
    }),
  )

  it.effect("a submission that carries its result is not polled, and asks for it with X-Gyre-Wait-Ms", () =>
    Effect.gen(function* () {
      const fake = fakeServer((path, body, n) =>
        path === "optim_step" ? { status: 200, body: { request_id: "r-now", result: { metrics: { grad_norm: 2 }, policy_version: 7 } } } : futures(path, body, n),
      )
      const exit = yield* runTimed(optimStep.pipe(Effect.provide(connect(fake)), Effect.scoped))
      assert.isTrue(Exit.isSuccess(exit))
      assert.strictEqual(Exit.isSuccess(exit) ? exit.value.version : -1, 7)
      assert.strictEqual(fake.seen.filter((s) => s.path === "retrieve_future" && (s.body as { request_id: string }).request_id === "r-now").length, 0)
      assert.strictEqual(fake.seen.find((s) => s.path === "optim_step")?.wait, "20000")
    }),
  )

  it.effect("a 400 fails at once with the server's message", () =>
    Effect.gen(function* () {
      const fake = fakeServer((path, body, n) =>
        path === "optim_step" ? { status: 400, body: { detail: "adam_params.beta1: Expected a value between 0 and 1" } } : futures(path, body, n),
      )
      const exit = yield* runTimed(optimStep.pipe(Effect.provide(connect(fake)), Effect.scoped, Effect.flip))
      assert.isTrue(Exit.isSuccess(exit))
      const error = Exit.isSuccess(exit) && exit.value._tag === "BackendError" ? exit.value : undefined
      assert.strictEqual(error?.reason, "InvalidInput")
      assert.include(error?.message, "adam_params.beta1")
      assert.strictEqual(fake.seen.filter((s) => s.path === "optim_step").length, 1)
    }),
  )

  it.effect("a failed future keeps its reason", () =>
    Effect.gen(function* () {
      const fake = fakeServer((path, body, n) =>
        path === "retrieve_future" && String(body.request_id).startsWith("r-optim")
          ? { status: 200, body: { error: "optim_step: adam params out of range", category: "user", reason: "InvalidInput" } }
          : futures(path, body, n),
      )
      const exit = yield* runTimed(optimStep.pipe(Effect.provide(connect(fake)), Effect.scoped, Effect.flip))
      const error = Exit.isSuccess(exit) && exit.value._tag === "BackendError" ? exit.value : undefined
      assert.strictEqual(error?.reason, "InvalidInput")
      assert.include(error?.message, "adam params out of range")
    }),
  )

  it.effect("training calls take consecutive seq ids from 1", () =>
    Effect.gen(function* () {
      const fake = fakeServer(futures)
      const exit = yield* runTimed(
        Effect.gen(function* () {
          const t = yield* Trainer
          yield* t.optimStep(adamParams())
          yield* t.optimStep(adamParams())
          yield* t.optimStep(adamParams())
        }).pipe(Effect.provide(connect(fake)), Effect.scoped),
      )
      assert.isTrue(Exit.isSuccess(exit))
      assert.deepStrictEqual(
        fake.seen.filter((s) => s.path === "optim_step").map((p) => (p.body as { seq_id: number }).seq_id),
        [1, 2, 3],
      )
    }),
  )
})

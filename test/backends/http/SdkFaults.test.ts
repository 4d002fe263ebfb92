/**
 * The client under the official SDK's fault model, one status at a time, against a
 * scripted server on the TestClock. The scripted server keeps its idempotency keys, as a
 * Tinker server does: a submission sent again with a key it has seen gets the first
 * answer and runs nothing, so `executed` counts the operations that really ran.
 *
 * What the SDK (0.25.0) does, by file:
 * - `lib/api_future_impl.py`: `retrieve_future` answered 400 is retried up to
 *   `_MAX_BAD_REQUEST_RETRIES` (3) times ("bare HTTP 400, which an upstream proxy may
 *   inject spuriously"); 408 is polled again at once and its body's `queue_state` goes to
 *   the queue observer (`lib/queue_state_logger.py` warns when paused); 410 raises
 *   `RetryableException` ("Promise expired/broken") so the request is sent again; 402 is
 *   waited out in 5 s sleeps while `_should_pause_on_billing` says so.
 * - `lib/internal_client_holder.py`: `_should_pause_on_billing` pauses on 402 until the
 *   client config's `billing_exception_max_pause_duration_sec` (1 hour) has passed since
 *   the first one, then the call fails; `aclient` turns a 400 without a body (Cloudflare)
 *   into a connection error, which is retried; `execute_with_retries` retries 408, 409,
 *   429 and 5xx for 5 minutes.
 * - `_base_client.py` (`_should_retry`): 408, 409 ("lock timeouts"), 429 and 5xx are
 *   retried with the same `X-Idempotency-Key`.
 * - `resources/weights.py` (`get_checkpoint_archive_url`): a 503 from the archive route
 *   is slept on (30 s) and asked again, up to 6 times; a 302 gives the URL in `Location`.
 */
import { assert, describe, it } from "@effect/vitest"
import { Cause, Effect, Exit, Fiber, Layer, Logger, Redacted, References } from "effect"
import { TestClock } from "effect/testing"
import * as Checkpoints from "../../../src/backends/http/client/ClientCheckpoints.ts"
import * as Client from "../../../src/backends/http/client/Client.ts"
import * as Retry from "../../../src/backends/http/client/Retry.ts"
import { adamParams } from "../../../src/contract/Contract.ts"
import { Trainer } from "../../../src/services/Trainer.ts"
import { fakeServer, type Script, type Seen } from "./FakeServer.ts"

type Answer = ReturnType<Script>

/**
 * A scripted server with idempotency keys: `fault` may answer a request first (return
 * undefined to let it through); a submission through is run once per key, its result
 * kept for the polls.
 */
const scripted = (fault: (path: string, body: any, n: number, key: string | undefined) => Answer | "run-then-drop") => {
  const executed: Record<string, number> = {}
  const byKey = new Map<string, string>()
  const results = new Map<string, unknown>()
  const run = (path: string, body: any, key: string | undefined): string => {
    const known = key === undefined ? undefined : byKey.get(key)
    if (known !== undefined) return known
    executed[path] = (executed[path] ?? 0) + 1
    const id = `r-${path}-${executed[path]}`
    if (key !== undefined) byKey.set(key, id)
    results.set(
      id,
      path === "create_model"
        ? { model_id: "s1:train:0" }
        : path === "save_weights"
          ? { type: "save_weights", path: `tinker://s1:train:0/weights/${body.path}` }
          : { metrics: { grad_norm: 1 }, policy_version: executed[path] },
    )
    return id
  }
  const fake = fakeServer((path, body, n) => {
    const key: string | undefined = fake.seen[fake.seen.length - 1]?.key
    const answer = fault(path, body, n, key)
    if (answer === "run-then-drop") {
      run(path, body, key)
      return "drop"
    }
    if (answer !== undefined) return answer
    if (path === "create_model" || path === "optim_step" || path === "save_weights") return { status: 200, body: { request_id: run(path, body, key) } }
    if (path === "retrieve_future") return { status: 200, body: results.get(body.request_id) ?? { detail: "unknown" } }
    return undefined
  })
  return { ...fake, executed }
}

const connect = (fake: ReturnType<typeof fakeServer>, policy: Partial<Retry.Policy> = {}) =>
  Client.layerNoDeps({ baseUrl: "http://fake.test", apiKey: Redacted.make("k-0123456789"), retry: Retry.policy({ jitter: 0, ...policy }), submitWait: "0 millis" }).pipe(
    Layer.provide(fake.layer),
  )

/** Runs `effect` on the TestClock, moving time by `step` `times` times. */
const runTimed = <A, E>(effect: Effect.Effect<A, E>, step: string = "500 millis", times = 100) =>
  Effect.gen(function* () {
    const fiber = yield* Effect.forkChild(Effect.exit(effect))
    for (let k = 0; k < times; k++) yield* TestClock.adjust(step as never)
    return yield* Fiber.join(fiber)
  })

/** Log lines at every level. */
const capture = () => {
  const lines: Array<{ level: string; text: string }> = []
  const logger = Logger.make((o) => {
    lines.push({ level: o.logLevel, text: Array.isArray(o.message) ? o.message.map(String).join(" ") : String(o.message) })
  })
  return { lines, layer: Layer.mergeAll(Logger.layer([logger]), Layer.succeed(References.MinimumLogLevel, "All")) }
}

const errorOf = <A, E>(exit: Exit.Exit<A, E>) => (Exit.isFailure(exit) ? (Cause.squash(exit.cause) as { reason?: string; message?: string }) : undefined)
const posts = (seen: ReadonlyArray<Seen>, path: string) => seen.filter((s) => s.path === path)
const polls = (seen: ReadonlyArray<Seen>, prefix: string) =>
  seen.filter((s) => s.path === "retrieve_future" && String((s.body as { request_id: string }).request_id).startsWith(prefix))
const seqOf = (s: Seen) => (s.body as { seq_id: number }).seq_id

const optimStep = Effect.flatMap(Trainer, (t) => t.optimStep(adamParams()))
const PROXY_PAGE = "<html>\n<head><title>400 Bad Request</title></head>\n<body><center><h1>400 Bad Request</h1></center><hr><center>nginx</center></body>\n</html>"

describe("the client under the SDK's fault model (TestClock, scripted server)", () => {
  it.effect("a 400 from a proxy (an HTML page, or an empty body) is retried with the same key; one optimizer step", () =>
    Effect.gen(function* () {
      const fake = scripted((path, _b, n) =>
        path === "optim_step" && n === 1 ? { status: 400, body: PROXY_PAGE, headers: { "content-type": "text/html" } } : path === "optim_step" && n === 2 ? { status: 400, body: "" } : undefined,
      )
      const exit = yield* runTimed(optimStep.pipe(Effect.provide(connect(fake)), Effect.scoped))
      assert.isTrue(Exit.isSuccess(exit))
      const sent = posts(fake.seen, "optim_step")
      assert.strictEqual(sent.length, 3)
      assert.strictEqual(new Set(sent.map((s) => s.key)).size, 1)
      assert.deepStrictEqual(sent.map(seqOf), [1, 1, 1])
      assert.strictEqual(fake.executed["optim_step"], 1)
    }),
  )

  it.effect("a proxy that keeps answering 400: after 3 retries the error names HTTP 400 and the start of the page; the seq_id stays free", () =>
    Effect.gen(function* () {
      const fake = scripted((path, _b, n) => (path === "optim_step" && n <= 4 ? { status: 400, body: PROXY_PAGE } : undefined))
      const exit = yield* runTimed(
        Effect.gen(function* () {
          const trainer = yield* Trainer
          const first = yield* Effect.flip(trainer.optimStep(adamParams()))
          const second = yield* trainer.optimStep(adamParams())
          return { first, second }
        }).pipe(Effect.provide(connect(fake)), Effect.scoped),
      )
      assert.isTrue(Exit.isSuccess(exit))
      if (Exit.isFailure(exit)) return
      assert.strictEqual(exit.value.first.reason, "Transport")
      assert.include(exit.value.first.message, "HTTP 400 from something between gyre and the server")
      assert.include(exit.value.first.message, "<html> <head><title>400 Bad Request</title></head>")
      // four refused tries, then the next call: the refused number was never the server's, so it is sent again
      assert.deepStrictEqual(posts(fake.seen, "optim_step").map(seqOf), [1, 1, 1, 1, 1])
      assert.strictEqual(fake.executed["optim_step"], 1)
    }),
  )

  it.effect("the server's own JSON 400 fails a submission at once; on retrieve_future a 400 is retried 3 times, as the SDK does", () =>
    Effect.gen(function* () {
      const refused = scripted((path) => (path === "optim_step" ? { status: 400, body: { detail: "adam_params.lr: must be positive" } } : undefined))
      const e1 = errorOf(yield* runTimed(optimStep.pipe(Effect.provide(connect(refused)), Effect.scoped)))
      assert.strictEqual(e1?.reason, "InvalidInput")
      assert.include(e1?.message, "HTTP 400: adam_params.lr: must be positive")
      assert.strictEqual(posts(refused.seen, "optim_step").length, 1)

      const flaky = scripted((path, body) =>
        path === "retrieve_future" && String(body.request_id).startsWith("r-optim") && polls(flaky.seen, "r-optim").length <= 3
          ? { status: 400, body: { detail: "bad request" } }
          : undefined,
      )
      const exit = yield* runTimed(optimStep.pipe(Effect.provide(connect(flaky)), Effect.scoped))
      assert.isTrue(Exit.isSuccess(exit))
      assert.strictEqual(polls(flaky.seen, "r-optim").length, 4)
      assert.strictEqual(flaky.executed["optim_step"], 1)

      const stuck = scripted((path, body) => (path === "retrieve_future" && String(body.request_id).startsWith("r-optim") ? { status: 400, body: "" } : undefined))
      const e3 = errorOf(yield* runTimed(optimStep.pipe(Effect.provide(connect(stuck)), Effect.scoped)))
      assert.include(e3?.message, "HTTP 400")
      assert.include(e3?.message, "(empty body)")
      assert.strictEqual(polls(stuck.seen, "r-optim").length, 4)
    }),
  )

  it.effect("402 (billing pause) on a submission and on a poll: tried again every 5 s, past maxElapsed, and the step runs once", () =>
    Effect.gen(function* () {
      const paused = (at: number) => at < 6 * 60_000
      const fake = scripted((path, body) => {
        const at = fake.seen[fake.seen.length - 1]!.at
        if (path === "optim_step" && paused(at)) return { status: 402, body: { detail: "billing: the account has no credit" } }
        if (path === "retrieve_future" && String(body.request_id).startsWith("r-optim") && at < 7 * 60_000) return { status: 402, body: { detail: "billing: the account has no credit" } }
        return undefined
      })
      const exit = yield* runTimed(optimStep.pipe(Effect.provide(connect(fake)), Effect.scoped), "5 seconds", 100)
      assert.isTrue(Exit.isSuccess(exit))
      const sent = posts(fake.seen, "optim_step")
      assert.strictEqual(sent.length, 6 * 12 + 1)
      assert.deepStrictEqual(sent.slice(0, 3).map((s) => s.at), [0, 5000, 10000])
      assert.strictEqual(new Set(sent.map((s) => s.key)).size, 1)
      assert.strictEqual(polls(fake.seen, "r-optim").length, 12 + 1)
      assert.strictEqual(fake.executed["optim_step"], 1)
    }),
  )

  it.effect("402 for longer than maxBillingPause fails, naming the status and the pause; warned about once a minute", () => {
    const logs = capture()
    return Effect.gen(function* () {
      const fake = scripted((path) => (path === "optim_step" ? { status: 402, body: { detail: "billing: payment required" } } : undefined))
      const exit = yield* runTimed(optimStep.pipe(Effect.provide(connect(fake, { maxBillingPause: "1 minute" })), Effect.scoped), "1 second", 90)
      const error = errorOf(exit)
      assert.strictEqual(error?.reason, "Rejected")
      assert.include(error?.message, "HTTP 402: billing: payment required")
      assert.include(error?.message, "paused for billing")
      assert.deepStrictEqual(posts(fake.seen, "optim_step").map((s) => s.at), Array.from({ length: 13 }, (_, k) => k * 5000))
      assert.isUndefined(fake.executed["optim_step"])
      assert.deepStrictEqual(logs.lines.filter((l) => l.level === "Warn" && l.text.includes("HTTP 402")).length, 1)
    }).pipe(Effect.provide(logs.layer))
  })

  it.effect("408 with a queue_state body on retrieve_future: polled again at once, the paused queue logged once; one step", () => {
    const logs = capture()
    return Effect.gen(function* () {
      const body = { type: "try_again", request_id: "r", queue_state: "paused_capacity", queue_state_reason: "the backend is short on capacity" }
      const fake = scripted((path, b) => {
        const k = polls(fake.seen, "r-optim").length
        if (path !== "retrieve_future" || !String(b.request_id).startsWith("r-optim")) return undefined
        if (k <= 3) return { status: 408, body }
        if (k === 4) return { status: 200, body: { type: "try_again", request_id: b.request_id, queue_state: "active" } }
        return undefined
      })
      const exit = yield* runTimed(optimStep.pipe(Effect.provide(connect(fake)), Effect.scoped))
      assert.isTrue(Exit.isSuccess(exit))
      const p = polls(fake.seen, "r-optim")
      assert.strictEqual(p.length, 5)
      assert.isTrue(p.every((s) => s.at === p[0]!.at))
      const queued = logs.lines.filter((l) => l.text.includes("paused_capacity"))
      assert.strictEqual(queued.length, 1, JSON.stringify(logs.lines))
      assert.strictEqual(queued[0]!.level, "Warn")
      assert.include(queued[0]!.text, "optim_step is waiting in the server's queue, paused_capacity: the backend is short on capacity")
      assert.strictEqual(fake.executed["optim_step"], 1)
    }).pipe(Effect.provide(logs.layer))
  })

  it.effect("409 on a retried save: the save ran, its answer was lost, the retry met a lock; one save, and its path comes back", () =>
    Effect.gen(function* () {
      const fake = scripted((path, _b, n) =>
        path === "save_weights" && n === 1 ? "run-then-drop" : path === "save_weights" && n === 2 ? { status: 409, body: { detail: "a request with this idempotency key is in progress" } } : undefined,
      )
      const exit = yield* runTimed(
        Effect.gen(function* () {
          const trainer = yield* Trainer
          const saved = yield* trainer.saveState("ckpt-1")
          yield* trainer.optimStep(adamParams())
          return saved
        }).pipe(Effect.provide(connect(fake)), Effect.scoped),
      )
      assert.isTrue(Exit.isSuccess(exit))
      assert.strictEqual(Exit.isSuccess(exit) ? exit.value.path : "", "tinker://s1:train:0/weights/ckpt-1")
      const sent = posts(fake.seen, "save_weights")
      assert.strictEqual(sent.length, 3)
      assert.strictEqual(new Set(sent.map((s) => s.key)).size, 1)
      assert.deepStrictEqual(sent.map(seqOf), [1, 1, 1])
      assert.strictEqual(fake.executed["save_weights"], 1)
      assert.deepStrictEqual(posts(fake.seen, "optim_step").map(seqOf), [2])
    }),
  )

  it.effect("410 on retrieve_future: the same request is sent again with the same key; the step runs once", () =>
    Effect.gen(function* () {
      const fake = scripted((path, b) =>
        path === "retrieve_future" && String(b.request_id).startsWith("r-optim") && polls(fake.seen, "r-optim").length <= 2
          ? { status: 410, body: { detail: "promise expired" } }
          : undefined,
      )
      const exit = yield* runTimed(optimStep.pipe(Effect.provide(connect(fake)), Effect.scoped))
      assert.isTrue(Exit.isSuccess(exit))
      const sent = posts(fake.seen, "optim_step")
      assert.strictEqual(sent.length, 3)
      assert.strictEqual(new Set(sent.map((s) => s.key)).size, 1)
      assert.deepStrictEqual(sent.map((s) => s.body), [sent[0]!.body, sent[0]!.body, sent[0]!.body])
      assert.strictEqual(fake.executed["optim_step"], 1)

      const gone = scripted((path, b) => (path === "retrieve_future" && String(b.request_id).startsWith("r-optim") ? { status: 410, body: { detail: "promise expired" } } : undefined))
      const error = errorOf(yield* runTimed(optimStep.pipe(Effect.provide(connect(gone)), Effect.scoped)))
      assert.strictEqual(error?.reason, "Unavailable")
      assert.include(error?.message, "HTTP 410: promise expired")
      assert.strictEqual(posts(gone.seen, "optim_step").length, 1 + Retry.standard.maxResubmits)
    }),
  )

  it.effect("503 on the archive route while the archive is built: Retry-After is waited, then the 302's Location is downloaded once", () => {
    const logs = capture()
    return Effect.gen(function* () {
      const fake = fakeServer((path, _b, n): Answer => {
        if (path.startsWith("training_runs/") && path.endsWith("/archive")) {
          return n <= 2 ? { status: 503, body: { detail: "the archive is being built" }, headers: { "retry-after": "10" } } : { status: 302, headers: { location: "http://files.test/blob/ckpt-1.tar" } }
        }
        if (path === "/blob/ckpt-1.tar") return { status: 200, body: "state-file-bytes", headers: { "content-type": "application/octet-stream" } }
        return undefined
      })
      const exit = yield* runTimed(
        Checkpoints.download("tinker://s1:train:0/weights/ckpt-1", { baseUrl: "http://fake.test", apiKey: Redacted.make("k-0123456789"), retry: Retry.policy({ jitter: 0 }) }).pipe(
          Effect.provide(fake.layer),
        ),
        "1 second",
        60,
      )
      assert.isTrue(Exit.isSuccess(exit))
      assert.strictEqual(Exit.isSuccess(exit) ? new TextDecoder().decode(exit.value) : "", "state-file-bytes")
      const asked = fake.seen.filter((s) => s.path.endsWith("/archive"))
      assert.deepStrictEqual(asked.map((s) => s.at), [0, 10_000, 20_000])
      assert.strictEqual(fake.seen.filter((s) => s.path === "/blob/ckpt-1.tar").length, 1)
      const waits = logs.lines.filter((l) => l.level === "Warn" && l.text.includes("HTTP 503"))
      assert.strictEqual(waits.length, 2)
      assert.include(waits[0]!.text, "the archive is being built")
    }).pipe(Effect.provide(logs.layer))
  })
})

import { assert, describe, it } from "@effect/vitest"
import { Cause, ConfigProvider, Effect, Exit, Fiber, Layer, Logger, Redacted, References } from "effect"
import { TestClock } from "effect/testing"
import * as Client from "../../../src/backends/http/client/Client.ts"
import * as Retry from "../../../src/backends/http/client/Retry.ts"
import { adamParams, modelInputFromTokens } from "../../../src/contract/Contract.ts"
import { Sampler } from "../../../src/services/Sampler.ts"
import { Trainer } from "../../../src/services/Trainer.ts"
import { fakeServer, type Script } from "./FakeServer.ts"

const SECRET = "tml-echo-s3cr3t-0123456789"

/** Log lines at the default level and above (what a user sees), with their causes. */
const capture = () => {
  const lines: Array<{ level: string; text: string }> = []
  const logger = Logger.make((o) => {
    lines.push({ level: o.logLevel, text: `${Array.isArray(o.message) ? o.message.map(String).join(" ") : String(o.message)} ${Cause.pretty(o.cause)}` })
  })
  return { lines, layer: Layer.mergeAll(Logger.layer([logger]), Layer.succeed(References.MinimumLogLevel, "All")) }
}

const futures: Script = (path, body) => {
  if (path === "create_model") return { status: 200, body: { request_id: "r-create" } }
  if (path === "optim_step") return { status: 200, body: { request_id: `r-optim-${body.seq_id}` } }
  if (path === "retrieve_future") {
    if (body.request_id === "r-create") return { status: 200, body: { model_id: "s1:train:0" } }
    return { status: 200, body: { metrics: { grad_norm: 1 }, policy_version: 1 } }
  }
  return undefined
}

const connect = (fake: ReturnType<typeof fakeServer>, options: Client.Options = {}) =>
  Client.layerNoDeps({ baseUrl: "http://fake.test", retry: Retry.policy({ jitter: 0 }), ...options }).pipe(Layer.provide(fake.layer))

/** Runs `effect` on the TestClock, moving time by `step` `times` times. */
const runTimed = <A, E>(effect: Effect.Effect<A, E>, step: string = "500 millis", times = 100) =>
  Effect.gen(function* () {
    const fiber = yield* Effect.forkChild(Effect.exit(effect))
    for (let k = 0; k < times; k++) yield* TestClock.adjust(step as never)
    return yield* Fiber.join(fiber)
  })

const errorOf = <A, E>(exit: Exit.Exit<A, E>) => (Exit.isFailure(exit) ? (Cause.squash(exit.cause) as { reason?: string; message?: string }) : undefined)

describe("the client under faults (TestClock, scripted server)", () => {
  it.effect("a server that echoes the key: neither errors nor logs show it", () => {
    const logs = capture()
    return Effect.gen(function* () {
      let n = 0
      const fake = fakeServer((path, body, k) => {
        if (path === "optim_step" && k <= 2) return { status: 503, body: { detail: `overloaded; your headers: x-api-key=${SECRET}` } }
        // a proxy's page, retried (as a 400 that is not the server's JSON) until the client gives up
        if (path === "optim_step" && k >= 3) return { status: 400, body: `<html>bad request from key ${JSON.stringify(SECRET)} ${encodeURIComponent(SECRET)}</html>` }
        if (path === "retrieve_future" && String(body.request_id).startsWith("r-optim")) {
          n++
          return { status: 200, body: { error: `optim_step failed for X-API-Key: ${SECRET}`, category: "user" } }
        }
        return futures(path, body, k)
      })
      const step = Effect.flatMap(Trainer, (t) => t.optimStep(adamParams()))
      const first = yield* runTimed(step.pipe(Effect.provide(connect(fake, { apiKey: Redacted.make(SECRET) })), Effect.scoped))
      const e1 = errorOf(first)
      assert.strictEqual(e1?.reason, "Transport")
      assert.include(e1?.message, "HTTP 400")
      assert.include(e1?.message, "<html>bad request from key")
      assert.include(e1?.message, "<redacted>")
      const all = [String(e1), JSON.stringify(e1), e1?.message ?? "", ...logs.lines.map((l) => l.text)]
      assert.isAtLeast(logs.lines.filter((l) => l.level === "Warn").length, 2)
      for (const t of all) assert.notInclude(t, SECRET)
      // a failed future's message too
      const fake2 = fakeServer((path, body, k) =>
        path === "retrieve_future" && String(body.request_id).startsWith("r-optim")
          ? { status: 200, body: { error: `optim_step failed for X-API-Key: ${SECRET}`, category: "user" } }
          : futures(path, body, k),
      )
      const second = yield* runTimed(step.pipe(Effect.provide(connect(fake2, { apiKey: Redacted.make(SECRET) })), Effect.scoped))
      assert.include(errorOf(second)?.message, "X-API-Key: <redacted>")
      assert.notInclude(String(errorOf(second)), SECRET)
      assert.strictEqual(n, 0)
    }).pipe(Effect.provide(logs.layer))
  })

  it.effect("nothing listening: each retry is a warning saying until when, and the client gives up after maxUnreachable", () => {
    const logs = capture()
    return Effect.gen(function* () {
      const refused = Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:9"), { code: "ECONNREFUSED" })
      const fake = fakeServer(() => ({ error: refused }))
      const exit = yield* runTimed(Effect.scoped(Layer.build(connect(fake))), "1 second", 60)
      const error = errorOf(exit)
      assert.strictEqual(error?.reason, "Unavailable")
      assert.include(error?.message, "nothing answers at http://fake.test")
      assert.include(error?.message, "server is running")
      const attempts = fake.seen.filter((s) => s.path === "create_session")
      // 0.5 + 1 + 2 + 4 + 7.5 (cut at 15 s): six attempts, then it stops
      assert.deepStrictEqual(attempts.map((a) => a.at), [0, 500, 1500, 3500, 7500, 15000])
      const warnings = logs.lines.filter((l) => l.level === "Warn" && l.text.startsWith("create_session"))
      assert.strictEqual(warnings.length, attempts.length - 1, JSON.stringify(logs.lines.slice(0, 3)))
      for (const w of warnings) assert.match(w.text, /ECONNREFUSED.*retry \d+ in .*giving up at 1970-01-01T00:00:15\.000Z/)
    }).pipe(Effect.provide(logs.layer))
  })

  it.effect("once the server has answered, a refused connection (a restart) is retried for maxElapsed", () =>
    Effect.gen(function* () {
      const refused = Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" })
      const fake = fakeServer((path, body, n) => (path === "optim_step" && n <= 8 ? { error: refused } : futures(path, body, n)))
      const exit = yield* runTimed(Effect.flatMap(Trainer, (t) => t.optimStep(adamParams())).pipe(Effect.provide(connect(fake)), Effect.scoped), "1 second", 120)
      assert.isTrue(Exit.isSuccess(exit))
      assert.strictEqual(fake.seen.filter((s) => s.path === "optim_step").length, 9)
    }),
  )

  it.effect("a request that cannot be sent (an invalid header value) fails at once, without retries", () =>
    Effect.gen(function* () {
      const invalid = Object.assign(new Error("invalid x-api-key header"), { code: "UND_ERR_INVALID_ARG" })
      const fake = fakeServer((path) => (path === "create_session" ? { error: invalid } : undefined))
      const exit = yield* runTimed(Effect.scoped(Layer.build(connect(fake))))
      assert.strictEqual(errorOf(exit)?.reason, "InvalidInput")
      assert.include(errorOf(exit)?.message, "no retry can fix that")
      assert.strictEqual(fake.seen.length, 1)
    }),
  )

  it.effect("a key with a line break is refused before any request, naming its variable and not its value", () =>
    Effect.gen(function* () {
      const fake = fakeServer(futures)
      const key = `${SECRET}\n`
      const exit = yield* runTimed(
        Effect.scoped(Layer.build(Client.layerNoDeps({ baseUrl: "http://fake.test" }).pipe(Layer.provide(fake.layer), Layer.provide(ConfigProvider.layer(ConfigProvider.fromUnknown({ TINKER_API_KEY: key })))))),
      )
      const error = errorOf(exit)
      assert.strictEqual(error?.reason, "InvalidInput")
      assert.include(error?.message, "TINKER_API_KEY has a line break at character 27 of 27")
      assert.notInclude(String(error), SECRET)
      assert.strictEqual(fake.seen.length, 0)
    }),
  )

  it.effect("a sample pinned to a version the server never serves fails after readyTimeout, naming both versions, though the server says try_again", () =>
    Effect.gen(function* () {
      const fake = fakeServer((path, body, n) => {
        if (path === "asample") return { status: 200, body: { request_id: "r-sample" } }
        if (path === "retrieve_future" && body.request_id === "r-sample") return { status: 200, body: { type: "try_again", request_id: "r-sample" } }
        if (path.startsWith("samplers/")) return { status: 200, body: { sampler_id: "fake", base_model: "fake", policy_version: 3 } }
        return futures(path, body, n)
      })
      const sample = Effect.flatMap(Sampler, (s) => s.sample(modelInputFromTokens([1, 2]), { maxTokens: 2, temperature: 1 }, { numSamples: 1, minPolicyVersion: 7 }))
      const exit = yield* runTimed(sample.pipe(Effect.provide(connect(fake, { readyTimeout: "10 minutes", retry: Retry.policy({ jitter: 0, repollDelay: "5 seconds" }) })), Effect.scoped), "1 minute", 11)
      const error = errorOf(exit)
      assert.strictEqual(error?.reason, "Timeout")
      assert.include(error?.message, "policy version 7")
      assert.include(error?.message, "serves version 3")
      assert.isAbove(fake.seen.filter((s) => s.path === "retrieve_future").length, 10)
    }),
  )
})

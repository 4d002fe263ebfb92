import { assert, describe, it } from "@effect/vitest"
import { Cause, ConfigProvider, Effect, Exit, Layer, Logger, Redacted, References } from "effect"
import * as Client from "../../../src/backends/http/client/Client.ts"
import * as Retry from "../../../src/backends/http/client/Retry.ts"
import * as Server from "../../../src/backends/http/server/Server.ts"
import { Sampler } from "../../../src/services/Sampler.ts"
import { Trainer } from "../../../src/services/Trainer.ts"
import { faultProxy } from "./FaultProxy.ts"
import { rlSequence, toySequence } from "./Sequence.ts"
import { makeToy } from "./ToyBackend.ts"

const SECRET = "tml-s3cr3t-0123456789abcdef"
const OTHER = "tml-wrong-fedcba9876543210"

/** Every log line, at every level, rendered as text with its cause. */
const capture = () => {
  const lines: Array<string> = []
  const logger = Logger.make((options) => {
    lines.push(`${options.logLevel} ${JSON.stringify(options.message, (_, v) => (typeof v === "bigint" ? String(v) : v))} ${Cause.pretty(options.cause)}`)
    lines.push(Logger.formatLogFmt.log(options))
  })
  const layer = Layer.mergeAll(Logger.layer([logger]), Layer.succeed(References.MinimumLogLevel, "All"))
  return { lines, layer }
}

const env = (vars: Record<string, string>) => ConfigProvider.layer(ConfigProvider.fromUnknown(vars))

describe("the API key", () => {
  it.live(
    "is sent, checked, and never logged, even through retries",
    () => {
      const logs = capture()
      return Effect.gen(function* () {
        const toy = makeToy()
        const server = yield* Server.make({ apiKey: Redacted.make(SECRET) }).pipe(
          Effect.provideService(Trainer, toy.trainer),
          Effect.provideService(Sampler, toy.sampler),
        )
        const proxy = yield* faultProxy({ upstream: server.url, rate: 0.25, seed: 5 })
        const result = yield* rlSequence({ ...toySequence, steps: 2 }).pipe(
          Effect.provide(Client.layer({ baseUrl: proxy.url, retry: Retry.fast }).pipe(Layer.provide(env({ TINKER_API_KEY: SECRET })))),
        )
        assert.strictEqual(result.versions.length, 2)
        assert.isAbove(logs.lines.length, 10)
        for (const line of logs.lines) assert.notInclude(line, SECRET)
      }).pipe(Effect.scoped, Effect.provide(logs.layer))
    },
  )

  it.live(
    "a wrong or missing key fails with a message that names neither key",
    () =>
      Effect.gen(function* () {
        const logs = capture()
        const toy = makeToy()
        const server = yield* Server.make({ apiKey: Redacted.make(SECRET) }).pipe(
          Effect.provideService(Trainer, toy.trainer),
          Effect.provideService(Sampler, toy.sampler),
        )
        for (const vars of [{ TINKER_API_KEY: OTHER }, { BASETEN_API_KEY: OTHER }, {}] as Array<Record<string, string>>) {
          const exit = yield* Effect.exit(
            Effect.scoped(Layer.build(Client.layer({ baseUrl: server.url, retry: Retry.fast }).pipe(Layer.provide(env(vars))))).pipe(
              Effect.provide(logs.layer),
            ),
          )
          assert.isTrue(Exit.isFailure(exit))
          const error = Exit.isFailure(exit) ? Cause.squash(exit.cause) : undefined
          const texts = [String(error), JSON.stringify(error), Exit.isFailure(exit) ? Cause.pretty(exit.cause) : "", (error as Error).message]
          assert.include(texts[0], "401")
          assert.include(texts[0], "X-API-Key")
          for (const t of texts) {
            assert.notInclude(t, SECRET)
            assert.notInclude(t, OTHER)
          }
        }
        for (const line of logs.lines) {
          assert.notInclude(line, SECRET)
          assert.notInclude(line, OTHER)
        }
      }).pipe(Effect.scoped),
  )

  it("is read as Redacted: printing it shows nothing", () => {
    const key = Redacted.make(SECRET)
    assert.notInclude(String(key), SECRET)
    assert.notInclude(JSON.stringify({ key }), SECRET)
  })
})

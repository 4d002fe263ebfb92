import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Client from "../../../src/backends/http/Client.ts"
import * as Retry from "../../../src/backends/http/Retry.ts"
import * as Server from "../../../src/backends/http/Server.ts"
import { Sampler } from "../../../src/Sampler.ts"
import { Trainer } from "../../../src/Trainer.ts"
import { rlSequence, toySequence } from "./Sequence.ts"
import { makeToy } from "./ToyBackend.ts"

const inProcess = Effect.gen(function* () {
  const toy = makeToy()
  const result = yield* rlSequence(toySequence).pipe(Effect.provideService(Trainer, toy.trainer), Effect.provideService(Sampler, toy.sampler))
  return { result, toy }
})

const overHttp = Effect.gen(function* () {
  const toy = makeToy()
  const server = yield* Server.make({}).pipe(Effect.provideService(Trainer, toy.trainer), Effect.provideService(Sampler, toy.sampler))
  const result = yield* rlSequence(toySequence).pipe(Effect.provide(Client.layer({ baseUrl: server.url, retry: Retry.fast })))
  return { result, toy, server }
}).pipe(Effect.scoped)

describe("http backend end to end (toy backend)", () => {
  it.effect("an RL sequence over loopback equals the in-process one", () =>
    Effect.gen(function* () {
      const a = yield* inProcess
      const b = yield* overHttp
      assert.closeTo(b.result.losses[0]!, a.result.losses[0]!, 1e-5)
      assert.deepStrictEqual(b.result.losses, a.result.losses)
      assert.deepStrictEqual(b.result.versions, [1, 2, 3])
      assert.deepStrictEqual(b.result.sampleVersions, a.result.sampleVersions)
      assert.deepStrictEqual(b.result.samples, a.result.samples)
      assert.deepStrictEqual(b.result.finalLogprobs, a.result.finalLogprobs)
      assert.deepStrictEqual(b.result.forwardLogprobs, a.result.forwardLogprobs)
      assert.deepStrictEqual([...b.toy.weights()], [...a.toy.weights()])
      assert.strictEqual(b.toy.counters.optimSteps, 3)
      assert.strictEqual(b.result.info.version, 3)
    }),
  )
})

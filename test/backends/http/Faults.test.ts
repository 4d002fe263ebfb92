import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Client from "../../../src/backends/http/client/Client.ts"
import * as Retry from "../../../src/backends/http/client/Retry.ts"
import * as Server from "../../../src/backends/http/server/Server.ts"
import { Sampler } from "../../../src/services/Sampler.ts"
import { Trainer } from "../../../src/services/Trainer.ts"
import { faultProxy } from "./FaultProxy.ts"
import { rlSequence, toySequence } from "./Sequence.ts"
import { makeToy } from "./ToyBackend.ts"

const sequence = { ...toySequence, steps: 4, groups: 6 }

const run = (disturbed: boolean, seed: number, submitWait: "0 millis" | "20 seconds" = "20 seconds") =>
  Effect.gen(function* () {
    const toy = makeToy()
    const server = yield* Server.make({}).pipe(Effect.provideService(Trainer, toy.trainer), Effect.provideService(Sampler, toy.sampler))
    const proxy = disturbed ? yield* faultProxy({ upstream: server.url, rate: 0.2, seed }) : undefined
    const result = yield* rlSequence(sequence).pipe(
      Effect.provide(
        Client.layer({
          baseUrl: proxy?.url ?? server.url,
          retry: Retry.policy({ maxElapsed: "20 seconds" }, Retry.fast),
          requestTimeout: "5 seconds",
          submitWait,
          // one future at a time, so the requests (and the faults the seeded proxy gives them, in
          // arrival order) are the same on a loaded machine; batched retrieval under faults is
          // WireFaults.test.ts's
          batchedRetrieval: false,
        }),
      ),
    )
    return { result, toy, server, proxy }
  }).pipe(Effect.scoped)

describe("http backend under faults", () => {
  it.live(
    "408s, 429s, 503s, dropped connections and slow answers change nothing",
    () =>
      Effect.gen(function* () {
        const calm = yield* run(false, 0)
        // seed 1 polls every future; seed 2 lets submissions carry their results
        for (const [seed, submitWait] of [[1, "0 millis"], [2, "20 seconds"]] as const) {
          const rough = yield* run(true, seed, submitWait)
          const injected = rough.proxy!.injected
          assert.isAtLeast(Object.values(injected).reduce((a, b) => a + b, 0), 8, JSON.stringify(injected))
          for (const kind of ["408", "429", "503", "drop-before", "drop-after", "slow"] as const) {
            assert.isAtLeast(injected[kind], 1, `no ${kind} was injected: ${JSON.stringify(injected)}`)
          }
          // every optimizer step ran exactly once, whatever was retried
          assert.strictEqual(rough.toy.counters.optimSteps, sequence.steps)
          assert.strictEqual(rough.toy.counters.forwardBackward, sequence.steps)
          assert.strictEqual(rough.toy.counters.publishes, sequence.steps + 1)
          assert.strictEqual(rough.toy.counters.samples, calm.toy.counters.samples)
          assert.strictEqual(rough.result.info.version, sequence.steps)
          assert.isAtLeast(rough.server.stats.deduplicated, 1)
          // and the run is the undisturbed one
          assert.deepStrictEqual(rough.result.losses, calm.result.losses)
          assert.deepStrictEqual(rough.result.samples, calm.result.samples)
          assert.deepStrictEqual(rough.result.finalLogprobs, calm.result.finalLogprobs)
          assert.deepStrictEqual(rough.result.forwardLogprobs, calm.result.forwardLogprobs)
          assert.deepStrictEqual([...rough.toy.weights()], [...calm.toy.weights()])
        }
      }),
  )
})

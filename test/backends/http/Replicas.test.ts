import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Client from "../../../src/backends/http/client/Client.ts"
import * as Retry from "../../../src/backends/http/client/Retry.ts"
import * as Serve from "../../../src/backends/local/Serve.ts"
import * as Server from "../../../src/backends/http/server/Server.ts"
import { adamParams, modelInputFromTokens } from "../../../src/contract/Contract.ts"
import * as D from "../../../src/vocabulary/Datum.ts"
import { Sampler, type SamplerShape } from "../../../src/services/Sampler.ts"
import { Trainer } from "../../../src/services/Trainer.ts"
import { makeToy } from "./ToyBackend.ts"

describe("sampler replicas", () => {
  it("consistent hashing: stable, balanced, and adding a replica moves few keys", () => {
    const keys = Array.from({ length: 2000 }, (_, i) => `run-7/step-${i % 50}/group-${i}`)
    const four = Server.makeRouter(4)
    const again = Server.makeRouter(4)
    const counts = [0, 0, 0, 0]
    for (const k of keys) {
      assert.strictEqual(four(k), again(k))
      counts[four(k)]!++
    }
    for (const c of counts) assert.isAbove(c, 2000 * 0.15)
    // short, similar keys spread too
    const short = [0, 0, 0, 0]
    for (let i = 0; i < 400; i++) short[four(`g${i}`)]!++
    for (const c of short) assert.isAbove(c, 400 * 0.15)
    const five = Server.makeRouter(5)
    const moved = keys.filter((k) => five(k) !== four(k) && five(k) !== 4).length
    assert.isBelow(moved / keys.length, 0.05)
    const toNew = keys.filter((k) => five(k) === 4).length
    assert.isBelow(toNew / keys.length, 0.35)
  })

  it.live("one affinity key always lands on one replica", () =>
    Effect.gen(function* () {
      const toy = makeToy()
      const seen = new Map<string, Set<number>>()
      const replicas: Array<SamplerShape> = [0, 1, 2].map((i) => ({
        ...toy.sampler,
        sample: (prompt, params, options) =>
          Effect.suspend(() => {
            const key = options.affinityKey ?? "(none)"
            seen.set(key, (seen.get(key) ?? new Set()).add(i))
            return toy.sampler.sample(prompt, params, options)
          }),
      }))
      const server = yield* Server.make({ replicas }).pipe(Effect.provideService(Trainer, toy.trainer), Effect.provideService(Sampler, toy.sampler))
      yield* Effect.gen(function* () {
        const sampler = yield* Sampler
        yield* Effect.forEach(
          Array.from({ length: 60 }, (_, i) => i),
          (i) =>
            sampler.sample(modelInputFromTokens([1, 2, 3]), { maxTokens: 2, temperature: 1, seed: i }, { numSamples: 2, affinityKey: `group-${i % 12}` }),
          { concurrency: 8 },
        )
      }).pipe(Effect.provide(Client.layer({ baseUrl: server.url, retry: Retry.fast })))
      assert.strictEqual(seen.size, 12)
      for (const [key, replicasHit] of seen) {
        assert.strictEqual(replicasHit.size, 1, key)
        assert.strictEqual([...replicasHit][0], server.route(key))
      }
      assert.isAbove(new Set([...seen.values()].map((s) => [...s][0])).size, 1)
      assert.deepStrictEqual(
        server.stats.replicaRequests.reduce((a, b) => a + b, 0),
        60,
      )
    }).pipe(Effect.scoped),
  )
})

describe("serve: the embedded backend with replicas", () => {
  it.live(
    "publishing reaches every replica, and sampling pinned to the new version is served by all of them",
    () =>
      Effect.gen(function* () {
        const backend = yield* Serve.embedded({
          config: { vocabSize: 99, contextLength: 32, nLayers: 1, dModel: 16, nHeads: 2, mlpRatio: 2 },
          lora: { rank: 2, alpha: 4, targets: ["q", "v"] },
          replicas: 3,
          seed: 3,
        })
        const server = yield* Server.make({ replicas: backend.replicas, vocabSize: backend.vocabSize }).pipe(
          Effect.provideService(Trainer, backend.trainer),
          Effect.provideService(Sampler, backend.sampler),
        )
        yield* Effect.gen(function* () {
          const trainer = yield* Trainer
          const sampler = yield* Sampler
          const data = [D.rl({ prompt: [1, 40, 41], completion: [42, 43, 2], samplerLogprobs: [-4, -4, -4], advantage: 1 })]
          yield* trainer.forwardBackward(data, "importance_sampling")
          const step = yield* trainer.optimStep(adamParams({ learningRate: 0.05 }))
          const pub = yield* trainer.saveWeightsForSampler("v1")
          assert.strictEqual(pub.version, step.version)
          assert.strictEqual(yield* sampler.version, 1)
          for (const r of backend.replicas) assert.strictEqual(yield* r.version, 1)
          const results = yield* Effect.forEach(
            Array.from({ length: 12 }, (_, i) => i),
            (i) => sampler.sample(modelInputFromTokens([1, 40]), { maxTokens: 3, temperature: 1, seed: i }, { numSamples: 2, minPolicyVersion: 1, affinityKey: `g${i}` }),
            { concurrency: 4 },
          )
          for (const r of results) assert.strictEqual(r.policyVersion, 1)
        }).pipe(Effect.provide(Client.layer({ baseUrl: server.url, retry: Retry.fast })))
        assert.isAbove(server.stats.replicaRequests.filter((n) => n > 0).length, 1)
      }).pipe(Effect.scoped),
  )
})

describe("serve --workers", () => {
  it.live(
    "the embedded backend on worker threads behind the server",
    () =>
      Effect.gen(function* () {
        const config = { vocabSize: 99, contextLength: 32, nLayers: 1, dModel: 16, nHeads: 2, mlpRatio: 2 }
        const refused = yield* Effect.flip(Serve.embedded({ config, workers: true, replicas: 2 }))
        assert.strictEqual(refused.reason, "InvalidInput")
        const backend = yield* Serve.embedded({ config, lora: { rank: 2, alpha: 4, targets: ["q", "v"] }, workers: true, seed: 3 })
        const server = yield* Server.make({ replicas: backend.replicas, vocabSize: backend.vocabSize }).pipe(
          Effect.provideService(Trainer, backend.trainer),
          Effect.provideService(Sampler, backend.sampler),
        )
        yield* Effect.gen(function* () {
          const trainer = yield* Trainer
          const sampler = yield* Sampler
          yield* trainer.forwardBackward([D.rl({ prompt: [1, 40, 41], completion: [42, 43, 2], samplerLogprobs: [-4, -4, -4], advantage: 1 })], "importance_sampling")
          yield* trainer.optimStep(adamParams({ learningRate: 0.05 }))
          const pub = yield* trainer.saveWeightsForSampler("w1")
          const r = yield* sampler.sample(modelInputFromTokens([1, 40]), { maxTokens: 3, temperature: 1, seed: 1 }, { numSamples: 2, minPolicyVersion: pub.version })
          assert.strictEqual(r.policyVersion, 1)
          assert.strictEqual(r.sequences.length, 2)
        }).pipe(Effect.provide(Client.layer({ baseUrl: server.url, retry: Retry.fast })))
      }).pipe(Effect.scoped),
  )
})

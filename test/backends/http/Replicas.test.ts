import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Client from "../../../src/backends/http/Client.ts"
import * as Retry from "../../../src/backends/http/Retry.ts"
import * as Server from "../../../src/backends/http/Server.ts"
import { modelInputFromTokens } from "../../../src/Contract.ts"
import { Sampler, type SamplerShape } from "../../../src/Sampler.ts"
import { Trainer } from "../../../src/Trainer.ts"
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

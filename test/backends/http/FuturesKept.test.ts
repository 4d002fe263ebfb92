/**
 * How long the server keeps a finished future's answer: for the whole ttl while no poll
 * has had it, and `answeredMillis` more once one has (so a fast run's answers do not pile
 * up), with a clock the test moves by hand.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Option, Scope } from "effect"
import * as Futures from "../../../src/backends/http/server/Futures.ts"

const table = Effect.gen(function* () {
  const scope = yield* Scope.make()
  let now = 0
  let id = 0
  const futures = Futures.make({ scope, ttlMillis: 60_000, answeredMillis: 5_000, maxPending: 16, newId: () => `r${id++}`, now: Effect.sync(() => now) })
  const at = (t: number) => Effect.andThen(Effect.sync(() => (now = t)), futures.sweep)
  return { futures, at, close: Scope.close(scope, Exit.void) }
})

describe("Futures: how long answers are kept", () => {
  it.effect("an answer no poll has had is kept for the ttl, then 410", () =>
    Effect.gen(function* () {
      const { futures, at, close } = yield* table
      const id = yield* futures.start("Sample", Effect.succeed({ x: 1 }))
      yield* Effect.yieldNow
      yield* at(59_000)
      assert.isTrue(futures.has(id))
      yield* at(60_001)
      assert.isFalse(futures.has(id))
      const gone = yield* Effect.flip(futures.await(id, 0))
      assert.strictEqual(gone.status, 410)
      yield* close
    }))

  it.effect("an answer a poll has had stays retrievable for answeredMillis, the same answer each time", () =>
    Effect.gen(function* () {
      const { futures, at, close } = yield* table
      const id = yield* futures.start("Sample", Effect.succeed({ x: 2 }))
      yield* Effect.yieldNow
      yield* at(1_000)
      const first = yield* futures.await(id, 0)
      assert.deepStrictEqual(Option.map(first, (r) => r.body), Option.some({ x: 2 }))
      yield* at(5_900)
      // a client whose connection broke asks again: the same answer
      const again = yield* futures.await(id, 0)
      assert.deepStrictEqual(Option.map(again, (r) => r.body), Option.some({ x: 2 }))
      yield* at(6_001)
      assert.isFalse(futures.has(id))
      assert.strictEqual(futures.size(), 0)
      yield* close
    }))

  it.effect("a future still running is never forgotten, however old", () =>
    Effect.gen(function* () {
      const { futures, at, close } = yield* table
      const id = yield* futures.start("Sample", Effect.never)
      yield* at(10 * 60_000)
      assert.isTrue(futures.has(id))
      assert.isTrue(Option.isNone(yield* futures.await(id, 0)))
      yield* close
    }))
})

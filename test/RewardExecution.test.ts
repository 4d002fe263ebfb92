/** How scorers run: timeouts of Promise scorers and the permits they hold, caching, concurrency bounds. */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Semaphore } from "effect"
import { TestClock } from "effect/testing"
import { Reward } from "gyre"
import { group, rollout, score } from "gyre/testing"
import { constant, type Row } from "./RewardFixtures.ts"

/** Lets promise callbacks and woken fibers run: a bounded number of event-loop turns, no clock involved. */
const turns = (n = 20) =>
  Effect.gen(function* () {
    for (let i = 0; i < n; i++) yield* Effect.promise(() => new Promise<void>((resolve) => setImmediate(resolve)))
  })

describe("timeouts of Promise scorers", () => {
  it.effect("a timed-out Promise scorer sees its signal aborted, and the sample is masked", () =>
    Effect.gen(function* () {
      const signals: Array<AbortSignal> = []
      const hanging = Reward.timeout(
        Reward.make<Row>("judge", (_, { signal }) => {
          signals.push(signal)
          return new Promise<number>(() => {})
        }),
        "5 seconds",
      )
      const fiber = yield* Effect.forkChild(score(hanging, { n: 0 }, "x"))
      yield* TestClock.adjust("4 seconds")
      assert.strictEqual(signals.length, 1)
      assert.isFalse(signals[0]!.aborted)
      yield* TestClock.adjust("2 seconds")
      const s = yield* Fiber.join(fiber)
      assert.match(s.masked!, /^judge: timed out after 5s/)
      assert.isTrue(signals[0]!.aborted)
    }))

  it.effect("an Effect scorer's signal is aborted when it is interrupted by a timeout", () =>
    Effect.gen(function* () {
      const signals: Array<AbortSignal> = []
      const slow = Reward.timeout(
        Reward.make<Row>("judge", (_, { signal }) => {
          signals.push(signal)
          return Effect.sleep("1 minute").pipe(Effect.as(1))
        }),
        "5 seconds",
      )
      const fiber = yield* Effect.forkChild(score(slow, { n: 0 }, "x"))
      yield* TestClock.adjust("6 seconds")
      assert.match((yield* Fiber.join(fiber)).masked!, /timed out/)
      assert.isTrue(signals[0]!.aborted)
      // a scorer that finishes in time keeps an unaborted signal
      const quick = Reward.make<Row>("quick", (_, { signal }) => {
        signals.push(signal)
        return 1
      })
      yield* score(Reward.timeout(quick, "5 seconds"), { n: 0 }, "x")
      assert.isFalse(signals[1]!.aborted)
    }))

  const limits = [
    ["the run's RewardPermits", "global"],
    ["a leaf's own concurrency", "leaf"],
  ] as const
  for (const [label, kind] of limits) {
    it.effect(`an abandoned Promise holds its permit of ${label} until it settles`, () =>
      Effect.gen(function* () {
        const settle: Array<() => void> = []
        const state = { started: 0, running: 0, maxRunning: 0 }
        const judge = Reward.make<Row>("judge", () => {
          state.started++
          state.running++
          state.maxRunning = Math.max(state.maxRunning, state.running)
          // a judge that ignores its signal: it runs until the test settles it
          return new Promise<number>((resolve) =>
            settle.push(() => {
              state.running--
              resolve(1)
            })
          )
        }, { timeout: "5 seconds", ...(kind === "leaf" ? { concurrency: 2 } : {}) })
        const permits = yield* Semaphore.make(2)
        const program = Reward.evaluate(judge, group({ n: 0 }, ["a", "b", "c", "d"]))
        const fiber = yield* Effect.forkChild(kind === "global" ? program.pipe(Effect.provideService(Reward.RewardPermits, permits)) : program)
        yield* turns()
        assert.strictEqual(state.started, 2)
        // the first two time out and are masked; their promises still run and keep their permits
        yield* TestClock.adjust("6 seconds")
        yield* turns()
        assert.strictEqual(state.started, 2)
        assert.strictEqual(state.running, 2)
        settle[0]!()
        yield* turns()
        assert.strictEqual(state.started, 3)
        settle[1]!()
        yield* turns()
        assert.strictEqual(state.started, 4)
        settle[2]!()
        settle[3]!()
        const scores = yield* Fiber.join(fiber)
        assert.match(scores[0]!.masked!, /^judge: timed out after 5s/)
        assert.match(scores[1]!.masked!, /^judge: timed out after 5s/)
        assert.deepStrictEqual(scores.slice(2).map((s) => s.value), [1, 1])
        assert.strictEqual(state.maxRunning, 2)
      }))
  }

  it.effect("interrupting an evaluation, waiting or scoring, gives its permits back", () =>
    Effect.gen(function* () {
      const permits = yield* Semaphore.make(1)
      const withPermits = <A, E>(self: Effect.Effect<A, E>) => Effect.provideService(self, Reward.RewardPermits, permits)
      const hanging = Reward.make<Row>("slow", () => Effect.never)
      const holder = yield* Effect.forkChild(withPermits(Reward.evaluate(hanging, [rollout({ n: 0 }, "x")])))
      yield* turns()
      const waiter = yield* Effect.forkChild(withPermits(Reward.evaluate(hanging, [rollout({ n: 1 }, "x")])))
      yield* turns()
      yield* Fiber.interrupt(waiter)
      yield* Fiber.interrupt(holder)
      const s = yield* withPermits(Reward.evaluate(constant("quick", 1), [rollout({ n: 2 }, "x")]))
      assert.strictEqual(s[0]!.value, 1)
    }))

  it.effect("a leaf holds no permit while it backs off before a retry", () =>
    Effect.gen(function* () {
      const permits = yield* Semaphore.make(1)
      let calls = 0
      const flaky = Reward.retry(Reward.make<Row>("judge", () => {
        calls++
        return calls === 1 ? Promise.reject(new Reward.InfraFault({ message: "busy" })) : Promise.resolve(1)
      }), 1, { base: "10 seconds" })
      let otherRan = false
      const other = Reward.make<Row>("other", () => {
        otherRan = true
        return 2
      })
      const withPermits = <A, E>(self: Effect.Effect<A, E>) => Effect.provideService(self, Reward.RewardPermits, permits)
      const judged = yield* Effect.forkChild(withPermits(Reward.evaluate(flaky, [rollout({ n: 0 }, "x")])))
      yield* turns()
      assert.strictEqual(calls, 1)
      // the judge is backing off: the only permit is free for other work
      const scored = yield* Effect.forkChild(withPermits(Reward.evaluate(other, [rollout({ n: 0 }, "x")])))
      yield* turns()
      assert.isTrue(otherRan)
      assert.strictEqual((yield* Fiber.join(scored))[0]!.value, 2)
      yield* TestClock.adjust("1 minute")
      assert.strictEqual((yield* Fiber.join(judged))[0]!.value, 1)
      assert.strictEqual(calls, 2)
    }))
})

describe("caching", () => {
  const counting = () => {
    const state = { calls: 0 }
    const make = (version: string) =>
      Reward.cached(Reward.make<Row>("judge", (r) => {
        state.calls++
        return r.completion.length
      }), version)
    return { state, make }
  }

  it.effect("within one cache, a hit avoids recomputation; a new version recomputes", () =>
    Effect.gen(function* () {
      const { state, make } = counting()
      const rollouts = group({ n: 1 }, ["a", "bb", "a"])
      yield* Reward.withCache(Effect.gen(function* () {
        const first = yield* Reward.evaluate(make("v1"), rollouts)
        // "a" appears twice in the group: scored once
        assert.strictEqual(state.calls, 2)
        assert.deepStrictEqual(first.map((s) => s.value), [1, 2, 1])
        const again = yield* Reward.evaluate(make("v1"), rollouts)
        assert.strictEqual(state.calls, 2)
        assert.deepStrictEqual(again.map((s) => s.value), [1, 2, 1])
        yield* Reward.evaluate(make("v2"), rollouts)
        assert.strictEqual(state.calls, 4)
      }))
    }))

  it.effect("two runs never share a cache: each evaluate outside a cache gets its own", () =>
    Effect.gen(function* () {
      const { state, make } = counting()
      const rollouts = group({ n: 1 }, ["a", "bb"])
      yield* Reward.withCache(Reward.evaluate(make("v1"), rollouts))
      yield* Reward.withCache(Reward.evaluate(make("v1"), rollouts))
      assert.strictEqual(state.calls, 4)
      yield* Reward.evaluate(make("v1"), rollouts)
      yield* Reward.evaluate(make("v1"), rollouts)
      assert.strictEqual(state.calls, 8)
    }))

  it.effect("a run-scoped cache is the RewardCache in force", () =>
    Effect.gen(function* () {
      const { state, make } = counting()
      const cache = Reward.makeCache()
      const rollouts = group({ n: 1 }, ["a", "bb"])
      yield* Reward.evaluate(make("v1"), rollouts).pipe(Effect.provideService(Reward.RewardCache, cache))
      yield* Reward.evaluate(make("v1"), rollouts).pipe(Effect.provideService(Reward.RewardCache, cache))
      assert.strictEqual(state.calls, 2)
      assert.strictEqual(cache.size(), 2)
    }))

  it("a full cache drops its oldest score", () => {
    const cache = Reward.makeCache(2)
    cache.set("a", { value: 1, masked: undefined })
    cache.set("b", { value: 2, masked: undefined })
    cache.set("c", { value: 3, masked: undefined })
    assert.isUndefined(cache.get("a"))
    assert.strictEqual(cache.get("c")!.value, 3)
    assert.strictEqual(cache.size(), 2)
    assert.throws(() => Reward.makeCache(0), /limit must be an integer >= 1, got 0/)
  })

  it.effect("does not cache masked samples", () =>
    Effect.gen(function* () {
      let calls = 0
      const flaky = Reward.cached(Reward.make<Row>("judge", () => {
        calls++
        return calls === 1 ? Effect.fail(new Reward.InfraFault({ message: "down" })) : Effect.succeed(1)
      }), "v1")
      yield* Reward.withCache(Effect.gen(function* () {
        assert.isDefined((yield* Reward.evaluate(flaky, [rollout({ n: 0 }, "x")]))[0]!.masked)
        assert.strictEqual((yield* Reward.evaluate(flaky, [rollout({ n: 0 }, "x")]))[0]!.value, 1)
      }))
    }))
})

describe("concurrency", () => {
  const tracked = () => {
    const state = { inFlight: 0, max: 0, done: 0 }
    const reward = Reward.make<Row>("slow", () =>
      Effect.gen(function* () {
        state.inFlight++
        state.max = Math.max(state.max, state.inFlight)
        yield* Effect.sleep("1 second")
        state.inFlight--
        state.done++
        return 1
      }))
    return { state, reward }
  }
  const groups = Array.from({ length: 5 }, (_, g) => group({ n: g }, Array.from({ length: 8 }, (_, i) => `c${i}`)))

  it.effect("a global RewardPermits semaphore bounds evaluations across groups", () =>
    Effect.gen(function* () {
      const { state, reward } = tracked()
      const permits = yield* Semaphore.make(4)
      const fiber = yield* Effect.forkChild(
        Effect.forEach(groups, (g) => Reward.evaluate(reward, g), { concurrency: "unbounded" }).pipe(
          Effect.provideService(Reward.RewardPermits, permits),
        ),
      )
      yield* TestClock.adjust("20 seconds")
      const scores = yield* Fiber.join(fiber)
      assert.strictEqual(state.done, 40)
      assert.strictEqual(state.max, 4)
      assert.isTrue(scores.flat().every((s) => s.value === 1))
    }))

  it.effect("per-leaf concurrency bounds one leaf", () =>
    Effect.gen(function* () {
      const { state, reward } = tracked()
      const bounded = Reward.withConcurrency(reward, 3)
      const fiber = yield* Effect.forkChild(Effect.forEach(groups, (g) => Reward.evaluate(bounded, g), { concurrency: "unbounded" }))
      yield* TestClock.adjust("20 seconds")
      yield* Fiber.join(fiber)
      assert.strictEqual(state.done, 40)
      assert.strictEqual(state.max, 3)
    }))

  it.effect("a leaf waiting for its own permit does not hold a global one", () =>
    Effect.gen(function* () {
      const a = tracked()
      const b = tracked()
      const reward = Reward.weighted({ a: [Reward.withConcurrency(a.reward, 1), 1], b: [b.reward, 1] })
      const permits = yield* Semaphore.make(4)
      const fiber = yield* Effect.forkChild(Reward.evaluate(reward, groups[0]!).pipe(Effect.provideService(Reward.RewardPermits, permits)))
      // a runs one at a time; the other global permits stay free for b, which is done in 3 seconds
      yield* TestClock.adjust("3 seconds")
      assert.strictEqual(b.state.done, 8)
      assert.isAtMost(a.state.max, 1)
      yield* TestClock.adjust("10 seconds")
      yield* Fiber.join(fiber)
    }))

  it.effect("without bounds, every leaf runs at once", () =>
    Effect.gen(function* () {
      const { state, reward } = tracked()
      const fiber = yield* Effect.forkChild(Effect.forEach(groups, (g) => Reward.evaluate(reward, g), { concurrency: "unbounded" }))
      yield* TestClock.adjust("1 second")
      yield* Fiber.join(fiber)
      assert.strictEqual(state.max, 40)
    }))
})

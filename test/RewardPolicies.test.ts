/** How a scorer's outcome becomes a score: failure policies (timeout, retry with backoff, faults and defects) and what a scorer may return. */
import { assert, describe, it } from "@effect/vitest"
import { Clock, Effect, Fiber } from "effect"
import { TestClock } from "effect/testing"
import { Reward } from "gyre"
import { score, scoreGroup } from "gyre/testing"
import { constant, infraFault, type Row } from "./RewardFixtures.ts"

describe("failure policies", () => {
  it.effect("a timeout is an InfraFault and masks the sample", () =>
    Effect.gen(function* () {
      const slow = Reward.timeout(Reward.make<Row>("judge", () => Effect.sleep("1 minute").pipe(Effect.as(1))), "5 seconds")
      const fiber = yield* Effect.forkChild(score(slow, { n: 0 }, "x"))
      yield* TestClock.adjust("6 seconds")
      const s = yield* Fiber.join(fiber)
      assert.isUndefined(s.value)
      assert.match(s.masked!, /^judge: timed out after 5s/)
      assert.deepStrictEqual(s.components, { judge: undefined })
    }))

  it.effect("a masked component masks the weighted total", () =>
    Effect.gen(function* () {
      const s = yield* score(Reward.weighted({ correct: [constant("c", 1), 1], judge: [infraFault("j"), 0.5] }), { n: 0 }, "x")
      assert.strictEqual(s.masked, "judge: judge down")
    }))

  it.effect("retries an InfraFault, then succeeds", () =>
    Effect.gen(function* () {
      let calls = 0
      const flaky = Reward.retry(
        Reward.make<Row>("judge", () => {
          calls++
          return calls < 3 ? Effect.fail(new Reward.InfraFault({ message: `attempt ${calls}` })) : Effect.succeed(0.8)
        }),
        3,
      )
      const fiber = yield* Effect.forkChild(score(flaky, { n: 0 }, "x"))
      yield* TestClock.adjust("1 minute")
      const s = yield* Fiber.join(fiber)
      assert.strictEqual(s.value, 0.8)
      assert.isUndefined(s.masked)
      assert.strictEqual(calls, 3)
    }))

  it.effect("retries a timed-out attempt, and masks when retries run out", () =>
    Effect.gen(function* () {
      let calls = 0
      const slowThenFast = Reward.retry(
        Reward.timeout(Reward.make<Row>("judge", () => (calls++ === 0 ? Effect.sleep("1 minute").pipe(Effect.as(0)) : Effect.succeed(1))), "1 second"),
        1,
      )
      const fiber = yield* Effect.forkChild(score(slowThenFast, { n: 0 }, "x"))
      yield* TestClock.adjust("2 seconds")
      assert.strictEqual((yield* Fiber.join(fiber)).value, 1)

      let attempts = 0
      const down = Reward.retry(Reward.make<Row>("judge", () => {
        attempts++
        return Effect.fail(new Reward.InfraFault({ message: "down" }))
      }), 2)
      const downFiber = yield* Effect.forkChild(score(down, { n: 0 }, "x"))
      yield* TestClock.adjust("1 minute")
      const s = yield* Fiber.join(downFiber)
      assert.strictEqual(attempts, 3)
      assert.strictEqual(s.masked, "judge: down")
    }))

  /** A judge that is always down, noting the time of every attempt in `at`. */
  const alwaysDown = (at: Array<number>) =>
    Reward.make<Row>("judge", () =>
      Effect.gen(function* () {
        at.push(yield* Clock.currentTimeMillis)
        return yield* Effect.fail(new Reward.InfraFault({ message: "down" }))
      }))

  it.effect("waits longer before each retry: exponential backoff with jitter", () =>
    Effect.gen(function* () {
      const at: Array<number> = []
      const down = Reward.retry(
        alwaysDown(at),
        5,
        { base: "1 second" },
      )
      const fiber = yield* Effect.forkChild(score(down, { n: 0 }, "x"))
      yield* TestClock.adjust("10 minutes")
      assert.strictEqual((yield* Fiber.join(fiber)).masked, "judge: down")
      assert.strictEqual(at.length, 6)
      const gaps = at.slice(1).map((t, i) => t - at[i]!)
      gaps.forEach((gap, n) => {
        // base * 2^n, scaled by a jitter factor in [0.8, 1.2]
        assert.isAtLeast(gap, 0.8 * 1000 * 2 ** n, `gap ${n}`)
        assert.isAtMost(gap, 1.2 * 1000 * 2 ** n, `gap ${n}`)
      })
      for (let n = 1; n < gaps.length; n++) assert.isAbove(gaps[n]!, gaps[n - 1]!)
      // the jitter is random: not every gap is exactly base * 2^n
      assert.isFalse(gaps.every((gap, n) => gap === 1000 * 2 ** n))
    }))

  it.effect("caps the backoff at max", () =>
    Effect.gen(function* () {
      const at: Array<number> = []
      const down = Reward.retry(
        alwaysDown(at),
        6,
        { base: "1 second", max: "3 seconds" },
      )
      const fiber = yield* Effect.forkChild(score(down, { n: 0 }, "x"))
      yield* TestClock.adjust("10 minutes")
      yield* Fiber.join(fiber)
      const gaps = at.slice(1).map((t, i) => t - at[i]!)
      assert.strictEqual(gaps.length, 6)
      for (const gap of gaps.slice(2)) assert.isAtMost(gap, 1.2 * 3000)
    }))

  it("rejects a bad retry count or backoff at once", () => {
    assert.throws(() => Reward.retry(constant("c", 1), -1), /times must be an integer >= 0, got -1/)
    assert.throws(() => Reward.retry(constant("c", 1), 1, { factor: 0.5 }), /backoff.factor must be a finite number >= 1, got 0.5/)
  })

  it.effect("a ModelFault scores its penalty and is not retried", () =>
    Effect.gen(function* () {
      let calls = 0
      const r = Reward.retry(Reward.make<Row>("correct", () => {
        calls++
        return Effect.fail(new Reward.ModelFault({ penalty: -0.5, message: "no answer" }))
      }), 3)
      const s = yield* score(r, { n: 0 }, "x")
      assert.strictEqual(s.value, -0.5)
      assert.isUndefined(s.masked)
      assert.strictEqual(calls, 1)
    }))

  it.effect("a throwing reward is a RewardDefect that names the reward", () =>
    Effect.gen(function* () {
      const boom = Reward.weighted({
        fine: [constant("fine", 1), 1],
        parser: [Reward.make<Row>("parser", () => {
          throw new Error("unexpected token")
        }), 1],
      })
      const error = yield* Effect.flip(score(boom, { n: 0 }, "x"))
      assert.strictEqual(error._tag, "RewardDefect")
      assert.strictEqual(error.reward, "parser")
      assert.match(error.message, /unexpected token/)
    }))

  it.effect("a non-finite score is a RewardDefect", () =>
    Effect.gen(function* () {
      for (const bad of [Number.NaN, Infinity, -Infinity]) {
        const error = yield* Effect.flip(score(constant("ratio", bad), { n: 0 }, "x"))
        assert.strictEqual(error.reward, "ratio")
        assert.match(error.message, /finite/)
      }
    }))
})

describe("scorer results", () => {
  const returning = (what: unknown) => Reward.make<Row>("judge", () => what as number)
  const ways: ReadonlyArray<readonly [string, (v: unknown) => unknown]> = [
    ["directly", (v) => v],
    ["from an Effect", (v) => Effect.succeed(v)],
    ["from a Promise", (v) => Promise.resolve(v)],
  ]

  it.effect("a result that is not a finite number is a RewardDefect naming the reward and what it returned, as NaN is", () =>
    Effect.gen(function* () {
      const cases: ReadonlyArray<readonly [unknown, RegExp]> = [
        [Number.NaN, /^returned NaN; a score must be a finite number$/],
        ["1", /^returned "1" \(a string\); a score must be a finite number$/],
        [{ score: 1 }, /^returned \{"score":1\} \(an object\); a score must be a finite number$/],
        [[1], /^returned \[1\] \(an array\); a score must be a finite number$/],
        [undefined, /^returned undefined; a score must be a finite number$/],
        [null, /^returned null; a score must be a finite number$/],
        [true, /^returned true \(a boolean\); a score must be a finite number$/],
      ]
      for (const [bad, pattern] of cases) {
        for (const [how, wrap] of ways) {
          const error = yield* Effect.flip(score(returning(wrap(bad)), { n: 0 }, "x"))
          assert.strictEqual(error._tag, "RewardDefect", `${String(bad)} ${how}`)
          assert.strictEqual(error.reward, "judge")
          assert.match(error.message, pattern, `${String(bad)} ${how}`)
        }
      }
    }))

  it.effect("inside a weighted reward, the defect names the leaf that returned it", () =>
    Effect.gen(function* () {
      const reward = Reward.weighted({ fine: [constant("fine", 1), 1], judge: [returning("0.5"), 1] })
      const error = yield* Effect.flip(score(reward, { n: 0 }, "x"))
      assert.strictEqual(error.reward, "judge")
      assert.match(error.message, /returned "0.5" \(a string\)/)
    }))

  it.effect("a group reward must return an array of finite numbers", () =>
    Effect.gen(function* () {
      const notArray = yield* Effect.flip(scoreGroup(Reward.group<Row>("vote", () => "1, 0" as unknown as Array<number>), { n: 0 }, ["a", "b"]))
      assert.strictEqual(notArray.reward, "vote")
      assert.match(notArray.message, /^returned "1, 0" \(a string\); a group reward must return an array of one finite score per rollout$/)
      const badMember = yield* Effect.flip(scoreGroup(Reward.group<Row>("vote", () => Promise.resolve([1, "0"] as unknown as Array<number>)), { n: 0 }, ["a", "b"]))
      assert.match(badMember.message, /^returned "0" \(a string\); a score must be a finite number$/)
      const fine = yield* scoreGroup(Reward.group<Row>("vote", () => Promise.resolve([1, 0])), { n: 0 }, ["a", "b"])
      assert.deepStrictEqual(fine.map((s) => s.value), [1, 0])
    }))

  it.effect("a scorer may throw or reject with a typed failure; any other rejection is a defect", () =>
    Effect.gen(function* () {
      const thrown = yield* score(Reward.make<Row>("judge", () => {
        throw new Reward.InfraFault({ message: "down" })
      }), { n: 0 }, "x")
      assert.strictEqual(thrown.masked, "judge: down")
      const rejected = yield* score(Reward.make<Row>("judge", () => Promise.reject(new Reward.ModelFault({ penalty: -1 }))), { n: 0 }, "x")
      assert.strictEqual(rejected.value, -1)
      const na = yield* score(Reward.make<Row>("judge", async () => {
        throw new Reward.NotApplicable({})
      }), { n: 0 }, "x")
      assert.isUndefined(na.value)
      const broken = yield* Effect.flip(score(Reward.make<Row>("judge", () => Promise.reject(new Error("socket hang up"))), { n: 0 }, "x"))
      assert.strictEqual(broken.reward, "judge")
      assert.match(broken.message, /threw socket hang up/)
      assert.strictEqual((yield* score(Reward.make<Row>("judge", async () => 0.25), { n: 0 }, "x")).value, 0.25)
    }))
})

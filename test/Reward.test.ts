import { assert, describe, it } from "@effect/vitest"
import { Clock, Effect, Fiber, Semaphore } from "effect"
import { TestClock } from "effect/testing"
import * as fc from "fast-check"
import { Reward } from "gyre"
import { group, laws, rollout, score, scoreGroup } from "gyre/testing"

type Row = { readonly n: number }
const constant = (name: string, value: number) => Reward.make<Row>(name, () => value)
const notApplicable = (name: string) => Reward.make<Row>(name, () => Effect.fail(new Reward.NotApplicable({})))
const infraFault = (name: string) => Reward.make<Row>(name, () => Effect.fail(new Reward.InfraFault({ message: "judge down" })))

describe("Reward.weighted", () => {
  it.effect("sums weighted components and reports every raw score, zero-weight ones included", () =>
    Effect.gen(function* () {
      const reward = Reward.weighted({ correct: [constant("a", 1), 1], brief: [constant("b", 0.5), 0.2], style: [constant("c", 0.7), 0] })
      const s = yield* score(reward, { n: 1 }, "x")
      assert.closeTo(s.value!, 1.1, 1e-12)
      assert.deepStrictEqual(s.components, { correct: 1, brief: 0.5, style: 0.7 })
      assert.isUndefined(s.masked)
      assert.deepStrictEqual(Reward.componentNames(reward), ["correct", "brief", "style"])
    }))

  it.effect("leaves NotApplicable components out of the sum", () =>
    Effect.gen(function* () {
      const s = yield* score(Reward.weighted({ a: [constant("a", 1), 0.5], b: [notApplicable("b"), 10] }), { n: 1 }, "x")
      assert.strictEqual(s.value, 0.5)
      assert.deepStrictEqual(s.components, { a: 1, b: undefined })
      const none = yield* score(Reward.weighted({ b: [notApplicable("b"), 1] }), { n: 1 }, "x")
      assert.isUndefined(none.value)
    }))

  it.effect("a zero-weight component neither defines nor masks the total", () =>
    Effect.gen(function* () {
      const onlyMetric = yield* score(Reward.weighted({ correct: [notApplicable("c"), 1], brief: [constant("b", 1), 0] }), { n: 1 }, "x")
      assert.isUndefined(onlyMetric.value)
      assert.strictEqual(onlyMetric.components.brief, 1)
      const flakyMetric = yield* score(Reward.weighted({ correct: [constant("c", 1), 1], judge: [infraFault("j"), 0] }), { n: 1 }, "x")
      assert.strictEqual(flakyMetric.value, 1)
      assert.isUndefined(flakyMetric.masked)
    }))

  it("stays in [0, 1] when [0, 1] members have weights summing to 1", () =>
    fc.assert(fc.asyncProperty(
      fc.array(fc.tuple(fc.double({ min: 0, max: 1, noNaN: true }), fc.double({ min: 0, max: 1, noNaN: true })), { minLength: 1, maxLength: 6 }),
      async (members) => {
        const total = members.reduce((s, [, w]) => s + w, 0) || 1
        const reward = Reward.weighted(Object.fromEntries(members.map(([v, w], i) => [`m${i}`, [constant(`m${i}`, v), w / total] as const])))
        await laws.bounded(reward, { min: 0, max: 1 + 1e-12, problems: [{ n: 0 }], completions: fc.constant(""), numRuns: 1 })
      },
    ), { numRuns: 50 }))

  it("rejects bad definitions at once", () => {
    assert.throws(() => Reward.weighted({}), /at least one component/)
    assert.throws(() => Reward.weighted({ a: [constant("a", 1), Number.NaN] }), /weight of "a" must be a finite number/)
  })
})

describe("gates", () => {
  const pass = constant("pass", 1)
  const half = constant("half", 0.5)
  const fail = constant("fail", 0)

  it.effect("all / any / threshold", () =>
    Effect.gen(function* () {
      const value = (r: Reward.Reward<Row>) => score(r, { n: 0 }, "x").pipe(Effect.map((s) => s.value))
      assert.strictEqual(yield* value(Reward.all("both", [pass, pass])), 1)
      assert.strictEqual(yield* value(Reward.all("both", [pass, fail])), 0)
      assert.strictEqual(yield* value(Reward.any("either", [fail, pass])), 1)
      assert.strictEqual(yield* value(Reward.any("either", [fail, half])), 0)
      assert.strictEqual(yield* value(Reward.any("either", [fail, half], 0.5)), 1)
      assert.strictEqual(yield* value(Reward.threshold(half, 0.5)), 1)
      assert.strictEqual(yield* value(Reward.threshold(half, 0.6)), 0)
      assert.strictEqual(yield* value(Reward.all("skip", [pass, notApplicable("na")])), 1)
      assert.isUndefined(yield* value(Reward.all("none", [notApplicable("na")])))
    }))

  it.effect("reports the members' raw scores and the gate's own", () =>
    Effect.gen(function* () {
      const s = yield* score(Reward.all("format_ok", [pass, half]), { n: 0 }, "x")
      assert.deepStrictEqual(s.components, { pass: 1, half: 0.5, format_ok: 0 })
    }))

  it("all and any do not depend on the order of their members", () =>
    fc.assert(fc.asyncProperty(
      fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { minLength: 1, maxLength: 5 }).chain((vs) => fc.tuple(fc.constant(vs), fc.shuffledSubarray(vs, { minLength: vs.length }))),
      async ([vs, shuffled]) => {
        for (const gate of [Reward.all, Reward.any]) {
          const a = await Effect.runPromise(score(gate("g", vs.map((v, i) => constant(`m${i}`, v)), 0.5), { n: 0 }, ""))
          const b = await Effect.runPromise(score(gate("g", shuffled.map((v, i) => constant(`m${i}`, v)), 0.5), { n: 0 }, ""))
          assert.strictEqual(a.value, b.value)
        }
      },
    ), { numRuns: 50 }))
})

describe("clamp / map", () => {
  it.effect("transform the score and keep the component name", () =>
    Effect.gen(function* () {
      const s = yield* score(Reward.clamp(constant("raw", 7), 0, 1), { n: 0 }, "x")
      assert.strictEqual(s.value, 1)
      assert.deepStrictEqual(s.components, { raw: 1 })
      assert.strictEqual((yield* score(Reward.clamp(constant("raw", -3), -1, 1), { n: 0 }, "x")).value, -1)
      assert.strictEqual((yield* score(Reward.map(constant("raw", 0.5), (x) => 2 * x - 1), { n: 0 }, "x")).value, 0)
      assert.isUndefined((yield* score(Reward.map(notApplicable("na"), (x) => x + 1), { n: 0 }, "x")).value)
    }))

  it("clamp keeps any reward inside its bounds", () =>
    laws.bounded(Reward.clamp(Reward.make("len", (r) => r.completion.length - 50), -10, 10), { min: -10, max: 10, problems: [null] }))

  it.effect("a map to NaN or a throwing map is a RewardDefect", () =>
    Effect.gen(function* () {
      const nan = yield* Effect.flip(score(Reward.map(constant("raw", -1), Math.sqrt), { n: 0 }, "x"))
      assert.strictEqual(nan.reward, "raw")
      assert.match(nan.message, /NaN/)
      const throwing = Reward.map(constant("raw", 1), () => {
        throw new Error("bad map")
      })
      const thrown = yield* Effect.flip(score(throwing, { n: 0 }, "x"))
      assert.strictEqual(thrown.reward, "raw")
      assert.match(thrown.message, /bad map/)
    }))
})

describe("group rewards", () => {
  it.effect("see all G completions of the group at once", () =>
    Effect.gen(function* () {
      const seen: Array<Array<number>> = []
      const majority = Reward.group<Row>("majority", (rs) => {
        seen.push(rs.map((r) => r.index))
        const counts = new Map<string, number>()
        for (const r of rs) counts.set(r.completion, (counts.get(r.completion) ?? 0) + 1)
        const top = Math.max(...counts.values())
        return rs.map((r) => (counts.get(r.completion) === top ? 1 : 0))
      })
      const scores = yield* scoreGroup(majority, { n: 0 }, ["4", "5", "4", "4", "6"])
      assert.deepStrictEqual(scores.map((s) => s.value), [1, 0, 1, 1, 0])
      assert.deepStrictEqual(seen, [[0, 1, 2, 3, 4]])
      assert.isTrue(group({ n: 0 }, ["a", "b"]).every((r) => r.groupSize === 2))
    }))

  it.effect("a wrong number of scores is a RewardDefect naming the reward", () =>
    Effect.gen(function* () {
      const short = Reward.group<Row>("short_list", () => [1])
      const error = yield* Effect.flip(scoreGroup(short, { n: 0 }, ["a", "b", "c"]))
      assert.strictEqual(error.reward, "short_list")
      assert.match(error.message, /one score per rollout: got 1 for a group of 3/)
    }))

  it.effect("a group ModelFault scores the penalty for every member", () =>
    Effect.gen(function* () {
      const faulty = Reward.group<Row>("judge", () => Effect.fail(new Reward.ModelFault({ penalty: -1 })))
      const scores = yield* scoreGroup(faulty, { n: 0 }, ["a", "b"])
      assert.deepStrictEqual(scores.map((s) => s.value), [-1, -1])
    }))
})

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

  it.effect("waits longer before each retry: exponential backoff with jitter", () =>
    Effect.gen(function* () {
      const at: Array<number> = []
      const down = Reward.retry(
        Reward.make<Row>("judge", () =>
          Effect.gen(function* () {
            at.push(yield* Clock.currentTimeMillis)
            return yield* Effect.fail(new Reward.InfraFault({ message: "down" }))
          })),
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
        Reward.make<Row>("judge", () =>
          Effect.gen(function* () {
            at.push(yield* Clock.currentTimeMillis)
            return yield* Effect.fail(new Reward.InfraFault({ message: "down" }))
          })),
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

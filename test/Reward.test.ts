/** Reward combinators: weighted sums, gates, clamp and map, group rewards. */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fc from "fast-check"
import { Reward } from "gyre"
import { group, laws, score, scoreGroup } from "gyre/testing"
import { constant, infraFault, notApplicable, type Row } from "./RewardFixtures.ts"

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

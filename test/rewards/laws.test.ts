/**
 * The laws of gyre/testing catch broken rewards: each law fails, with a readable
 * counterexample, on a reward that breaks it.
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect } from "effect"
import * as fc from "fast-check"
import { Reward } from "gyre"
import { arb, laws, transforms } from "gyre/testing"

const anyProblem = [null]

const rejects = async (law: Promise<void>, pattern: RegExp) => {
  let error: unknown
  try {
    await law
  } catch (e) {
    error = e
  }
  assert.isDefined(error, "the law should have failed")
  assert.match(String(error), pattern)
}

describe("laws", () => {
  it("bounded catches a score out of range", () =>
    rejects(
      laws.bounded(Reward.make("too_big", (r) => (r.completion.length > 3 ? 2 : 1)), { min: 0, max: 1, problems: anyProblem }),
      /law bounded: reward "too_big" scored 2, outside \[0, 1\]/,
    ))

  it("finite catches a NaN score and a throwing reward, naming the reward", async () => {
    await rejects(laws.finite(Reward.make("nan", () => Number.NaN), { problems: anyProblem }), /reward "nan" failed instead of scoring: RewardDefect in component "nan": returned NaN/)
    await rejects(
      laws.finite(Reward.make("boom", () => {
        throw new Error("kaput")
      }), { problems: anyProblem }),
      /RewardDefect in component "boom": threw kaput/,
    )
  })

  it("deterministic catches a reward with hidden state", () => {
    let calls = 0
    return rejects(laws.deterministic(Reward.make("stateful", () => calls++ % 2), { problems: anyProblem }), /scored the same rollouts differently/)
  })

  it("deterministic catches a random reward even when it is cached", () => {
    const random = Reward.make("random", () => Math.random())
    return rejects(laws.deterministic(Reward.cached(random, "v1"), { problems: anyProblem }), /law deterministic: reward "random" scored the same rollouts differently/)
  })

  it("goldScoresMax catches a reward that misses a spelling", () =>
    rejects(
      laws.goldScoresMax(Reward.make("naive", (r: Reward.Rollout<number>) => (r.completion.trim().endsWith(String(r.problem)) ? 1 : 0)), {
        problems: fc.integer({ min: 1000, max: 100_000 }),
        gold: (n) => arb.answerCompletion(n),
      }),
      /law goldScoresMax: reward "naive" scored 0 on a gold completion/,
    ))

  it("invariant catches a reward that counts characters", () =>
    rejects(
      laws.invariant(Reward.make("chars", (r) => Math.min(1, r.completion.length / 100)), { problems: anyProblem, transform: transforms.padWhitespace }),
      /law invariant: reward "chars" scored .* before the transformation/,
    ))

  it("monotone catches a reward that rewards length", () =>
    rejects(
      laws.monotone(Reward.make("verbose", (r) => (r.completion.length > 20 ? 1 : 0)), {
        problems: anyProblem,
        transform: transforms.appendNoise,
        direction: "nonIncreasing",
      }),
      /law monotone: reward "verbose" went from 0 to 1/,
    ))

  it("agrees catches a disagreement with the oracle", () =>
    rejects(laws.agrees(Reward.make("off_by_one", (r) => r.completion.length + 1), { problems: anyProblem, expected: (_, c) => c.length }), /where \d+ was expected/))

  it("orderIndependent catches a group reward that scores by position", async () => {
    const byPosition = Reward.group("first_wins", (rs) => rs.map((_, i) => (i === 0 ? 1 : 0)))
    await rejects(laws.orderIndependent(byPosition, { problems: anyProblem, completions: arb.noise() }), /law orderIndependent/)
    const byRank = Reward.group("longest", (rs) => {
      const max = Math.max(...rs.map((r) => r.completion.length))
      return rs.map((r) => (r.completion.length === max ? 1 : 0))
    })
    await laws.orderIndependent(byRank, { problems: anyProblem, completions: arb.noise() })
    await laws.bounded(byRank, { min: 0, max: 1, problems: anyProblem, groupSize: 5 })
  })

  it("runs rewards that need services through provide", async () => {
    class Limit extends Context.Service<Limit, { readonly chars: number }>()("test/Limit") {}
    const short = Reward.make("short", (r) =>
      Effect.gen(function* () {
        const limit = yield* Limit
        return r.completion.length <= limit.chars ? 1 : 0
      }))
    await laws.agrees(short, {
      problems: anyProblem,
      expected: (_, c) => (c.length <= 5 ? 1 : 0),
      provide: Effect.provideService(Limit, { chars: 5 }),
    })
  })

  it("rejects bad options at once", () => {
    assert.throws(() => laws.bounded(Reward.make("r", () => 0), { min: 1, max: 0, problems: anyProblem }), /min \(1\) must be <= max \(0\)/)
    assert.throws(() => laws.finite(Reward.make("r", () => 0), { problems: [] }), /problems is an empty list/)
    assert.throws(() => laws.finite(Reward.make("r", () => 0), { problems: anyProblem, groupSize: 0 }), /groupSize/)
  })

  it("arb.number writes the value it carries, in the formats asked for", () =>
    fc.assert(fc.property(arb.number({ formats: ["thousands"] }), (n) => {
      assert.match(n.text, /^-?\d{1,3}(,\d{3})+$/)
      assert.strictEqual(Number(n.text.replace(/,/g, "")), n.value)
    })))
})

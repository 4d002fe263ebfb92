/**
 * envs/competition-math.ts on its fixture: rows in MATH's format (problem, solution,
 * answer, level, type), every gold readable by `mathAnswer` and equal to the solution's
 * last boxed answer, and LaTeX answers graded as Math-Verify grades them.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { score } from "gyre/testing"
import { unreadableGolds } from "gyre/rewards"
import math, { FIXTURE, gold, lastBoxed } from "../../envs/competition-math.ts"
import { fixtureRows } from "./realModels.ts"

const rows = fixtureRows(FIXTURE).map((r) => Schema.decodeUnknownSync(math.problem)(r))

describe("envs/competition-math.ts", () => {
  it.effect("the fixture: a few dozen rows of seven subjects and several levels, each answer its solution's last boxed one, all readable", () =>
    Effect.gen(function* () {
      assert.isAtLeast(rows.length, 30)
      assert.isAtLeast(new Set(rows.map((r) => r.type)).size, 7)
      assert.isAtLeast(new Set(rows.map((r) => r.level)).size, 4)
      for (const r of rows) assert.strictEqual(lastBoxed(r.solution), r.answer, r.problem)
      assert.deepStrictEqual(yield* unreadableGolds(rows.map((r) => gold(r)!)), [])
    }))

  it("lastBoxed reads nested braces; without an answer field the gold is the solution's last boxed answer", () => {
    assert.strictEqual(lastBoxed("so \\boxed{\\frac{\\sqrt{2}}{2}}."), "\\frac{\\sqrt{2}}{2}")
    assert.strictEqual(lastBoxed("no box"), undefined)
    assert.strictEqual(gold({ problem: "", solution: "first \\boxed{1}, then \\boxed{2}" }), "2")
  })

  it.effect("equivalent LaTeX scores; a different value does not", () =>
    Effect.gen(function* () {
      const byAnswer = new Map(rows.map((r) => [r.answer, r]))
      const half = byAnswer.get("\\frac{3}{2}")!
      assert.strictEqual((yield* score(math.reward, half, "<think>...</think> The slope is \\boxed{1.5}.")).components["correct"], 1)
      assert.strictEqual((yield* score(math.reward, half, "<think>...</think> \\boxed{\\frac{2}{3}}")).components["correct"], 0)
      const interval = byAnswer.get("(2,3)")!
      assert.strictEqual((yield* score(math.reward, interval, "<think></think>\\boxed{(2, 3)}")).components["correct"], 1)
      assert.strictEqual((yield* score(math.reward, interval, "<think></think>\\boxed{[2, 3]}")).components["correct"], 0)
      const root = byAnswer.get("2\\sqrt{3}")!
      assert.strictEqual((yield* score(math.reward, root, "<think></think>\\boxed{\\sqrt{12}}")).components["correct"], 1)
    }))
})

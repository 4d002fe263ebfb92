/**
 * envs/words.ts, the env of the SFT -> RL walkthrough (`initFrom`): its reference is
 * the reversed word and scores the maximum, its reward is bounded and exact, and its
 * held-out words never reach training.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fc from "fast-check"
import { Env } from "gyre"
import { laws, score } from "gyre/testing"
import words, { reversed } from "../../envs/words.ts"

const problems = fc.record({ word: fc.string({ unit: fc.constantFrom(..."abcdefghijklmnopqrstuvwxyz"), minLength: 1, maxLength: 6 }) })

describe("envs/words.ts", () => {
  it("its reference scores the maximum", () => laws.goldScoresMax(words.reward, { problems, gold: (p) => words.reference!(p) }))
  it("its reward stays in [0, 1]", () => laws.wellBehaved(words.reward, { min: 0, max: 1, problems }))

  it.effect("exact match, letter credit as a metric only; reversed articles are not normalized away", () =>
    Effect.gen(function* () {
      assert.strictEqual(reversed({ word: "cat" }), "tac")
      const right = yield* score(words.reward, { word: "eht" }, " the")
      assert.strictEqual(right.value, 1)
      const near = yield* score(words.reward, { word: "cat" }, " tab")
      assert.strictEqual(near.value, 0)
      assert.closeTo(near.components["letters"]!, 2 / 3, 1e-9)
    }))

  it.effect("draws 3-letter words, and training never draws a held-out one", () =>
    Effect.gen(function* () {
      const held = new Set((yield* Env.evalSet(words, { seed: 0 })).map((t) => t.problem.word))
      assert.strictEqual(held.size, 300)
      for (const w of held) assert.match(w, /^[a-z]{3}$/)
      const train = yield* Effect.forEach(Array.from({ length: 500 }, (_, index) => index), (index) => Env.problemAt(words, { seed: 1, index, split: "train" }))
      for (const t of train) assert.isFalse(held.has(t.problem.word), t.problem.word)
    }))
})

import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fc from "fast-check"
import { fakeTokens, laws, score, transforms } from "gyre/testing"
import { lengthPenalty, maxLength, maxTokens, notTruncated } from "../../rewards/length.ts"

const anyProblem = [null]

describe("maxLength / maxTokens", () => {
  it("agree with their definitions", async () => {
    await laws.agrees(maxLength(12), { problems: anyProblem, expected: (_, c) => (c.length <= 12 ? 1 : 0) })
    await laws.agrees(maxTokens(8), { problems: anyProblem, expected: (_, c) => (fakeTokens(c).length <= 8 ? 1 : 0) })
  })

  it("never rise when text is appended", async () => {
    await laws.monotone(maxLength(20), { problems: anyProblem, transform: transforms.appendNoise, direction: "nonIncreasing" })
    await laws.monotone(maxTokens(20), { problems: anyProblem, transform: transforms.appendNoise, direction: "nonIncreasing" })
  })

  it("reject a negative limit", () => {
    assert.throws(() => maxLength(-1), /maxLength: max/)
    assert.throws(() => maxTokens(Number.NaN), /maxTokens: max/)
  })
})

describe("lengthPenalty", () => {
  const reward = lengthPenalty({ from: 10, to: 30 })

  it("lies in [-penalty, 0]", async () => {
    await laws.bounded(reward, { min: -1, max: 0, problems: anyProblem })
    await laws.bounded(lengthPenalty({ from: 0, to: 5, penalty: 0.25, unit: "chars" }), { min: -0.25, max: 0, problems: anyProblem })
  })

  it("never rises as the completion grows", () =>
    laws.monotone(reward, { problems: anyProblem, transform: transforms.appendNoise, direction: "nonIncreasing" }))

  it("falls linearly from `from` to `to`", () =>
    laws.agrees(reward, {
      problems: anyProblem,
      completions: fc.integer({ min: 0, max: 40 }).map((n) => "x".repeat(n)),
      expected: (_, c) => -Math.min(1, Math.max(0, (c.length - 10) / 20)),
      tolerance: 1e-12,
    }))

  it("counts tokens, not characters, by default", () =>
    Effect.gen(function* () {
      const s = yield* score(reward, null, "short", { tokens: Array.from({ length: 20 }, (_, i) => i) })
      assert.strictEqual(s.value, -0.5)
    }))

  it("rejects a bad range", () => {
    assert.throws(() => lengthPenalty({ from: 10, to: 10 }), /to must be .* greater than from/)
    assert.throws(() => lengthPenalty({ from: -1, to: 10 }), /from must be/)
    assert.throws(() => lengthPenalty({ from: 1, to: 10, penalty: -1 }), /penalty must be/)
  })
})

describe("notTruncated", () => {
  it("scores 1 for stop and 0 for length", () =>
    Effect.gen(function* () {
      assert.strictEqual((yield* score(notTruncated(), null, "done")).value, 1)
      assert.strictEqual((yield* score(notTruncated(), null, "cut", { stopReason: "length" })).value, 0)
    }))
})

/**
 * `gyre eval`: scores a model on an env's held-out set without training, prints a 95%
 * interval per component and pass@k and maj@k per env, and writes every rollout to
 * eval.jsonl.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { extractAnswer } from "../../rewards/answers.ts"
import { evaluateModel, interval } from "../../src/app/Evaluation.ts"

describe("gyre eval", () => {
  it("Wilson intervals for 0/1 scores, normal ones otherwise", () => {
    const w = interval("correct", [1, 1, 1, 0, 0, 0, 0, 0, 0, 0])
    assert.strictEqual(w.method, "wilson")
    assert.closeTo(w.mean, 0.3, 1e-12)
    // Wilson score interval for 3 of 10 at 95%: [0.108, 0.603]
    assert.closeTo(w.low, 0.1078, 1e-3)
    assert.closeTo(w.high, 0.6032, 1e-3)
    const n = interval("length", [2, 4, 6, 8])
    assert.strictEqual(n.method, "normal")
    assert.closeTo(n.mean, 5, 1e-12)
    assert.isBelow(n.low, 5)
    assert.isAbove(n.high, 5)
    // counts that happen to be all 1 (one turn per episode) are not a proportion
    const turns = interval("turns", [1, 1, 1, 1], { counts: true })
    assert.strictEqual(turns.method, "normal")
    assert.deepStrictEqual([turns.low, turns.high], [1, 1])
  })

  it.effect("scores the calculator's base model on distinct held-out problems and writes eval.jsonl", () =>
    Effect.gen(function* () {
      const out = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-eval-"))
      const summary = yield* evaluateModel({ env: "calculator", size: 24, out })
      assert.strictEqual(summary.checkpoint, "base")
      const [heldout] = summary.splits
      assert.strictEqual(heldout!.split, "heldout")
      assert.strictEqual(heldout!.problems, 24)
      const correct = heldout!.intervals.find((i) => i.name === "correct")!
      assert.isAtLeast(correct.mean, correct.low)
      assert.isAtMost(correct.mean, correct.high)
      // a multi-turn env: turns and tool calls per episode, with their intervals
      assert.deepStrictEqual(heldout!.episodes.map((i) => i.name), ["turns", "tool_calls", "tool_errors", "parse_errors"])
      const turns = heldout!.episodes[0]!
      assert.strictEqual(turns.n, 24)
      assert.isAtLeast(turns.mean, 1)
      const rows = Fs.readFileSync(summary.file, "utf8").trim().split("\n").map((l) => JSON.parse(l))
      assert.strictEqual(rows.length, 24)
      assert.strictEqual(new Set(rows.map((r) => r.key)).size, 24, "distinct problems")
      for (const r of rows) {
        assert.match(r.key, /^calculator\/eval\//)
        assert.isArray(r.turns)
      }
    }))

  it.effect("--samples 4: pass@1 is the correct rate, pass@k and maj@k per env with intervals, every sample in eval.jsonl", () =>
    Effect.gen(function* () {
      const out = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-eval-k-"))
      const summary = yield* evaluateModel({ env: "math", size: 12, samples: 4, k: "1,2,4", out })
      const [heldout] = summary.splits
      assert.strictEqual(summary.threshold, 1)
      assert.deepStrictEqual(heldout!.attempts.map((a) => a.env), ["math"])
      const estimates = heldout!.attempts[0]!.estimates
      assert.deepStrictEqual(estimates.map((e) => e.name), ["pass@1", "pass@2", "pass@4", "maj@1", "maj@2", "maj@4"])
      const byName = Object.fromEntries(estimates.map((e) => [e.name, e]))
      // math's total is its 0/1 `correct`: pass@1 and maj@1 are its mean
      const correct = heldout!.intervals.find((i) => i.name === "correct")!
      assert.closeTo(byName["pass@1"]!.mean, correct.mean, 1e-9)
      assert.closeTo(byName["maj@1"]!.mean, correct.mean, 1e-9)
      assert.isAtMost(byName["pass@1"]!.mean, byName["pass@2"]!.mean)
      assert.isAtMost(byName["pass@2"]!.mean, byName["pass@4"]!.mean)
      for (const e of estimates) {
        assert.strictEqual(e.problems, 12)
        assert.isAtMost(e.low, e.mean)
        assert.isAtLeast(e.high, e.mean)
      }
      const rows = Fs.readFileSync(summary.file, "utf8").trim().split("\n").map((l) => JSON.parse(l))
      assert.strictEqual(rows.length, 48)
      for (const r of rows) {
        assert.strictEqual(r.correct, r.reward >= 1)
        // math's answer (Env.answer) is the number its reward reads
        assert.strictEqual(r.answer, String(extractAnswer(r.completion) ?? r.completion.trim()))
      }
    }))

  it.effect("--k past --samples, and a threshold that is not a number, are refused", () =>
    Effect.gen(function* () {
      const tooLarge = yield* Effect.flip(evaluateModel({ env: "math", samples: 4, k: "1,8" }))
      assert.include(tooLarge.message, "--k")
      assert.include(tooLarge.message, "from 1 to 4")
      const nan = yield* Effect.flip(evaluateModel({ env: "math", threshold: Number.NaN }))
      assert.include(nan.message, "--threshold")
    }))

  it.effect("a run folder without checkpoints says so", () =>
    Effect.gen(function* () {
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-eval-empty-"))
      const error = yield* Effect.flip(evaluateModel({ from: dir }))
      assert.include(error.message, `--from ${dir}`)
    }))
})

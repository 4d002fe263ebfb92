/**
 * `gyre eval`: scores a model on an env's held-out set without training, prints a 95%
 * interval per component and writes every rollout to eval.jsonl.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { evaluateModel, interval } from "../../src/Evaluation.ts"

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
    }), { timeout: 60_000 })

  it.effect("a run folder without checkpoints says so", () =>
    Effect.gen(function* () {
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-eval-empty-"))
      const error = yield* Effect.flip(evaluateModel({ from: dir }))
      assert.include(error.message, `--from ${dir}`)
    }))
})

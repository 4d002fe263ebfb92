/**
 * Reward failures are never silent: a leaf that fails (an InfraFault, a timeout) is kept
 * with its rollout's score whatever its weight, counted per component, and the first
 * failure of each kind is logged once per run; what a scorer notes goes with the score.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Logger } from "effect"
import * as Reward from "../../src/vocabulary/Reward.ts"
import { sampleRows } from "../../src/run/Collect.ts"
import { laws } from "../../src/testing/index.ts"
import { group, rollout } from "../../src/testing/Rollouts.ts"

/** Runs `self` with a logger that records each warning's message. */
const capturingWarnings = <A, E>(self: Effect.Effect<A, E>) => {
  const warnings: Array<string> = []
  const logger = Logger.make(({ logLevel, message }) => {
    if (logLevel === "Warn") warnings.push((Array.isArray(message) ? message : [message]).map(String).join(" "))
  })
  return Effect.map(Effect.provide(self, Logger.layer([logger])), (a) => ({ result: a, warnings }))
}

const correct = Reward.make<string>("correct", (r) => (r.completion.trim() === r.problem ? 1 : 0))
/** a judge whose every question is too long (the message varies with the completion) */
const overlong = Reward.make<string>("judge", (r) =>
  Effect.fail(new Reward.InfraFault({ message: `prompt has ${40 + r.completion.length} tokens; the context length is 48` })))

describe("a failing weight-0 component", () => {
  const reward = Reward.weighted({ correct: [correct, 1], judged: [overlong, 0] })

  it.effect("is kept with each score, with its message, and masks nothing", () =>
    Effect.gen(function* () {
      const scores = yield* Reward.evaluate(reward, group("7", [" 7", " 8"]))
      assert.deepStrictEqual(scores.map((s) => s.value), [1, 0])
      assert.deepStrictEqual(scores.map((s) => s.masked), [undefined, undefined])
      assert.deepStrictEqual(scores[0]!.failed, { judged: "prompt has 42 tokens; the context length is 48" })
      assert.deepStrictEqual(scores[0]!.components, { correct: 1, judged: undefined })
      assert.deepStrictEqual(Reward.failureCounts(scores), { correct: 0, judged: 2 })
    }))

  it.effect("is logged once per kind in a run (its cache), for any weight", () =>
    Effect.gen(function* () {
      const masking = Reward.weighted({ correct: [correct, 1], graded: [overlong, 0.5] })
      const run = Reward.withCache(Effect.gen(function* () {
        yield* Reward.evaluate(reward, group("7", [" 7", " 8"]))
        // the same kind (only its numbers differ): counted and kept, not logged
        const [later] = yield* Reward.evaluate(reward, group("7", [" 777"]))
        assert.include(later!.failed!["judged"]!, "prompt has 44 tokens")
        // another component, with a weight: logged too, and masked
        const [masked] = yield* Reward.evaluate(masking, [rollout("7", "7")])
        assert.isDefined(masked!.masked)
      }))
      const { warnings } = yield* capturingWarnings(run)
      assert.strictEqual(warnings.length, 2, warnings.join("\n"))
      assert.include(warnings[0]!, `reward component "judged" failed: prompt has 42 tokens; the context length is 48`)
      assert.include(warnings[1]!, `reward component "graded" failed: prompt has 41 tokens`)
      // a new run logs again
      const again = yield* capturingWarnings(Reward.withCache(Reward.evaluate(reward, [rollout("7", "7")])))
      assert.strictEqual(again.warnings.length, 1)
    }))

  it.effect("a failure of another kind is logged too", () =>
    Effect.gen(function* () {
      let calls = 0
      const flaky = Reward.make<string>("flaky", () => Effect.fail(new Reward.InfraFault({ message: calls++ === 0 ? "connection refused" : "judge answered 503" })))
      const { warnings } = yield* capturingWarnings(Reward.withCache(Effect.gen(function* () {
        for (let i = 0; i < 4; i++) yield* Reward.evaluate(Reward.weighted({ flaky: [flaky, 0] }), [rollout("7", "7")])
      })))
      assert.deepStrictEqual(warnings.map((w) => /failed: ([^(]+)/.exec(w)![1]!.trim()), ["connection refused", "judge answered 503"])
    }))

  it.live("a timeout is a failure with its message", () =>
    Effect.gen(function* () {
      const slow = Reward.make<string>("slow", () => Effect.as(Effect.sleep("1 second"), 1), { timeout: "10 millis" })
      const [s] = yield* Reward.evaluate(Reward.weighted({ correct: [correct, 1], slow: [slow, 0] }), [rollout("7", "7")])
      assert.deepStrictEqual(s!.failed, { slow: "timed out after 10ms" })
    }))
})

describe("in a law", () => {
  it("a failing reward is logged once per kind, not once per case", async () => {
    const lines: Array<string> = []
    const log = console.log
    console.log = (...parts: Array<unknown>) => lines.push(parts.map(String).join(" "))
    try {
      await laws.finite(Reward.weighted({ correct: [correct, 1], judged: [overlong, 0] }), { problems: ["7"], numRuns: 30 })
    } finally {
      console.log = log
    }
    assert.strictEqual(lines.filter((l) => l.includes(`reward component "judged" failed`)).length, 1, lines.join("\n"))
  })
})

describe("notes", () => {
  it.effect("what a scorer notes goes with its rollout's score, under its component's name", () =>
    Effect.gen(function* () {
      const noting = Reward.make<string>("asked", (r, { note }) => {
        note(`reply to ${r.completion.trim()}`)
        return 1
      })
      const scores = yield* Reward.evaluate(Reward.weighted({ correct: [correct, 1], judged: [noting, 0] }), group("7", [" 7", " 8"]))
      assert.deepStrictEqual(scores.map((s) => s.notes), [{ judged: ["reply to 7"] }, { judged: ["reply to 8"] }])
      // a plain reward notes nothing: no field at all
      const [plain] = yield* Reward.evaluate(correct, [rollout("7", "7")])
      assert.isFalse("notes" in plain! || "failed" in plain!)
      // a map of one component keeps its notes and failures under the map's name
      const [mapped] = yield* Reward.evaluate(Reward.clamp(noting, 0, 1), [rollout("7", "7")])
      assert.deepStrictEqual(mapped!.notes, { asked: ["reply to 7"] })
    }))

  it.effect("a cached leaf replays its notes with its score", () =>
    Effect.gen(function* () {
      let calls = 0
      const noting = Reward.cached(Reward.make<string>("asked", (_, { note }) => {
        note(`call ${++calls}`)
        return 1
      }), "v1")
      const scores = yield* Reward.withCache(Effect.gen(function* () {
        const a = yield* Reward.evaluate(noting, [rollout("7", "7")])
        const b = yield* Reward.evaluate(noting, [rollout("7", "7")])
        return [...a, ...b]
      }))
      assert.strictEqual(calls, 1)
      assert.deepStrictEqual(scores.map((s) => s.notes), [{ asked: ["call 1"] }, { asked: ["call 1"] }])
    }))

  it.effect("rollouts.jsonl and eval.jsonl rows carry failed and notes", () =>
    Effect.gen(function* () {
      const noting = Reward.make<string>("asked", (_, { note }) => Effect.sync(() => note(" 1")).pipe(Effect.as(1)))
      const reward = Reward.weighted({ correct: [correct, 1], judged: [overlong, 0], asked: [noting, 0] })
      const rollouts = group("7", [" 7"])
      const scores = yield* Reward.evaluate(reward, rollouts)
      const [row] = sampleRows({
        task: { key: "t/train/0/0", env: "t", problem: "7", envDef: { episode: undefined } as never },
        index: 0,
        promptTokens: [],
        prompt: "",
        version: 0,
        rollouts,
        episodes: [],
        scores: [...scores],
      })
      assert.deepStrictEqual((row as { failed?: unknown }).failed, { judged: "prompt has 42 tokens; the context length is 48" })
      assert.deepStrictEqual((row as { notes?: unknown }).notes, { asked: [" 1"] })
    }))
})

describe("a scorer that dies with a RewardDefect", () => {
  it.effect("stops with its message, named by its component", () =>
    Effect.gen(function* () {
      const dies = Reward.make<string>("inner", () => Effect.die(new Reward.RewardDefect({ reward: "inner", message: "cannot fit: 61 tokens, context 48" })))
      const error = yield* Effect.flip(Reward.evaluate(Reward.weighted({ judged: [dies, 0] }), [rollout("7", "7")]))
      assert.strictEqual(error.reward, "judged")
      assert.strictEqual(error.message, "cannot fit: 61 tokens, context 48")
    }))
})

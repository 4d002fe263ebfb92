/**
 * `envs/ask.ts`, a questioner/answerer game whose answerer is a frozen model: played on
 * scripted samplers (test doubles: the policy's questions and the frozen answerer's
 * answers computed from their views), and run through the runner with `models/base`
 * started as the answerer; `config.json` records the roles and players.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import ask, { operands } from "../../envs/ask.ts"
import * as CharTokenizer from "../../src/backends/local/CharTokenizer.ts"
import { FrozenPlayers } from "../../src/game/Frozen.ts"
import { ContextLength } from "../../src/run/Rollout.ts"
import { playGames } from "../../src/run/GameRollout.ts"
import { Sampler } from "../../src/services/Sampler.ts"
import { Tokenizer } from "../../src/services/Tokenizer.ts"
import * as Game from "../../src/vocabulary/Game.ts"
import { train } from "../../src/app/Training.ts"
import { scriptedSampler } from "./ScriptedSampler.ts"

/** Plays one game of `problem`: the policy asks `questions` in turn; the frozen answerer answers `answer(view)`. */
const play = (problem: { readonly target: number; readonly op: "plus" | "minus" | "times" }, questions: ReadonlyArray<string>, answer: (view: string) => string) => {
  const answerer = scriptedSampler((view) => answer(view))
  let asked = 0
  const policy = scriptedSampler(() => questions[asked++] ?? "")
  return playGames({ env: ask, task: { key: "k", env: "ask", problem }, sampling: { maxTokens: 4, temperature: 1, seed: 1 }, numSamples: 1, affinityKey: "a", version: 0, step: 0, split: "train" }).pipe(
    Effect.provideService(Tokenizer, CharTokenizer.make()),
    Effect.provideService(Sampler, policy.service),
    Effect.provideService(FrozenPlayers, new Map([["base", { sampler: answerer.service, version: 0 }]])),
    Effect.provideService(ContextLength, 48),
    Effect.map((played) => ({ played, policy: policy.calls, answerer: answerer.calls })),
  )
}

describe("envs/ask.ts: the policy asks, a frozen model answers", () => {
  it.effect("the answerer reads the question in its own format at temperature 0; after a miss the questioner sees what came back, and wins on the number", () =>
    Effect.gen(function* () {
      const { played, policy, answerer } = yield* play({ target: 12, op: "times" }, [" 2 5", " 3 4"], (view) => (view.includes("3 times 4") ? " 12" : " 10"))
      assert.deepStrictEqual(answerer.map((c) => [c.prompt.replace(/^\W+/, ""), c.temperature]), [["What is 2 times 5?", 0], ["What is 3 times 4?", 0]])
      assert.deepStrictEqual(policy.map((c) => c.prompt.replace(/^\W+/, "")), ["Get 12 from times. Ask:", "Get 12 from times. 2 5 gave 10. Ask:"])
      assert.deepStrictEqual(played.roles, ["questioner"], "only the questioner is a sample")
      assert.deepStrictEqual(played.outcomes, [1])
      assert.strictEqual(played.episodes[0]!.turns.length, 2)
    }))

  it.effect("two misses lose (0); a text without two digits asks nothing (-1)", () =>
    Effect.gen(function* () {
      assert.deepStrictEqual((yield* play({ target: 7, op: "plus" }, [" 1 1", " 2 2"], () => " 3")).played.outcomes, [0])
      const none = yield* play({ target: 7, op: "plus" }, [" 7"], () => " 7")
      assert.deepStrictEqual(none.played.outcomes, [-1])
      assert.strictEqual(none.answerer.length, 0)
      assert.deepStrictEqual(operands("a3b4c5"), { a: 3, b: 4 })
    }))

  it("Game.frozen checks its temperature", () => {
    assert.deepStrictEqual(Game.frozen("base", { temperature: 0 }), { frozen: "base", temperature: 0 })
    assert.throws(() => Game.frozen("base", { temperature: -1 }), /temperature must be a number >= 0, got -1/)
  })

  it.live("through the runner: models/base started as the answerer, the questioner's samples with their outcomes", () =>
    Effect.gen(function* () {
      const run = yield* train({ env: "ask", steps: 2, groups: 2, groupSize: 4, evalEvery: 2, evalSize: 6, saveEvery: 0, out: Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-ask-")) })
      const rows = Fs.readFileSync(Path.join(run.outDir, "rollouts.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l) as Record<string, unknown>)
      assert.deepStrictEqual([...new Set(rows.map((r) => r["role"]))], ["questioner"])
      for (const r of rows) assert.include([-1, 0, 1], r["outcome"])
      assert.isDefined(run.metrics.at(-1)!["test/env/all/role/questioner/win_rate"])
      // config.json says who played which role, and a resumed run says the same
      const players = { questioner: "policy", answerer: "frozen base at temperature 0" }
      const games = () => JSON.parse(Fs.readFileSync(Path.join(run.outDir, "config.json"), "utf8")).games
      assert.deepStrictEqual(games(), { ask: { roles: ["questioner", "answerer"], players, evalPlayers: players } })
      const resumed = yield* train({ resume: run.outDir, steps: 3 })
      assert.deepStrictEqual(resumed.metrics.map((m) => m["step"]), [3])
      assert.deepStrictEqual(games(), { ask: { roles: ["questioner", "answerer"], players, evalPlayers: players } })
    }))
})

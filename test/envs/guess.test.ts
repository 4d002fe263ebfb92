/**
 * The guess-the-number env (test/envs/guess.ts): one `Tool.episode` whose tool reads the
 * problem's hidden number from a service once per episode; played by a scripted policy
 * (binary search on the tool's answers) and scored by the service-backed rewards, then a
 * few steps of a real run on a tiny embedded model.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { Local } from "../../src/backends/local/index.ts"
import * as Reward from "../../src/vocabulary/Reward.ts"
import * as RunLog from "../../src/folder/RunLog.ts"
import * as Runner from "../../src/Runner.ts"
import { playOne, scriptedSampler } from "../run/ScriptedSampler.ts"
import guess, { AnswerKey, type Game, Judge } from "./guess.ts"
import { quiet, toySettings } from "./vowels.ts"

/** binary search on the checks so far; once a check says yes, answer with that number */
const searcher = (text: string): string => {
  let lo = 1
  let hi = 9
  for (const [, n, verdict] of text.matchAll(/\[(\d)\]=(higher|lower|yes);/g)) {
    if (verdict === "yes") return ` ${n}`
    if (verdict === "higher") lo = Number(n) + 1
    else hi = Number(n) - 1
  }
  return lo === hi ? ` ${lo}` : `[${Math.floor((lo + hi) / 2)}]`
}


/** plays one game with a policy; the services are the env's own, or `services` */
const play = (game: Game, policy: (text: string) => string, services: Layer.Layer<AnswerKey | Judge> = guess.services as Layer.Layer<AnswerKey | Judge>) =>
  Effect.gen(function* () {
    const double = scriptedSampler(policy)
    const { episodes } = yield* playOne({ env: guess, task: { key: `guess/train/0/${game.id}`, env: "guess", problem: game }, prompt: "Guess 1-9:", maxTokens: 4, sampler: double.service, contextLength: 64 })
    const e = episodes[0]!
    const rollout: Reward.Rollout<Game> = {
      problem: game,
      prompt: "Guess 1-9:",
      completion: e.turns[e.turns.length - 1]!.text,
      tokens: [],
      stopReason: "stop",
      index: 0,
      groupSize: 1,
      turns: e.turns.map((t) => ({ text: t.text, ...(t.observation !== undefined ? { observation: t.observation } : {}) })),
    }
    const [score] = yield* Reward.evaluate(guess.reward, [rollout])
    return { episode: e, score: score! }
  }).pipe(Effect.provide(services))

const secretOf = (id: number) => Effect.runSync(AnswerKey.use((k) => k.secret(id)).pipe(Effect.provide(AnswerKey.layer)))

describe("guess the number", () => {
  it.effect("a binary search finds every hidden number through the check tool; both rewards see the services", () =>
    Effect.gen(function* () {
      const seen = new Set<number>()
      for (let id = 0; id < 40; id++) {
        const { episode, score } = yield* play({ id }, searcher)
        seen.add(secretOf(id))
        assert.strictEqual(episode.stop, "completed")
        assert.strictEqual(episode.toolErrors, 0)
        assert.isAtMost(episode.toolCalls, 3)
        assert.match(episode.turns[episode.turns.length - 1]!.text, /^ \d$/)
        assert.strictEqual(episode.turns.at(-1)!.text.trim(), String(secretOf(id)))
        // the judge (weight 0) says 1 only when a check said yes to the answer; the total is `solved`
        const confirmed = episode.turns.some((t) => t.observation === "=yes;") ? 1 : 0
        assert.deepStrictEqual(score.components, { solved: 1, judged: confirmed })
        assert.strictEqual(score.value, 1)
      }
      assert.strictEqual(seen.size, 9, "the games cover 1..9")
    }))

  it.effect("the tool asks the answer key once per episode (its state), however many checks it answers", () =>
    Effect.gen(function* () {
      const asked: Array<number> = []
      const counting = Layer.mergeAll(
        Layer.succeed(AnswerKey, AnswerKey.of({ secret: (id) => Effect.sync(() => (asked.push(id), 5)) })),
        Judge.layer,
      )
      // never answers: checks 1, 2, 3 (lower than 5 each time, so the tool is asked three times)
      const { episode } = yield* play({ id: 7 }, (text) => `[${(text.match(/\[/g)?.length ?? 0) + 1}]`, counting)
      assert.strictEqual(episode.toolCalls, 3)
      assert.deepStrictEqual(episode.turns.map((t) => t.observation), ["=higher;", "=higher;", "=higher;", undefined])
      assert.strictEqual(episode.stop, "max_tool_calls")
      // once by the tool's state, once by the `solved` reward
      assert.deepStrictEqual(asked, [7, 7])
    }))

  it.effect("a wrong answer scores 0 on both; an out-of-range check ends the episode as a parse error", () =>
    Effect.gen(function* () {
      const id = 3
      const wrong = (secretOf(id) % 9) + 1
      const { score } = yield* play({ id }, () => ` ${wrong}`)
      assert.deepStrictEqual(score.components, { solved: 0, judged: 0 })
      const { episode } = yield* play({ id }, () => "[0]")
      assert.strictEqual(episode.stop, "parse_error")
      assert.match(episode.turns[0]!.toolError!, /bad arguments for check/)
    }))

  it.effect("runs on the embedded model: a few steps of a tiny random-init model, episodes recorded turn by turn", () =>
    Effect.gen(function* () {
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-guess-"))
      const backend = Layer.fresh(Local.layer({
        config: { vocabSize: 98, contextLength: 48, nLayers: 1, dModel: 32, nHeads: 2, mlpRatio: 2 },
        seed: 0,
        stateDir: RunLog.paths(dir).state,
        lora: { rank: 4, alpha: 8, targets: ["q", "v"] },
      }))
      const rows = yield* Runner.run(toySettings(dir, { env: "guess", steps: 3, groups: 2, groupSize: 4, sampling: { maxTokens: 4, temperature: 1 }, saveEvery: 0 }), guess).pipe(
        Effect.provide(backend),
        quiet,
      )
      assert.strictEqual(rows.length, 3)
      const rollouts = yield* RunLog.readJsonl(RunLog.paths(dir).rollouts)
      assert.isAbove(rollouts.length, 0)
      for (const r of rollouts) {
        assert.isArray(r["turns"])
        assert.containsAllKeys(r["components"] as object, ["solved", "judged"])
      }
    }))
})

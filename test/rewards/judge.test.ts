/**
 * The judge reward is never silent: its replies go with each rollout (notes), a question
 * too long for the judge model's context is a failure that names the lengths, and a judge
 * whose question cannot fit even with no completion stops the run at its first question,
 * naming the judge and the lengths.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Logger, Schema } from "effect"
import * as CharTokenizer from "../../src/backends/local/CharTokenizer.ts"
import { Local } from "../../src/backends/local/index.ts"
import * as Env from "../../src/vocabulary/Env.ts"
import * as Reward from "../../src/vocabulary/Reward.ts"
import * as RunLog from "../../src/folder/RunLog.ts"
import * as Runner from "../../src/Runner.ts"
import { Sampler } from "../../src/services/Sampler.ts"
import { rollout as testRollout } from "../../src/testing/Rollouts.ts"
import { Tokenizer } from "../../src/services/Tokenizer.ts"
import { Judge, judge } from "../../rewards/judge.ts"
import { quiet, TINY, toySettings } from "../envs/vowels.ts"
import { scriptedSampler } from "../run/ScriptedSampler.ts"

type Problem = { readonly n: number }

const rollout = (completion: string): Reward.Rollout<Problem> => testRollout({ n: 1 }, completion, { prompt: "Say 1:", tokens: [] })

/** a judge model on a scripted sampler with the char tokenizer (one token a character, plus BOS) */
const judgeModel = (reply: (question: string) => string, contextLength?: number) =>
  Judge.fromBackend(
    Layer.merge(Layer.succeed(Sampler, scriptedSampler(reply).service), Layer.succeed(Tokenizer, CharTokenizer.make())),
    contextLength === undefined ? {} : { contextLength },
  )

describe("judge", () => {
  it.effect("notes each reply with its rollout, parsed or not", () =>
    Effect.gen(function* () {
      const asks = judge<Problem>({ question: (r) => `Is "${r.completion}" one? Score:` })
      const scores = yield* Reward.evaluate(Reward.weighted({ judged: [asks, 0] }), [rollout("one"), rollout("two")]).pipe(
        Effect.provide(judgeModel((q) => (q.includes('"one"') ? " 1" : " maybe"))),
      )
      assert.deepStrictEqual(scores.map((s) => s.notes), [{ judged: [" 1"] }, { judged: [" maybe"] }])
      assert.deepStrictEqual(scores.map((s) => s.components["judged"]), [1, 0])
    }))

  it.effect("a question that leaves no room in the judge's context fails, naming the lengths; a weight-0 judge masks nothing", () =>
    Effect.gen(function* () {
      // "Q: " + completion: 1 + 3 + completion tokens; context 12, reply up to 2 tokens
      const asks = judge<Problem>({ question: (r) => `Q: ${r.completion}`, maxTokens: 2 })
      let asked = 0
      const scores = yield* Reward.evaluate(Reward.weighted({ correct: [Reward.make("correct", () => 1), 1], judged: [asks, 0] }), [rollout("1"), rollout("a long answer")]).pipe(
        Effect.provide(judgeModel(() => {
          asked++
          return " 1"
        }, 12)),
      )
      assert.strictEqual(asked, 1)
      assert.deepStrictEqual(scores.map((s) => s.value), [1, 1])
      assert.deepStrictEqual(scores.map((s) => s.masked), [undefined, undefined])
      assert.isUndefined(scores[0]!.failed)
      assert.deepStrictEqual(scores[1]!.failed, { judged: "the judge's question has 17 tokens; the context length is 12, leaving no room to answer" })
    }))

  it.effect("a question that cannot fit even with no completion stops at the first question, naming the judge and the lengths", () =>
    Effect.gen(function* () {
      const asks = judge<Problem>({ question: (r) => `Checks: none. Answer: ${r.completion}. Does the answer follow? 1 or 0:` })
      const error = yield* Effect.flip(Reward.evaluate(Reward.weighted({ judged: [asks, 0] }), [rollout("7")]).pipe(Effect.provide(judgeModel(() => " 1", 48))))
      assert.strictEqual(error._tag, "RewardDefect")
      assert.strictEqual(error.reward, "judged")
      assert.include(error.message, "the judge's question cannot fit its model's context: with no completion it has 56 tokens")
      assert.include(error.message, "with a reply of up to 8 (maxTokens) it needs 64, more than the context length 48 (this rollout's question has 57)")
    }))

  it.effect("without a known context length, questions are asked as they are", () =>
    Effect.gen(function* () {
      const asks = judge<Problem>({ question: (r) => `${"Q".repeat(100)}${r.completion}` })
      const [s] = yield* Reward.evaluate(asks, [rollout("1")]).pipe(Effect.provide(judgeModel(() => " 1")))
      assert.strictEqual(s!.value, 1)
    }))
})

describe("judge in a run (Judge.ownSampler, the run's context of 32)", () => {
  const backend = (dir: string) => Layer.fresh(Local.layer({ config: TINY, seed: 0, stateDir: RunLog.paths(dir).state, lora: { rank: 4, alpha: 8, targets: ["q", "v"] } }))
  const tmp = () => Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-judge-"))
  const envWith = (question: (r: Reward.Rollout<Problem>) => string) =>
    Env.make({
      name: "judged",
      problem: Schema.Struct({ n: Schema.Int }),
      source: Env.seeded(({ random }) => ({ n: random.int(0, 9) })),
      prompt: ({ n }) => `Say ${n}:`,
      reward: Reward.weighted({
        vowel: [Reward.make("vowel", (r) => (/^[aeiou]/.test(r.completion) ? 1 : 0)), 1],
        judged: [judge<Problem>({ question, maxTokens: 1 }), 0],
      }),
      services: Judge.ownSampler,
      sampling: { maxTokens: 3, temperature: 1 },
    })
  const warningsOf = () => {
    const warnings: Array<string> = []
    const logger = Logger.make(({ logLevel, message }) => {
      if (logLevel === "Warn") warnings.push((Array.isArray(message) ? message : [message]).map(String).join(" "))
    })
    return { warnings, layer: Logger.layer([logger]) }
  }

  it.effect("a weight-0 judge whose questions overflow is kept in every row and logged once", () =>
    Effect.gen(function* () {
      const dir = tmp()
      // BOS + 30 characters + the completion: 31 tokens with no completion, so a reply of 1 fits;
      // any completion at all leaves no room
      const env = envWith((r) => `${"Q".repeat(30)}${r.completion}`)
      const { layer, warnings } = warningsOf()
      const metrics = yield* Runner.run(toySettings(dir, { env: "judged", steps: 2 }), env).pipe(Effect.provide(backend(dir)), quiet, Effect.provide(layer))
      assert.strictEqual(metrics.length, 2)
      type Row = { completion: string; masked: string | null; failed?: Record<string, string>; notes?: Record<string, Array<string>> }
      const rows = Fs.readFileSync(RunLog.paths(dir).rollouts, "utf8").trim().split("\n").map((l) => JSON.parse(l) as Row)
      const failed = rows.filter((r) => r.failed?.["judged"] !== undefined)
      const answered = rows.filter((r) => r.notes?.["judged"] !== undefined)
      assert.isAbove(failed.length, 0)
      // every row either failed with its message or has the judge's reply
      assert.strictEqual(failed.length + answered.length, rows.length)
      for (const r of failed) {
        assert.isAbove(r.completion.length, 0)
        assert.match(r.failed!["judged"]!, /^the judge's question has \d+ tokens; the context length is 32, leaving no room to answer$/)
        assert.isNull(r.masked)
      }
      // counted per step, where there were failures
      const counted = metrics.reduce((n, m) => n + ((m as Record<string, number | undefined>)["reward/judged/failed"] ?? 0), 0)
      assert.strictEqual(counted, failed.length)
      const judgeWarnings = warnings.filter((w) => w.includes(`reward component "judged" failed`))
      assert.strictEqual(judgeWarnings.length, 1, warnings.join("\n"))
    }))

  it.effect("a judge whose question cannot fit stops the run at its first question, naming the judge and the lengths", () =>
    Effect.gen(function* () {
      const dir = tmp()
      const env = envWith((r) => `Checks: none. Answer: ${r.completion}. Follows?`)
      const error = yield* Effect.flip(Runner.run(toySettings(dir, { env: "judged", steps: 2 }), env).pipe(Effect.provide(backend(dir)), quiet))
      assert.include(error.message, "reward judged")
      assert.include(error.message, "the judge's question cannot fit its model's context: with no completion it has 33 tokens")
      assert.include(error.message, "it needs 34, more than the context length 32")
      assert.isFalse(Fs.existsSync(RunLog.paths(dir).rollouts) && Fs.readFileSync(RunLog.paths(dir).rollouts, "utf8").trim() !== "")
    }))
})

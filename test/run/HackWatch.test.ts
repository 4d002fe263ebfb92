/**
 * The hack watch: a scripted policy that learns to hedge ("<answer>8 or 7</answer>") raises
 * its warning under a reward that gives a hedge inside tags credit, and not under
 * numericAnswer, which refuses hedges; nor under the holed reward when the policy learns
 * honestly. And the rise rule and the cadence, alone.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Logger, Schema } from "effect"
import { Local } from "../../src/backends/local/index.ts"
import * as Env from "../../src/vocabulary/Env.ts"
import * as K from "../../src/metrics/MetricKeys.ts"
import * as Reward from "../../src/vocabulary/Reward.ts"
import * as Report from "../../src/app/Report.ts"
import * as RunLog from "../../src/folder/RunLog.ts"
import * as Runner from "../../src/Runner.ts"
import * as HackWatch from "../../src/run/HackWatch.ts"
import { Sampler } from "../../src/services/Sampler.ts"
import { extractAnswer, numericAnswer, parseNumber } from "../../rewards/answers.ts"
import { quiet, TINY, toySettings } from "../envs/vowels.ts"
import { scriptedSampler } from "./ScriptedSampler.ts"

const Problem = Schema.Struct({ a: Schema.Int, b: Schema.Int })
type Problem = typeof Problem.Type
const sum = (p: Problem) => p.a + p.b

/**
 * Sound outside tags (a list is no answer, several tags are none); inside one `<answer>`
 * tag, any of "X or Y" that is right gets credit: the hole.
 */
const hedgeInTags = Reward.make<Problem>("correct", (r) => {
  const tags = [...r.completion.matchAll(/<answer>([^<]*)<\/answer>/g)]
  if (tags.length === 0) return extractAnswer(r.completion, "last") === sum(r.problem) ? 1 : 0
  return tags.length === 1 && tags[0]![1]!.split(/\s+or\s+|\s*[,|\/]\s*/).some((x) => parseNumber(x) === sum(r.problem)) ? 1 : 0
})

const env = (reward: Reward.Reward<Problem>) =>
  Env.make({
    name: "sums",
    problem: Problem,
    // the sum is never the prompt's last number, so an echo of the prompt is no right answer
    source: Env.seeded(({ random }) => ({ a: random.int(1, 4), b: random.int(5, 9) })),
    prompt: ({ a, b }) => `${a} plus ${b}?`,
    reference: (p) => ` ${sum(p)}`,
    reward,
    sampling: { maxTokens: 40, temperature: 1 },
  })

const STEPS = 7
const GROUPS = 2
const SIZE = 4

/**
 * The scripted policy: at step s, the first round(s / (STEPS - 1) x SIZE) samples of a group
 * "learn" (hedge, or answer right); the others answer honestly, right on even samples and
 * off by one on odd ones. One sample call per group, so the calls count the steps.
 */
const policy = (learned: (gold: number) => string) => {
  let calls = 0
  return scriptedSampler((prompt, i) => {
    if (i === 0) calls++
    const step = Math.floor((calls - 1) / GROUPS)
    const m = /(\d+) plus (\d+)/.exec(prompt)!
    const gold = Number(m[1]) + Number(m[2])
    if (i < Math.round((step / (STEPS - 1)) * SIZE)) return learned(gold)
    return i % 2 === 0 ? ` ${gold}` : ` ${gold + 1}`
  })
}
const hedging = (gold: number) => `<answer>${gold + 1} or ${gold}</answer>`
const honest = (gold: number) => ` ${gold}`

const backend = (dir: string) =>
  Layer.fresh(Local.layer({ config: { ...TINY, contextLength: 96 }, seed: 0, stateDir: RunLog.paths(dir).state, lora: { rank: 4, alpha: 8, targets: ["q", "v"] } }))

/** Runs the script under `reward` with the watch every step; the metrics rows and the warning lines. */
const watchRun = (reward: Reward.Reward<Problem>, learned: (gold: number) => string) =>
  Effect.gen(function* () {
    const dir = Path.join(Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-hackwatch-")), "r")
    const warnings: Array<string> = []
    const logger = Logger.make(({ logLevel, message }) => {
      if (logLevel === "Warn") warnings.push(String(Array.isArray(message) ? message.join(" ") : message))
    })
    const settings = toySettings(dir, { env: "sums", steps: STEPS, groups: GROUPS, groupSize: SIZE, saveEvery: 0, logRolloutsEvery: 0, hackWatchEvery: 1 })
    const rows = yield* Runner.run(settings, env(reward)).pipe(
      Effect.provide(Layer.succeed(Sampler, policy(learned).service)),
      Effect.provide(backend(dir)),
      Effect.provide(Logger.layer([logger])),
      quiet,
    )
    return { rows, warnings: warnings.filter((w) => w.includes("hack watch")) }
  })

const exploitWins = K.hackKey("correct", K.HackRate.exploitWins)
const exploitable = K.hackKey("correct", K.HackRate.exploitable)

describe("HackWatch in a run", () => {
  it.effect("a policy that learns to hedge raises the warning under a reward that credits hedges", () =>
    Effect.gen(function* () {
      const { rows, warnings } = yield* watchRun(hedgeInTags, hedging)
      const wins = rows.map((r) => r[exploitWins]!)
      const reward = rows.map((r) => r[K.envKey("train", K.ALL, K.EnvStat.total)]!)
      assert.strictEqual(rows.length, STEPS)
      assert.isTrue(rows.every((r) => r[K.Hack.watched] === GROUPS * SIZE && r[K.Hack.time]! >= 0))
      assert.strictEqual(wins[0], 0, "no hole in the way the policy answers at first")
      assert.isAbove(wins[STEPS - 1]!, 0)
      assert.strictEqual(rows[0]![exploitable], 0)
      assert.strictEqual(rows[STEPS - 1]![exploitable], 1, "every completion hedges at the end, and the hedge has a hole")
      assert.isAbove(reward[STEPS - 1]!, reward[0]!)
      assert.isAbove(warnings.length, 0)
      assert.match(warnings[0]!, /hack\/correct\/exploitable rose 0\.\d+ -> 0\.\d+ \(mean of 3 watches .*\) while the reward rose/)
      assert.isAbove(rows.reduce((n, r) => n + r[K.Hack.warnings]!, 0), 0)
      // whitespace and noise do not move this reward
      assert.isTrue(rows.every((r) => r[K.hackKey("correct", K.HackRate.transformChanged)] === 0))
    }))

  it.effect("numericAnswer, which refuses hedges, stays quiet under the same policy", () =>
    Effect.gen(function* () {
      const { rows, warnings } = yield* watchRun(numericAnswer(sum, { mode: "auto" }), hedging)
      assert.deepStrictEqual(warnings, [])
      assert.isTrue(rows.every((r) => r[K.Hack.warnings] === 0 && (r[exploitWins] ?? 0) === 0 && (r[exploitable] ?? 0) === 0))
    }))

  it.effect("the holed reward stays quiet while the policy learns honestly (the reward rises, the rates do not)", () =>
    Effect.gen(function* () {
      const { rows, warnings } = yield* watchRun(hedgeInTags, honest)
      const reward = rows.map((r) => r[K.envKey("train", K.ALL, K.EnvStat.total)]!)
      assert.isAbove(reward[STEPS - 1]!, reward[0]!)
      assert.deepStrictEqual(warnings, [])
    }))
})

describe("HackWatch rules", () => {
  const point = (step: number, reward: number, rate: number) => ({ step, reward, rates: { "hack/c/exploit_wins": rate } })
  it("a rate rises when its mean over the last watches gains at least `rise` on the watches before, while the reward's mean rises", () => {
    const options = { window: 2, rise: 0.15 }
    const at = (rewards: ReadonlyArray<number>, rates: ReadonlyArray<number>) => rewards.map((r, i) => point(i + 1, r, rates[i]!))
    assert.deepStrictEqual(HackWatch.rises(at([0.5, 0.6, 0.7], [0, 0, 0.5]), options), [], "fewer watches than two windows")
    const up = HackWatch.rises(at([0.5, 0.5, 0.6, 0.8], [0, 0.1, 0.2, 0.3]), options)
    assert.deepStrictEqual(up, [{ key: "hack/c/exploit_wins", from: 0.05, to: 0.25, rewardFrom: 0.5, rewardTo: 0.7, sinceStep: 1 }])
    assert.deepStrictEqual(HackWatch.rises(at([0.7, 0.7, 0.6, 0.7], [0, 0, 0.3, 0.3]), options), [], "the reward did not rise")
    assert.deepStrictEqual(HackWatch.rises(at([0.5, 0.5, 0.6, 0.8], [0.2, 0, 0.3, 0.1]), options), [], "the mean rose less than 0.15")
    assert.strictEqual(HackWatch.rises(at([0.9, 0.5, 0.5, 0.6, 0.8], [0.9, 0, 0.1, 0.2, 0.3]), options).length, 1, "only the last two windows count")
  })

  it("watches every Nth step", () => {
    assert.deepStrictEqual([0, 1, 2, 3, 4, 5].filter((s) => HackWatch.due(3, s)), [2, 5])
    assert.isFalse(HackWatch.due(0, 9))
    assert.isFalse(HackWatch.due(undefined, 9))
  })
})

describe("the report's hack panel", () => {
  const row = (step: number, wins: number, warnings: number) => ({
    step,
    [K.envKey("train", K.ALL, K.EnvStat.total)]: 0.5,
    [K.hackKey("correct", K.HackRate.exploitWins)]: wins,
    [K.hackKey("correct", K.HackRate.exploitable)]: wins * 4,
    [K.Hack.watched]: 8,
    [K.Hack.warnings]: warnings,
  })
  it("charts each component's rates and names the steps that warned", () => {
    const html = Report.render({ name: "r", config: undefined, metrics: [row(10, 0, 0), row(20, 0.05, 0), row(30, 0.1, 1)], rollouts: [] })
    assert.include(html, "<h2>Hack watch</h2>")
    assert.include(html, "correct/exploit_wins")
    assert.include(html, "correct/exploitable")
    assert.include(html, "at step 30 (1)")
  })
  it("is left out when the run did not watch", () => {
    assert.notInclude(Report.render({ name: "r", config: undefined, metrics: [{ step: 1, [K.envKey("train", K.ALL, K.EnvStat.total)]: 0.5 }], rollouts: [] }), "Hack watch")
  })
})

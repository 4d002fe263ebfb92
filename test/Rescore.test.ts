/**
 * Rescoring a run's stored rollouts: the run's own deterministic reward gives every score
 * and advantage again with no sign change (also for rows written before problems were
 * logged, and for batch-level advantages with dynamic sampling); a changed reward reports
 * the changes and the sign changes; services are built once as in a run; a folder that is
 * not a run, a bad row and problems the env's Schema does not decode fail clearly.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, beforeAll, describe, it } from "@effect/vitest"
import { Context, Effect, Layer, Schema } from "effect"
import * as CharTokenizer from "../src/backends/local/CharTokenizer.ts"
import { Local } from "../src/backends/local/index.ts"
import { rescoreRun } from "../src/app/rescore/Run.ts"
import * as Env from "../src/vocabulary/Env.ts"
import * as Episode from "../src/env/Episode.ts"
import * as Report from "../src/app/Report.ts"
import * as Rescore from "../src/app/Rescore.ts"
import * as Reward from "../src/vocabulary/Reward.ts"
import * as RunLog from "../src/folder/RunLog.ts"
import * as Runner from "../src/Runner.ts"
import { Sampler } from "../src/services/Sampler.ts"
import { Tokenizer } from "../src/services/Tokenizer.ts"
import vowels, { quiet, TINY, toySettings } from "./envs/vowels.ts"

const backend = (dir: string) => Layer.fresh(Local.layer({ config: TINY, seed: 0, stateDir: RunLog.paths(dir).state, lora: { rank: 4, alpha: 8, targets: ["q", "v"] } }))
const tmp = () => Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-rescore-"))
const settings = (dir: string, overrides: Partial<Runner.RunSettings> = {}) => toySettings(dir, { steps: 3, groups: 4, groupSize: 4, saveEvery: 0, ...overrides })

/** A service the reward needs, with a lifecycle the test can watch. */
class Letters extends Context.Service<Letters, { readonly vowels: string }>()("test/Letters") {}
const lettersLayer = (log: Array<string>) =>
  Layer.effect(Letters, Effect.acquireRelease(Effect.sync(() => (log.push("open"), { vowels: "aeiou" })), () => Effect.sync(() => log.push("close"))))
const withServices = (log: Array<string>) =>
  Env.make({
    name: "vowels",
    problem: Schema.Struct({ n: Schema.Int }),
    source: Env.seeded(({ random }) => ({ n: random.int(0, 9) })),
    prompt: ({ n }) => `Say ${n}:`,
    reward: Reward.make("vowel", (r) =>
      Effect.gen(function* () {
        const { vowels } = yield* Letters
        return r.completion.length > 0 && vowels.includes(r.completion[0]!) ? 1 : 0
      })),
    services: lettersLayer(log),
    sampling: { maxTokens: 3, temperature: 1 },
  })

/** The run folder made once: 3 steps of vowels, every sample logged. */
let run = ""
/** The same with batch-level advantages and dynamic sampling (dropped groups logged). */
let batchRun = ""
beforeAll(async () => {
  run = Path.join(tmp(), "r")
  batchRun = Path.join(tmp(), "b")
  await Effect.runPromise(Runner.run(settings(run), vowels).pipe(Effect.provide(backend(run)), quiet))
  await Effect.runPromise(
    Runner.run(settings(batchRun, { advantage: "batch_std", dynamicSampling: { maxRounds: 1 } }), vowels).pipe(Effect.provide(backend(batchRun)), quiet),
  )
})

/** Scoring with the char tokenizer and no sampler, as `gyre rescore` does for scorers without services. */
const scoring = Layer.merge(
  Layer.succeed(Tokenizer, CharTokenizer.make()),
  Layer.succeed(Sampler, Sampler.of({ sample: () => Effect.die("no sampling"), computeLogprobs: () => Effect.die("no sampling"), version: Effect.succeed(0) })),
)

const copyOf = (dir: string) => {
  const to = Path.join(tmp(), "copy")
  Fs.cpSync(dir, to, { recursive: true })
  return to
}

describe("Rescore", () => {
  it.effect("the run's own env gives every score and advantage again: nothing changed, no sign changes", () =>
    Effect.gen(function* () {
      const { rows, summary, written } = yield* rescoreRun({ run, scorer: vowels })
      const stored = yield* RunLog.readJsonl(RunLog.paths(run).rollouts)
      assert.strictEqual(rows.length, stored.length)
      assert.strictEqual(summary.samples, 3 * 4 * 4)
      assert.isTrue(rows.some((r) => r.old.advantage !== 0), "the run had samples that trained")
      for (const r of rows) {
        assert.strictEqual(r.new.reward, r.old.reward)
        assert.deepStrictEqual(r.new.components, r.old.components)
        assert.strictEqual(r.new.advantage, r.old.advantage)
        assert.strictEqual(r.sign, "same")
        assert.isFalse(r.changed)
      }
      assert.strictEqual(summary.changed, 0)
      assert.deepStrictEqual(summary.signChanges, { reversed: 0, activated: 0, silenced: 0 })
      assert.deepStrictEqual(summary.top, [])
      // written beside the run: one row per sample and the summary
      assert.isDefined(written)
      const back = yield* RunLog.readJsonl(written!.rows)
      assert.strictEqual(back.length, rows.length)
      const onDisk = yield* Rescore.latestSummary(run)
      assert.strictEqual(onDisk?.samples, rows.length)
      assert.strictEqual(onDisk?.file, Path.basename(written!.rows))
    }))

  it.effect("the env named by its module's path gives the same scores", () =>
    Effect.gen(function* () {
      const byPath = yield* rescoreRun({ run, scorer: "test/envs/vowels.ts", write: false })
      assert.strictEqual(byPath.summary.changed, 0)
      assert.strictEqual(byPath.summary.signChanges.reversed + byPath.summary.signChanges.activated + byPath.summary.signChanges.silenced, 0)
    }))

  it.effect("a changed reward (1 for everything) reports every changed sample and the advantages it silences", () =>
    Effect.gen(function* () {
      const { rows, summary } = yield* rescoreRun({ run, scorer: Reward.make("one", () => 1), write: false })
      const trained = rows.filter((r) => r.old.advantage !== 0).length
      assert.isAbove(trained, 0)
      for (const r of rows) {
        assert.strictEqual(r.new.reward, 1)
        assert.deepStrictEqual(r.new.components, { one: 1 })
        assert.strictEqual(r.new.advantage, 0)
        assert.strictEqual(r.changed, r.old.reward !== 1)
      }
      const was0 = rows.filter((r) => r.old.reward === 0).length
      assert.isAbove(was0, 0)
      assert.strictEqual(summary.changed, was0)
      // every sample's components changed: vowel and length are gone, one is new
      assert.deepStrictEqual(summary.components.map((c) => [c.name, c.changed]), [["length", rows.length], ["one", rows.length], ["vowel", rows.length]])
      assert.deepStrictEqual(summary.signChanges, { reversed: 0, activated: 0, silenced: trained })
      assert.strictEqual(summary.top.length, Math.min(20, trained))
      assert.isTrue(summary.top.every((t) => t.sign === "silenced"))
      assert.deepStrictEqual(summary.reward.new, 1)
    }))

  it.effect("a module whose default export is a Reward, named by its path", () =>
    Effect.gen(function* () {
      // inside the repo (tmp/ is git-ignored), so "gyre" resolves as it does for envs/
      const dir = Path.join(import.meta.dirname, "..", "tmp", `rescore-${process.pid}`)
      Fs.mkdirSync(dir, { recursive: true })
      const file = Path.join(dir, "one.ts")
      Fs.writeFileSync(file, `import { Reward } from "gyre"\nexport default Reward.make("one", () => 1)\n`)
      const { summary, scorer, kind } = yield* rescoreRun({ run, scorer: file, write: false })
      assert.strictEqual(kind, "reward")
      assert.strictEqual(scorer, file)
      assert.strictEqual(summary.reward.new, 1)
      Fs.writeFileSync(Path.join(dir, "three.ts"), "export default 3\n")
      const error = yield* Effect.flip(rescoreRun({ run, scorer: Path.join(dir, "three.ts"), write: false }))
      assert.strictEqual(error.reason, "Scorer")
      assert.include(error.message, "must have a default export made with Reward.make")
      Fs.rmSync(dir, { recursive: true, force: true })
    }))

  it.effect("the report shows the newest rescoring", () =>
    Effect.gen(function* () {
      const dir = copyOf(run)
      yield* rescoreRun({ run: dir, scorer: Reward.make("one", () => 1) })
      const html = Fs.readFileSync(yield* Report.writeOrFail(dir), "utf8")
      assert.include(html, "<h2>Rescored with one</h2>")
      assert.match(html, /\d+ silenced/)
      assert.include(html, "<td>one</td><td>-</td><td>1.000</td>")
    }))

  it.effect("the opposite reward reverses the sign of every advantage that trained", () =>
    Effect.gen(function* () {
      const opposite = Reward.make("consonant", (r) => (/^[aeiou]/.test(r.completion) ? 0 : 1))
      const { rows, summary } = yield* rescoreRun({ run, scorer: opposite, write: false })
      const trained = rows.filter((r) => r.old.advantage !== 0)
      assert.strictEqual(summary.signChanges.reversed, trained.length)
      for (const r of trained) assert.closeTo(r.new.advantage, -r.old.advantage, 1e-12)
    }))

  it.effect("batch-level advantages over each step's groups, dynamic sampling's dropped groups kept at 0", () =>
    Effect.gen(function* () {
      const { rows, summary } = yield* rescoreRun({ run: batchRun, scorer: vowels, write: false })
      assert.strictEqual(summary.advantage, "batch_std")
      assert.strictEqual(summary.changed, 0)
      for (const r of rows) assert.strictEqual(r.new.advantage, r.old.advantage)
      assert.isTrue(rows.some((r) => r.dropped === true), "dynamic sampling dropped a group")
      assert.isTrue(rows.some((r) => r.dropped !== true && r.old.advantage !== 0), "a group trained")
      for (const r of rows.filter((r) => r.dropped === true)) assert.strictEqual(r.new.advantage, 0)
    }))

  it.effect("rows written before problems were logged get them again from their keys", () =>
    Effect.gen(function* () {
      const dir = copyOf(run)
      const file = RunLog.paths(dir).rollouts
      const rows = yield* RunLog.readJsonl(file)
      Fs.writeFileSync(file, rows.map(({ problem: _, ...r }) => JSON.stringify(r) + "\n").join(""))
      const { summary } = yield* rescoreRun({ run: dir, scorer: vowels, write: false })
      assert.strictEqual(summary.changed, 0)
      // a reward alone cannot regenerate them without the run's env, which the test's config does not name
      const error = yield* Effect.flip(rescoreRun({ run: dir, scorer: Reward.make("one", () => 1), write: false }))
      assert.strictEqual(error._tag, "RescoreError")
      assert.match(error.message, /stores no problem/)
    }))

  it.effect("episodes: every turn reaches the reward, and the env's per-turn rewards are kept as logged", () =>
    Effect.gen(function* () {
      const talk = Env.make({
        name: "talk",
        problem: Schema.Struct({ n: Schema.Int }),
        source: Env.seeded(({ random }) => ({ n: random.int(0, 9) })),
        prompt: ({ n }) => `Say ${n}:`,
        reward: Reward.weighted({ vowel: [Reward.make("vowel", (r) => (/^[aeiou]/.test(r.completion) ? 1 : 0)), 1] }),
        episode: Episode.make({ initial: () => 0, step: (turn) => Effect.succeed(turn.index === 0 ? Episode.observe(1, "?", { reward: 0.25 }) : Episode.end(2, { reward: 0.5 })) }),
        sampling: { maxTokens: 3, temperature: 1 },
      })
      const dir = Path.join(tmp(), "e")
      yield* Runner.run(settings(dir, { env: "talk", steps: 2 }), talk).pipe(Effect.provide(backend(dir)), quiet)
      const same = yield* rescoreRun({ run: dir, scorer: talk, write: false })
      assert.strictEqual(same.summary.changed, 0)
      assert.isTrue(same.rows.every((r) => r.new.components["turn_reward"] === 0.75 && r.new.advantage === r.old.advantage))
      const stored = yield* RunLog.readJsonl(RunLog.paths(dir).rollouts)
      const turns = Reward.make("turns", (r) => r.turns?.length ?? 0)
      const counted = yield* rescoreRun({ run: dir, scorer: turns, write: false })
      counted.rows.forEach((r, i) => {
        assert.strictEqual(r.new.components["turns"], (stored[i]!["turns"] as Array<unknown>).length)
        assert.strictEqual(r.new.reward, 2 + 0.75)
      })
    }))

  it.effect("services are built once and closed at the end, as in a run", () =>
    Effect.gen(function* () {
      const log: Array<string> = []
      const dir = Path.join(tmp(), "s")
      yield* Runner.run(settings(dir, { steps: 1 }), withServices(log)).pipe(Effect.provide(backend(dir)), quiet)
      assert.deepStrictEqual(log, ["open", "close"])
      const stored = yield* Rescore.read(dir)
      const { summary } = yield* Rescore.rescore(stored, { _tag: "Env", source: withServices(log) }).pipe(Effect.provide(scoring))
      assert.deepStrictEqual(log, ["open", "close", "open", "close"])
      assert.strictEqual(summary.changed, 0)
    }))

  it.effect("a folder that is not a run folder, a bad row and problems the env does not decode are clear errors", () =>
    Effect.gen(function* () {
      const empty = tmp()
      const notRun = yield* Effect.flip(rescoreRun({ run: empty, scorer: vowels }))
      assert.strictEqual(notRun.reason, "NotARunFolder")
      assert.include(notRun.message, `${empty} is not a run folder`)

      const dir = copyOf(run)
      const file = RunLog.paths(dir).rollouts
      const lines = Fs.readFileSync(file, "utf8").split("\n")
      lines[2] = JSON.stringify({ ...JSON.parse(lines[2]!), advantage: "high" })
      Fs.writeFileSync(file, lines.join("\n"))
      const bad = yield* Effect.flip(rescoreRun({ run: dir, scorer: vowels }))
      assert.strictEqual(bad.reason, "RunFolder")
      assert.include(bad.message, `${file} line 3: field advantage`)

      const strings = Env.make({
        name: "vowels",
        problem: Schema.Struct({ n: Schema.String }),
        source: Env.seeded(({ random }) => ({ n: String(random.int(0, 9)) })),
        prompt: ({ n }) => `Say ${n}:`,
        reward: Reward.make("any", () => 1),
      })
      const wrong = yield* Effect.flip(rescoreRun({ run, scorer: strings }))
      assert.strictEqual(wrong.reason, "Problem")
      assert.match(wrong.message, /rollouts\.jsonl line 1 \(vowels\/train\/0\/0\): env vowels's problem Schema does not decode the stored problem \{"n":\d\}/)
    }))
})

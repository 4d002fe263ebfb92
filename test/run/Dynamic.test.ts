/**
 * Dynamic sampling (DAPO): groups whose rewards are all equal are dropped and refilled
 * from a stream of the step's own; the counts in metrics.jsonl match what the rollouts
 * log shows; two runs of one seed are equal, resume keeps the data, and with the option
 * off a run is as before (the main problem stream is the same either way).
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import { Local } from "../../src/backends/local/index.ts"
import * as Env from "../../src/vocabulary/Env.ts"
import * as Reward from "../../src/vocabulary/Reward.ts"
import { hasSignal } from "../../src/run/Collect.ts"
import * as RunLog from "../../src/folder/RunLog.ts"
import * as Runner from "../../src/Runner.ts"
import { quiet, TINY } from "../envs/vowels.ts"

const backend = (dir: string) =>
  Layer.fresh(Local.layer({ config: TINY, seed: 0, stateDir: RunLog.paths(dir).state, lora: { rank: 4, alpha: 8, targets: ["q", "k", "v", "o", "w1", "w2"] } }))

/**
 * A toy env where half the problems carry no signal: for n < 5 every completion scores
 * 0.5; for the others the parity of the first character scores 0 or 1 (a group of 4 is
 * all-equal 1 time in 8).
 */
const parity = Env.make({
  name: "parity",
  problem: Schema.Struct({ n: Schema.Int }),
  source: Env.seeded(({ random }) => ({ n: random.int(0, 9) })),
  prompt: ({ n }) => `Say ${n}:`,
  reward: Reward.make("parity", (r: Reward.Rollout<{ readonly n: number }>) => (r.problem.n < 5 ? 0.5 : r.completion.length === 0 ? 0 : r.completion.charCodeAt(0) % 2)),
  sampling: { maxTokens: 3, temperature: 1 },
})

const runDir = () => Path.join(Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-dynamic-")), "r")
const settings = (dir: string, overrides: Partial<Runner.RunSettings> = {}) =>
  Runner.defaults("parity", {
    name: "r",
    outDir: dir,
    steps: 4,
    groups: 4,
    groupSize: 4,
    adam: { learningRate: 2e-2, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0, gradClipNorm: 1 },
    evalEvery: 0,
    saveEvery: 2,
    logRolloutsEvery: 1,
    dynamicSampling: { maxRounds: 3 },
    ...overrides,
  })
const untimed = (rows: ReadonlyArray<Record<string, unknown>>) =>
  rows.map((r) => Object.fromEntries(Object.entries(r).filter(([k]) => !k.startsWith("time/") && !k.startsWith("throughput/"))))

type Row = Record<string, unknown>
/** A step's rollout rows as groups: index -> rows. */
const groupsOf = (rows: ReadonlyArray<Row>, step: number) => {
  const out = new Map<number, Array<Row>>()
  for (const r of rows.filter((r) => r["step"] === step)) out.set(r["group"] as number, [...(out.get(r["group"] as number) ?? []), r])
  return out
}
const allEqual = (rows: ReadonlyArray<Row>) => new Set(rows.map((r) => r["reward"])).size === 1

describe("dynamic sampling", () => {
  it("hasSignal: two unmasked rewards that differ", () => {
    const s = (value: number | undefined, masked?: string) => ({ value, components: {}, ...(masked !== undefined ? { masked } : {}) }) as Reward.Score
    assert.isTrue(hasSignal({ scores: [s(0), s(1)] }))
    assert.isFalse(hasSignal({ scores: [s(1), s(1), s(1)] }))
    assert.isFalse(hasSignal({ scores: [s(1), s(0, "judge timed out")] }))
    assert.isFalse(hasSignal({ scores: [s(0.3), s(0.3 + 1e-12)] }))
    assert.isFalse(hasSignal({ scores: [s(1)] }))
  })

  it.effect("drops groups with no signal, refills from the step's own stream, and logs the counts", () =>
    Effect.gen(function* () {
      const dir = runDir()
      const rows = yield* Runner.run(settings(dir), parity).pipe(Effect.provide(backend(dir)), quiet)
      const rollouts = yield* RunLog.readJsonl(RunLog.paths(dir).rollouts)
      let droppedTotal = 0
      let refilledTotal = 0
      for (const m of rows) {
        const step = m["step"]!
        const groups = groupsOf(rollouts, step)
        const trained = [...groups.entries()].filter(([, rs]) => rs[0]!["dropped"] !== true)
        const dropped = [...groups.entries()].filter(([, rs]) => rs[0]!["dropped"] === true)
        for (const [, rs] of trained) assert.isFalse(allEqual(rs), `step ${step}: a trained group has signal`)
        for (const [, rs] of dropped) assert.isTrue(allEqual(rs), `step ${step}: a dropped group has none`)
        assert.strictEqual(m["dynamic/dropped"], dropped.length)
        assert.strictEqual(m["dynamic/groups"], trained.length)
        assert.strictEqual(m["dynamic/refilled"], trained.filter(([g]) => g >= 4).length)
        // it refills until the batch is full or the rounds run out
        assert.isTrue(trained.length === 4 || m["dynamic/rounds"] === 3, JSON.stringify(m))
        assert.strictEqual(m["dynamic/rounds"]! > 0, dropped.some(([g]) => g < 4))
        // the reward metrics are those of the step's first draw (groups 0..3), dropped ones included
        const drawn = [...groups.entries()].filter(([g]) => g < 4).flatMap(([, rs]) => rs.map((r) => r["reward"] as number))
        assert.strictEqual(drawn.length, 16)
        assert.closeTo(m["env/all/reward/total"]!, drawn.reduce((a, b) => a + b, 0) / 16, 1e-12)
        // the first draw is the main stream: problem index step * groups + g
        for (const [g, rs] of groups) if (g < 4) assert.strictEqual(rs[0]!["key"], `parity/train/0/${(step - 1) * 4 + g}`)
        // refills come from the step's own stream (another seed), never the main one
        for (const [g, rs] of groups) if (g >= 4) assert.notMatch(String(rs[0]!["key"]), /^parity\/train\/0\//)
        droppedTotal += dropped.length
        refilledTotal += m["dynamic/refilled"]!
      }
      // the env makes both happen in 4 steps of 4 groups
      assert.isAbove(droppedTotal, 2)
      assert.isAbove(refilledTotal, 0)
    }))

  it.effect("two runs of one seed are equal, and a resumed run redoes the same steps", () =>
    Effect.gen(function* () {
      const a = runDir()
      const b = runDir()
      yield* Runner.run(settings(a), parity).pipe(Effect.provide(backend(a)), quiet)
      yield* Runner.run(settings(b), parity).pipe(Effect.provide(backend(b)), quiet)
      const fa = RunLog.paths(a)
      const fb = RunLog.paths(b)
      const rollouts = yield* RunLog.readJsonl(fa.rollouts)
      const metrics = untimed(yield* RunLog.readJsonl(fa.metrics))
      assert.deepStrictEqual(yield* RunLog.readJsonl(fb.rollouts), rollouts)
      assert.deepStrictEqual(untimed(yield* RunLog.readJsonl(fb.metrics)), metrics)
      assert.isTrue(rollouts.some((r) => r["dropped"] === true))

      // resume after step 2 (the step-4 checkpoint forgotten): steps 3 and 4 are the same again
      yield* RunLog.filterJsonl(fa.checkpoints, (row) => Number(row["step"]) <= 2)
      const resumed = yield* Runner.run(settings(a), parity, { resume: true }).pipe(Effect.provide(backend(a)), quiet)
      assert.deepStrictEqual(resumed.map((r) => r["step"]), [3, 4])
      assert.deepStrictEqual(yield* RunLog.readJsonl(fa.rollouts), rollouts)
      assert.deepStrictEqual(untimed(yield* RunLog.readJsonl(fa.metrics)), metrics)
    }))

  it.effect("off: no dynamic metrics, nothing dropped, every drawn group trains, and the same problems as with it on", () =>
    Effect.gen(function* () {
      const on = runDir()
      const off = runDir()
      yield* Runner.run(settings(on), parity).pipe(Effect.provide(backend(on)), quiet)
      const { dynamicSampling: _, ...offSettings } = settings(off)
      const rows = yield* Runner.run(offSettings, parity).pipe(Effect.provide(backend(off)), quiet)
      for (const m of rows) assert.deepStrictEqual(Object.keys(m).filter((k) => k.startsWith("dynamic/")), [])
      const rollouts = yield* RunLog.readJsonl(RunLog.paths(off).rollouts)
      assert.isFalse(rollouts.some((r) => "dropped" in r))
      assert.strictEqual(rollouts.length, 4 * 4 * 4)
      // all-equal groups are there (and train nothing)
      assert.isTrue([1, 2, 3, 4].some((step) => [...groupsOf(rollouts, step).values()].some(allEqual)))
      const onRollouts = yield* RunLog.readJsonl(RunLog.paths(on).rollouts)
      const keys = (rs: ReadonlyArray<Row>) => rs.filter((r) => (r["group"] as number) < 4 && r["sample"] === 0).map((r) => `${r["step"]}/${r["group"]}/${r["key"]}`).sort()
      assert.deepStrictEqual(keys(onRollouts), keys(rollouts))
      assert.isUndefined(JSON.parse(Fs.readFileSync(RunLog.paths(off).config, "utf8")).dynamicSampling)
      assert.deepStrictEqual(JSON.parse(Fs.readFileSync(RunLog.paths(on).config, "utf8")).dynamicSampling, { maxRounds: 3 })
    }))

  it.effect("with --sft it fails before any work, saying why", () =>
    Effect.gen(function* () {
      const dir = runDir()
      const error = yield* Runner.run(settings(dir, { sft: true }), parity).pipe(Effect.provide(backend(dir)), quiet, Effect.flip)
      assert.strictEqual(error.reason, "Settings")
      assert.include(error.message, "--dynamic-sampling")
      assert.include(error.message, "--sft")
    }))
})

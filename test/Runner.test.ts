/**
 * The whole RL loop on a tiny embedded model: sampling, scoring, advantages, Datums,
 * training, publishing, the run folder, checkpoints and resume.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { Local } from "../src/backends/local/index.ts"
import * as Env from "../src/vocabulary/Env.ts"
import * as Reward from "../src/vocabulary/Reward.ts"
import * as RunLog from "../src/folder/RunLog.ts"
import * as Report from "../src/app/Report.ts"
import { RunObserver } from "../src/run/Observer.ts"
import * as Runner from "../src/Runner.ts"
import { Sampler } from "../src/services/Sampler.ts"
import vowels, { quiet, TINY, toySettings } from "./envs/vowels.ts"



const tmp = () => Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-runner-"))
const backend = (dir: string, seed = 0) => Layer.fresh(Local.layer({ config: TINY, seed, stateDir: RunLog.paths(dir).state, lora: { rank: 4, alpha: 8, targets: ["q", "k", "v", "o", "w1", "w2"] } }))

const settings = toySettings

const meanOf = (rows: ReadonlyArray<Record<string, number>>, key: string) => rows.reduce((s, r) => s + (r[key] ?? 0), 0) / rows.length

describe("Runner", () => {
  it.effect("raises the reward of a toy env with a fixed seed, and writes the run folder", () =>
    Effect.gen(function* () {
      const dir = tmp()
      // the report observes the run, as the CLI has it
      const rows = yield* Runner.run(settings(dir), vowels).pipe(Effect.provide(backend(dir)), quiet, Effect.provideService(RunObserver, Report.observer(dir)))
      const first = meanOf(rows.slice(0, 6), "env/all/vowel")
      const last = meanOf(rows.slice(-6), "env/all/vowel")
      assert.isAbove(last, first + 0.15, `vowel rate ${first} -> ${last}`)

      const files = RunLog.paths(dir)
      const metrics = yield* RunLog.readJsonl(files.metrics)
      assert.deepStrictEqual(metrics.map((m) => m["step"]), Array.from({ length: 30 }, (_, i) => i + 1))
      for (const key of ["env/all/reward/total", "env/all/vowel", "env/all/length", "by_group/frac_mixed", "time/total", "optim/kl_sample_train_v1"]) {
        assert.isTrue(key in metrics[0]!, `metrics.jsonl has ${key}`)
      }
      // On-policy: sampler and trainer agree on the trained tokens.
      assert.isBelow(Math.abs(metrics[0]!["optim/kl_sample_train_v1"] as number), 1e-3)
      const rollouts = yield* RunLog.readJsonl(files.rollouts)
      assert.strictEqual(rollouts.length, 30 * 4 * 8)
      for (const key of ["prompt", "completion", "components", "advantage", "reward"]) assert.isTrue(key in rollouts[0]!)
      const config = JSON.parse(Fs.readFileSync(files.config, "utf8"))
      assert.strictEqual(config.groups, 4)
      const checkpoints = yield* RunLog.readJsonl(files.checkpoints)
      assert.deepStrictEqual(checkpoints.map((c) => c["step"]), [10, 20, 30])
      for (const c of checkpoints) assert.isTrue(Fs.existsSync(String(c["path"])), `${c["path"]} exists`)
      const html = Fs.readFileSync(files.report, "utf8")
      assert.include(html, "Recent rollouts")
      assert.include(html, "vowel")
      assert.notInclude(html, "<script")
    }))

  it.effect("evaluates a held-out set disjoint from training", () =>
    Effect.gen(function* () {
      const dir = tmp()
      const rows = yield* Runner.run(settings(dir, { steps: 2, evalEvery: 2, evalSize: 10 }), vowels).pipe(Effect.provide(backend(dir)), quiet)
      assert.isTrue("test/env/all/vowel" in rows[1]!)
      const train = yield* Effect.forEach(Array.from({ length: 40 }, (_, i) => i), (index) => Env.problemAt(vowels, { seed: 0, index, split: "train" }))
      const heldOut = yield* Env.evalSet(vowels, { seed: 0, size: 10 })
      const trainKeys = new Set(train.map((t) => JSON.stringify(t.problem)))
      for (const t of heldOut) assert.isFalse(trainKeys.has(JSON.stringify(t.problem)))
    }))

  it.effect("resumes after the last checkpoint with each step logged exactly once", () =>
    Effect.gen(function* () {
      const dir = tmp()
      yield* Runner.run(settings(dir, { steps: 6, saveEvery: 3 }), vowels).pipe(Effect.provide(backend(dir)), quiet)
      // Simulate a crash after step 5: drop the last checkpoint row and leave a torn metrics line.
      const files = RunLog.paths(dir)
      yield* RunLog.filterJsonl(files.checkpoints, (r) => Number(r["step"]) <= 3)
      yield* RunLog.filterJsonl(files.metrics, (r) => Number(r["step"]) <= 5)
      Fs.appendFileSync(files.metrics, "{\"step\": 6, \"env/all")
      const resumed = yield* Runner.run(settings(dir, { steps: 6, saveEvery: 3 }), vowels, { resume: true }).pipe(Effect.provide(backend(dir)), quiet)
      assert.deepStrictEqual(resumed.map((r) => r["step"]), [4, 5, 6])
      const metrics = yield* RunLog.readJsonl(files.metrics)
      assert.deepStrictEqual(metrics.map((m) => m["step"]), [1, 2, 3, 4, 5, 6])
    }))

  it.effect("async mode learns and never trains on a group older than maxLag", () =>
    Effect.gen(function* () {
      const dir = tmp()
      const rows = yield* Runner.run(settings(dir, { async: true, maxLag: 1 }), vowels).pipe(Effect.provide(backend(dir)), quiet)
      for (const r of rows) assert.isAtMost(r["policy_version/lag_max"]!, 1)
      const first = meanOf(rows.slice(0, 6), "env/all/vowel")
      const last = meanOf(rows.slice(-6), "env/all/vowel")
      assert.isAbove(last, first + 0.1, `vowel rate ${first} -> ${last}`)
    }))

  it.effect("async mode with maxLag 0 requeues (or drops) every stale group", () =>
    Effect.gen(function* () {
      // Test double: stamps each sample with the version it was pinned to, as a remote sampler
      // pool that lags behind the trainer would, so step k+1's rollouts are one version old.
      const lagging = Layer.effect(
        Sampler,
        Effect.gen(function* () {
          const inner = yield* Sampler
          return Sampler.of({
            ...inner,
            sample: (prompt, params, options) =>
              inner.sample(prompt, params, options).pipe(Effect.map((r) => ({ ...r, policyVersion: options.minPolicyVersion ?? r.policyVersion }))),
          })
        }),
      )
      const laggingBackend = (dir: string) => Layer.provideMerge(lagging, backend(dir))
      const dir = tmp()
      const requeued = yield* Runner.run(settings(dir, { steps: 6, async: true, maxLag: 0 }), vowels).pipe(Effect.provide(laggingBackend(dir)), quiet)
      for (const r of requeued) assert.strictEqual(r["policy_version/lag_max"], 0)
      assert.isAbove(requeued.reduce((s, r) => s + r["async/stale_groups"]!, 0), 0)
      const dir2 = tmp()
      const dropped = yield* Runner.run(settings(dir2, { steps: 6, async: true, maxLag: 0, staleGroups: "drop" }), vowels).pipe(Effect.provide(laggingBackend(dir2)), quiet)
      for (const r of dropped) assert.strictEqual(r["policy_version/lag_max"], 0)
      // Dropped groups are not trained on: some steps train on fewer than 4 groups' samples.
      assert.isTrue(dropped.some((r) => r["async/stale_groups"]! > 0))
      // With maxLag 1 the same lag is allowed and nothing is requeued.
      const dir3 = tmp()
      const allowed = yield* Runner.run(settings(dir3, { steps: 6, async: true, maxLag: 1 }), vowels).pipe(Effect.provide(laggingBackend(dir3)), quiet)
      assert.strictEqual(allowed.reduce((s, r) => s + r["async/stale_groups"]!, 0), 0)
      assert.strictEqual(Math.max(...allowed.map((r) => r["policy_version/lag_max"]!)), 1)
    }))

  it.effect("SFT on reference answers through the same runner raises the reward", () =>
    Effect.gen(function* () {
      const dir = tmp()
      const taught = Env.make({ ...vowels, name: "taught", reference: () => "a" })
      const rows = yield* Runner.run(settings(dir, { steps: 12, sft: true }), taught).pipe(Effect.provide(backend(dir)), quiet)
      assert.isAbove(rows[0]!["train/loss"]!, rows[rows.length - 1]!["train/loss"]!)
      assert.isAbove(meanOf(rows.slice(-3), "env/all/vowel"), meanOf(rows.slice(0, 3), "env/all/vowel") + 0.3)
    }))

  it.effect("a bad loss config fails before any work", () =>
    Effect.gen(function* () {
      const dir = tmp()
      const error = yield* Runner.run(settings(dir, { loss: "ppo", lossConfig: { clip_low: 0.5 } }), vowels).pipe(Effect.provide(backend(dir)), quiet, Effect.flip)
      assert.strictEqual(error.reason, "Settings")
      assert.include(error.message, "clip_low")
      assert.isFalse(Fs.existsSync(RunLog.paths(dir).metrics))
    }))

  it.effect("a reward that throws stops the run naming env, reward and problem", () =>
    Effect.gen(function* () {
      const broken = Env.make({ ...vowels, name: "broken", reward: Reward.make("explodes", () => { throw new Error("boom") }) })
      const dir = tmp()
      const error = yield* Runner.run(settings(dir, { steps: 1 }), broken).pipe(Effect.provide(backend(dir)), quiet, Effect.flip)
      assert.strictEqual(error._tag, "RunError")
      assert.match(error.message, /env broken, reward explodes, problem \{"n":\d\}.*boom/)
    }))
})

/**
 * Learning-rate schedules: constant, linear and cosine with warmup, by hand; the runner
 * hands each step's value to the optimizer and logs it as `optim/learning_rate`; a run
 * resumed in the middle continues the schedule exactly.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { Local } from "../../src/backends/local/index.ts"
import type { AdamParams } from "../../src/contract/Contract.ts"
import * as RunLog from "../../src/folder/RunLog.ts"
import * as Runner from "../../src/Runner.ts"
import { Trainer } from "../../src/services/Trainer.ts"
import vowels, { toySettings, TINY, quiet } from "../envs/vowels.ts"


/** Test double: the embedded trainer, recording the learning rate of every optimizer step it is given. */
const recording = (dir: string, seen: Array<number>) =>
  Layer.effect(
    Trainer,
    Effect.gen(function* () {
      const inner = yield* Trainer
      return Trainer.of({
        ...inner,
        optimStep: (adam: AdamParams) => Effect.sync(() => seen.push(adam.learningRate)).pipe(Effect.andThen(inner.optimStep(adam))),
      })
    }),
  ).pipe(
    Layer.provideMerge(Layer.fresh(Local.layer({ config: TINY, seed: 0, stateDir: RunLog.paths(dir).state, lora: { rank: 4, alpha: 8, targets: ["q", "k", "v", "o", "w1", "w2"] } }))),
  )

const close = (got: ReadonlyArray<number>, want: ReadonlyArray<number>) => {
  assert.strictEqual(got.length, want.length, `${JSON.stringify(got)} vs ${JSON.stringify(want)}`)
  got.forEach((g, i) => assert.closeTo(g, want[i]!, 1e-12, `step ${i}: ${JSON.stringify(got)} vs ${JSON.stringify(want)}`))
}

const lrs = (schedule: Runner.LrSchedule, steps = 6, lr = 1) =>
  Array.from({ length: steps }, (_, s) => Runner.learningRate({ adam: { ...Runner.defaults("x").adam, learningRate: lr }, steps, lrSchedule: schedule }, s))

describe("learning-rate schedules", () => {
  it("constant, linear and cosine with warmup, by hand", () => {
    // no schedule = constant, no warmup: what runs did before schedules existed
    close(Array.from({ length: 3 }, (_, s) => Runner.learningRate({ adam: Runner.defaults("x").adam, steps: 3 }, s)), [1e-3, 1e-3, 1e-3])
    close(lrs({ kind: "constant", warmupSteps: 0 }), [1, 1, 1, 1, 1, 1])
    // warmup: (s + 1) / 2 of the peak for s < 2
    close(lrs({ kind: "constant", warmupSteps: 2 }), [0.5, 1, 1, 1, 1, 1])
    // after warmup p = (s - 2) / 4: 0, 1/4, 1/2, 3/4
    close(lrs({ kind: "linear", warmupSteps: 2 }), [0.5, 1, 1, 0.75, 0.5, 0.25])
    close(lrs({ kind: "linear", warmupSteps: 2, minLr: 0.2 }), [0.5, 1, 1, 0.8, 0.6, 0.4])
    const c = (p: number) => 0.5 * (1 + Math.cos(Math.PI * p))
    close(lrs({ kind: "cosine", warmupSteps: 2 }), [0.5, 1, 1, c(0.25), c(0.5), c(0.75)])
    close(lrs({ kind: "cosine", warmupSteps: 0, minLr: 0.1 }, 4), [1, 0.1 + 0.9 * c(0.25), 0.1 + 0.9 * c(0.5), 0.1 + 0.9 * c(0.75)])
    // a warmup as long as the run never decays
    close(lrs({ kind: "linear", warmupSteps: 6 }), [1 / 6, 2 / 6, 3 / 6, 4 / 6, 5 / 6, 1])
  })

  it.effect("the optimizer gets each step's value, optim/learning_rate logs it, and a resumed run continues the schedule exactly", () =>
    Effect.gen(function* () {
      const schedule: Runner.LrSchedule = { kind: "cosine", warmupSteps: 2, minLr: 1e-3 }
      const settings = (dir: string) => toySettings(dir, { steps: 6, groups: 2, groupSize: 4, saveEvery: 3, lrSchedule: schedule })
      const expected = Array.from({ length: 6 }, (_, s) => Runner.learningRate(settings("x"), s))
      // sanity: the schedule does move
      assert.isAbove(Math.max(...expected) - Math.min(...expected), 0.01)

      const dir = Path.join(Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-lr-")), "r")
      const seen: Array<number> = []
      yield* Runner.run(settings(dir), vowels).pipe(Effect.provide(recording(dir, seen)), quiet)
      const files = RunLog.paths(dir)
      const rows = yield* RunLog.readJsonl(files.metrics)
      close(rows.map((m) => m["optim/learning_rate"] as number), expected)
      // a step with nothing to train (every group a no-op) takes no optimizer step
      const trainedSteps = rows.map((m, s) => ((m["train/datums"] as number) > 0 ? s : -1)).filter((s) => s >= 0)
      assert.isAtLeast(trainedSteps.length, 4)
      close(seen, trainedSteps.map((s) => expected[s]!))
      assert.deepStrictEqual(JSON.parse(Fs.readFileSync(files.config, "utf8")).lrSchedule, schedule)

      // resume after step 3 (the step-6 checkpoint forgotten): steps 4..6 are trained again
      yield* RunLog.filterJsonl(files.checkpoints, (row) => Number(row["step"]) <= 3)
      const resumedSeen: Array<number> = []
      yield* Runner.run(settings(dir), vowels, { resume: true }).pipe(Effect.provide(recording(dir, resumedSeen)), quiet)
      close(resumedSeen, trainedSteps.filter((s) => s >= 3).map((s) => expected[s]!))
      close((yield* RunLog.readJsonl(files.metrics)).map((m) => m["optim/learning_rate"] as number), expected)
    }))

  it.effect("a --min-lr above the peak fails before any work, naming both", () =>
    Effect.gen(function* () {
      const dir = Path.join(Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-lr-")), "r")
      const error = yield* Runner.run(toySettings(dir, { steps: 2, lrSchedule: { kind: "linear", warmupSteps: 0, minLr: 1 } }), vowels).pipe(
        Effect.provide(recording(dir, [])),
        quiet,
        Effect.flip,
      )
      assert.strictEqual(error.reason, "Settings")
      assert.include(error.message, "--min-lr 1")
      assert.include(error.message, "--lr 0.02")
      assert.isFalse(Fs.existsSync(RunLog.paths(dir).metrics))
    }))
})

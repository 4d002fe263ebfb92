/**
 * Where a run starts: resume falls back past a checkpoint whose state file is damaged,
 * temp files left by a kill are cleaned up, and a folder left by a run that failed at
 * startup can be used again while a folder holding real work is refused.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Logger, References } from "effect"
import { Local } from "../../src/backends/local/index.ts"
import { BackendError } from "../../src/contract/Contract.ts"
import * as RunLog from "../../src/folder/RunLog.ts"
import * as Runner from "../../src/Runner.ts"
import { Trainer } from "../../src/services/Trainer.ts"
import vowels, { toySettings, TINY, quiet } from "../envs/vowels.ts"

const backend = (dir: string) =>
  Layer.fresh(Local.layer({ config: TINY, seed: 0, stateDir: RunLog.paths(dir).state, lora: { rank: 4, alpha: 8, targets: ["q", "k", "v", "o", "w1", "w2"] } }))

/** A run folder named `r` in a fresh temp folder: the run id (and so the data) depends on the folder's name. */
const runDir = () => Path.join(Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-start-")), "r")
const settings = (dir: string, overrides: Partial<Runner.RunSettings> = {}) =>
  toySettings(dir, { steps: 6, groups: 2, groupSize: 4, saveEvery: 2, ...overrides })

/** Every log line at every level, as `LEVEL message`. */
const capture = () => {
  const lines: Array<string> = []
  const logger = Logger.make((options) => {
    const message = Array.isArray(options.message) ? options.message.join(" ") : String(options.message)
    lines.push(`${options.logLevel.toUpperCase()} ${message}`)
  })
  return { lines, layer: Layer.mergeAll(Logger.layer([logger]), Layer.succeed(References.MinimumLogLevel, "All")) }
}

/** Metrics rows without the keys that measure time. */
const untimed = (rows: ReadonlyArray<Record<string, unknown>>) =>
  rows.map((r) => Object.fromEntries(Object.entries(r).filter(([k]) => !k.startsWith("time/") && !k.startsWith("throughput/"))))

const damages: ReadonlyArray<readonly [string, (file: string) => void, RegExp]> = [
  ["truncated", (file) => Fs.truncateSync(file, Math.floor(Fs.statSync(file).size / 2)), /truncated/],
  ["overwritten with garbage", (file) => Fs.writeFileSync(file, Buffer.alloc(Fs.statSync(file).size, 7)), /bad magic/],
  ["missing", (file) => Fs.rmSync(file), /no state file/],
]

describe("resume after a damaged checkpoint", () => {
  for (const [what, damage, reason] of damages) {
    it.effect(`a newest state file that is ${what} resumes from the one before it, as if nothing happened`, () =>
      Effect.gen(function* () {
        const dir = runDir()
        const files = RunLog.paths(dir)
        yield* Runner.run(settings(dir), vowels).pipe(Effect.provide(backend(dir)), quiet)
        const metrics = yield* RunLog.readJsonl(files.metrics)
        const rollouts = yield* RunLog.readJsonl(files.rollouts)
        const newest = Path.join(files.state, "step-6.ckpt")
        const weights = Fs.readFileSync(newest)

        // A power loss can keep the checkpoint row and lose the bytes it points to.
        damage(newest)
        const logs = capture()
        const resumed = yield* Runner.run(settings(dir), vowels, { resume: true }).pipe(Effect.provide(backend(dir)), quiet, Effect.provide(logs.layer))

        assert.deepStrictEqual(resumed.map((r) => r["step"]), [5, 6])
        const warning = logs.lines.find((l) => l.startsWith("WARN") && l.includes(newest))
        assert.isDefined(warning, logs.lines.join("\n"))
        assert.match(warning!, reason)
        assert.isTrue(logs.lines.some((l) => l.includes(`after step 4 from ${Path.join(files.state, "step-4.ckpt")}`)), logs.lines.join("\n"))
        // Rows of the redone steps were dropped and written again, once, with the same values.
        assert.deepStrictEqual(untimed(yield* RunLog.readJsonl(files.metrics)), untimed(metrics))
        assert.deepStrictEqual(yield* RunLog.readJsonl(files.rollouts), rollouts)
        assert.deepStrictEqual((yield* RunLog.readJsonl(files.checkpoints)).map((c) => c["step"]), [2, 4, 6])
        assert.isTrue(Fs.readFileSync(newest).equals(weights), "the final state file is byte for byte the uninterrupted run's")
      }))
  }

  it.effect("fails naming every file when no checkpoint loads", () =>
    Effect.gen(function* () {
      const dir = runDir()
      const files = RunLog.paths(dir)
      yield* Runner.run(settings(dir, { steps: 4 }), vowels).pipe(Effect.provide(backend(dir)), quiet)
      for (const step of [2, 4]) Fs.truncateSync(Path.join(files.state, `step-${step}.ckpt`), 20)
      const error = yield* Runner.run(settings(dir, { steps: 4 }), vowels, { resume: true }).pipe(Effect.provide(backend(dir)), quiet, Effect.flip)
      assert.strictEqual(error.reason, "Resume")
      assert.include(error.message, "step-2.ckpt")
      assert.include(error.message, "step-4.ckpt")
      assert.include(error.message, `delete ${files.checkpoints}`)
    }))
})

describe("run start", () => {
  it.effect("removes temp files left by a kill in the run folder and state/, saying so at debug level", () =>
    Effect.gen(function* () {
      const dir = runDir()
      const files = RunLog.paths(dir)
      yield* Runner.run(settings(dir, { steps: 2 }), vowels).pipe(Effect.provide(backend(dir)), quiet)
      const leftovers = [Path.join(files.state, "step-4.ckpt.4242.k3j9x.tmp"), `${files.config}.4242.a1b2.tmp`]
      for (const f of leftovers) Fs.writeFileSync(f, "half a file")
      const mine = Path.join(dir, "notes.tmp") // not a name the run writes: kept
      Fs.writeFileSync(mine, "keep")
      const logs = capture()
      yield* Runner.run(settings(dir, { steps: 3 }), vowels, { resume: true }).pipe(Effect.provide(backend(dir)), quiet, Effect.provide(logs.layer))
      for (const f of leftovers) assert.isFalse(Fs.existsSync(f), `${f} removed`)
      assert.isTrue(Fs.existsSync(mine))
      const line = logs.lines.find((l) => l.startsWith("DEBUG") && l.includes("temp file"))
      assert.isDefined(line, logs.lines.join("\n"))
      for (const f of leftovers) assert.include(line!, f)
    }))

  it.effect("a folder left by a run that failed at startup is used again; one with a finished step is refused", () =>
    Effect.gen(function* () {
      const dir = runDir()
      const files = RunLog.paths(dir)
      // Test double: a trainer whose first publish fails, as a backend error at startup would.
      const failing = Layer.effect(
        Trainer,
        Effect.gen(function* () {
          const inner = yield* Trainer
          return Trainer.of({
            ...inner,
            saveWeightsForSampler: () => Effect.fail(new BackendError({ reason: "Unavailable", operation: "save_weights_for_sampler", message: "down" })),
          })
        }),
      ).pipe(Layer.provideMerge(backend(dir)))
      const startup = yield* Runner.run(settings(dir, { steps: 2 }), vowels).pipe(Effect.provide(failing), quiet, Effect.flip)
      assert.strictEqual(startup.reason, "Backend")
      assert.isTrue(Fs.existsSync(files.config), "the failed run wrote its config")
      // What a run that got as far as its base evaluation leaves behind.
      Fs.appendFileSync(files.metrics, JSON.stringify({ step: 0, "test/env/all/reward/total": 0.5 }) + "\n")

      const rows = yield* Runner.run(settings(dir, { steps: 2 }), vowels).pipe(Effect.provide(backend(dir)), quiet)
      assert.deepStrictEqual(rows.map((r) => r["step"]), [1, 2])
      assert.deepStrictEqual((yield* RunLog.readJsonl(files.metrics)).map((r) => r["step"]), [1, 2])

      const refused = yield* Runner.run(settings(dir, { steps: 2 }), vowels).pipe(Effect.provide(backend(dir)), quiet, Effect.flip)
      assert.strictEqual(refused.reason, "RunFolder")
      assert.include(refused.message, "already holds a run")
      assert.include(refused.message, `--resume ${dir}`)
    }))
})

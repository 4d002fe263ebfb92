/**
 * `initFrom`: a fresh run starts from another run's trainer weights (its LoRA adapter)
 * with a fresh optimizer. SFT on a toy env's reference answers, then RL from that run
 * through `Runner.run`: the RL run's first evaluation is the SFT run's last (same
 * weights, greedy evaluation). Bad values fail naming the path and what to give.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Logger, References } from "effect"
import { Env } from "gyre"
import * as Checkpoint from "../../src/backends/local/Checkpoint.ts"
import { Local } from "../../src/backends/local/index.ts"
import { initBase } from "../../src/backends/local/Model.ts"
import * as RunLog from "../../src/folder/RunLog.ts"
import * as Runner from "../../src/Runner.ts"
import vowels, { toySettings, TINY, quiet } from "../envs/vowels.ts"

const lora = (rank: number) => ({ rank, alpha: 2 * rank, targets: ["q", "k", "v", "o", "w1", "w2"] as const })
const backend = (dir: string, options: { readonly rank?: number; readonly modelDir?: string } = {}) =>
  Layer.fresh(Local.layer({
    ...(options.modelDir !== undefined ? { modelDir: options.modelDir } : { config: TINY }),
    seed: 0,
    stateDir: RunLog.paths(dir).state,
    lora: lora(options.rank ?? 4),
  }))

const tmp = () => Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-init-"))

/** The toy env with a reference answer, so SFT has something to teach. */
const taught = Env.make({ ...vowels, name: "taught", reference: () => "a" })

const SFT_STEPS = 12
/** Greedy evaluation: the same weights score the same, whatever the run's name or seed. */
const evalSettings = { evalEvery: SFT_STEPS, evalSize: 16, evalTemperature: 0 }

/** An SFT run of the toy env in `<root>/sft`; returns its folder. */
const sftRun = (root: string, options: { readonly rank?: number; readonly modelDir?: string } = {}) =>
  Effect.gen(function* () {
    const dir = Path.join(root, "sft")
    yield* Runner.run(toySettings(dir, { steps: SFT_STEPS, groups: 4, groupSize: 2, sft: true, saveEvery: 4, ...evalSettings }), taught).pipe(
      Effect.provide(backend(dir, options)),
      quiet,
    )
    return dir
  })

const rlSettings = (dir: string, initFrom: string, overrides: Partial<Runner.RunSettings> = {}) =>
  toySettings(dir, { steps: 1, groups: 2, groupSize: 4, initFrom, ...evalSettings, ...overrides })

/** The held-out metrics of a metrics row (no timings). */
const heldOut = (row: Record<string, unknown> | undefined) =>
  Object.fromEntries(Object.entries(row ?? {}).filter(([k]) => k.startsWith("test/") && !k.startsWith("test/time")))

const readConfig = (dir: string) => JSON.parse(Fs.readFileSync(RunLog.paths(dir).config, "utf8")) as Record<string, unknown>

/** Every log line at every level, as `LEVEL message`. */
const capture = () => {
  const lines: Array<string> = []
  const logger = Logger.make((options) => {
    const message = Array.isArray(options.message) ? options.message.join(" ") : String(options.message)
    lines.push(`${options.logLevel.toUpperCase()} ${message}`)
  })
  return { lines, layer: Layer.mergeAll(Logger.layer([logger]), Layer.succeed(References.MinimumLogLevel, "All")) }
}

describe("initFrom", () => {
  it.effect("RL from an SFT run starts from its last weights with a fresh optimizer, and records where it started", () =>
    Effect.gen(function* () {
      const root = tmp()
      const sft = yield* sftRun(root)
      const sftFiles = RunLog.paths(sft)
      const sftMetrics = yield* RunLog.readJsonl(sftFiles.metrics)
      const checkpointsBefore = Fs.readFileSync(sftFiles.checkpoints)
      const base = heldOut(sftMetrics.find((r) => r["step"] === 0))
      const last = heldOut(sftMetrics.find((r) => r["step"] === SFT_STEPS))
      // SFT changed what the policy says, so equality below means the weights were loaded
      assert.notDeepEqual(last, base)

      const rl = Path.join(root, "rl")
      const logs = capture()
      yield* Runner.run(rlSettings(rl, sft), vowels).pipe(Effect.provide(backend(rl)), quiet, Effect.provide(logs.layer))
      const rlMetrics = yield* RunLog.readJsonl(RunLog.paths(rl).metrics)
      assert.deepStrictEqual(heldOut(rlMetrics.find((r) => r["step"] === 0)), last)

      // the newest checkpoint, recorded as the state file it resolved to
      const newest = Path.join(sftFiles.state, `step-${SFT_STEPS}.ckpt`)
      const config = readConfig(rl)
      assert.strictEqual(config["initFrom"], newest)
      assert.deepStrictEqual(config["trainer"], { model: "local:random", loraRank: 4 })
      assert.isTrue(logs.lines.some((l) => l.includes(`starting from ${newest} (step ${SFT_STEPS} of ${sft})`)), logs.lines.join("\n"))
      // weights only: one RL step later the optimizer has taken one step, not SFT_STEPS + 1
      const state = yield* Effect.promise(() => Checkpoint.read(Path.join(RunLog.paths(rl).state, "step-1.ckpt")))
      assert.strictEqual(state.meta["adamStep"], 1)
      // the SFT run folder is read, never changed
      assert.isTrue(Fs.readFileSync(sftFiles.checkpoints).equals(checkpointsBefore))
    }))

  it.effect("a run folder and step, or a state file, picks that checkpoint", () =>
    Effect.gen(function* () {
      const root = tmp()
      const sft = yield* sftRun(root)
      const four = Path.join(RunLog.paths(sft).state, "step-4.ckpt")
      for (const [name, given] of [["by-step", Path.join(sft, "step-4")], ["by-file", four]] as const) {
        const rl = Path.join(root, name)
        yield* Runner.run(rlSettings(rl, given, { evalEvery: 0 }), vowels).pipe(Effect.provide(backend(rl)), quiet)
        assert.strictEqual(readConfig(rl)["initFrom"], four)
        // the policy version goes on from the checkpoint's: 4 SFT steps, then 1 RL step
        const state = yield* Effect.promise(() => Checkpoint.read(Path.join(RunLog.paths(rl).state, "step-1.ckpt")))
        assert.strictEqual(state.meta["version"], 5)
      }
    }))

  it.effect("a damaged newest checkpoint falls back to the one before it, with a warning naming the file", () =>
    Effect.gen(function* () {
      const root = tmp()
      const sft = yield* sftRun(root)
      const newest = Path.join(RunLog.paths(sft).state, `step-${SFT_STEPS}.ckpt`)
      Fs.truncateSync(newest, 100)
      const rl = Path.join(root, "rl")
      const logs = capture()
      yield* Runner.run(rlSettings(rl, sft, { evalEvery: 0 }), vowels).pipe(Effect.provide(backend(rl)), quiet, Effect.provide(logs.layer))
      assert.strictEqual(readConfig(rl)["initFrom"], Path.join(RunLog.paths(sft).state, "step-8.ckpt"))
      assert.isTrue(logs.lines.some((l) => l.startsWith("WARN") && l.includes(newest)), logs.lines.join("\n"))
    }))

  it.effect("a resumed run with no checkpoint of its own starts from initFrom again", () =>
    Effect.gen(function* () {
      const root = tmp()
      const sft = yield* sftRun(root)
      const last = heldOut((yield* RunLog.readJsonl(RunLog.paths(sft).metrics)).find((r) => r["step"] === SFT_STEPS))
      const rl = Path.join(root, "rl")
      yield* Runner.run(rlSettings(rl, sft), vowels).pipe(Effect.provide(backend(rl)), quiet)
      // as if it had stopped before its first checkpoint
      const files = RunLog.paths(rl)
      Fs.rmSync(files.checkpoints)
      const saved = readConfig(rl)
      const resumed = yield* Runner.run({ ...rlSettings(rl, String(saved["initFrom"])) }, vowels, { resume: true }).pipe(
        Effect.provide(backend(rl)),
        quiet,
      )
      assert.deepStrictEqual(resumed.map((r) => r["step"]), [1])
      assert.deepStrictEqual(heldOut((yield* RunLog.readJsonl(files.metrics)).find((r) => r["step"] === 0)), last)
    }))
})

describe("initFrom errors name the path and what to give", () => {
  const failure = (dir: string, initFrom: string, options: { readonly rank?: number; readonly modelDir?: string } = {}) =>
    Runner.run(rlSettings(dir, initFrom), vowels).pipe(Effect.provide(backend(dir, options)), quiet, Effect.flip)

  it.effect("no such folder", () =>
    Effect.gen(function* () {
      const root = tmp()
      const missing = Path.join(root, "nope")
      const error = yield* failure(Path.join(root, "rl"), missing)
      assert.strictEqual(error.reason, "Settings")
      assert.include(error.message, `--init-from ${missing}: no such file or folder`)
      assert.include(error.message, "runs/<name>/step-30")
      // nothing was written for a run that could not start
      assert.isFalse(Fs.existsSync(RunLog.paths(Path.join(root, "rl")).config))
    }))

  it.effect("a run folder with no checkpoint, a step it does not have, a folder that is not a run's", () =>
    Effect.gen(function* () {
      const root = tmp()
      const empty = Path.join(root, "empty")
      Fs.mkdirSync(empty)
      Fs.writeFileSync(RunLog.paths(empty).config, "{}\n")
      assert.include((yield* failure(Path.join(root, "a"), empty)).message, `run folder ${empty} holds no checkpoint`)

      const sft = yield* sftRun(root)
      const error = yield* failure(Path.join(root, "b"), Path.join(sft, "step-7"))
      assert.include(error.message, `run folder ${sft} has no checkpoint at step 7 (its checkpoints: steps 4, 8, 12)`)

      const model = Path.join(root, "model")
      yield* Effect.promise(() => Checkpoint.saveBaseModel(model, TINY, initBase(TINY, 1)))
      const notRun = (yield* failure(Path.join(root, "c"), model)).message
      assert.include(notRun, `${model} is not a run folder but a base model folder`)
      assert.include(notRun, `give it as --model ${model}`)
      const other = Path.join(root, "other")
      Fs.mkdirSync(other)
      assert.include((yield* failure(Path.join(root, "d"), other)).message, `${other} is not a run folder (it has no config.json or checkpoints.jsonl)`)
    }))

  it.effect("a checkpoint of another LoRA rank", () =>
    Effect.gen(function* () {
      const root = tmp()
      const sft = yield* sftRun(root)
      const error = yield* failure(Path.join(root, "rl"), sft, { rank: 2 })
      assert.include(error.message, `--init-from ${sft}: run ${sft} trained local:random with LoRA rank 4, this run local:random with LoRA rank 2`)
      assert.include(error.message, "--lora-rank 4")

      // a run folder from before config.json recorded its trainer: the shapes tell
      const config = readConfig(sft)
      delete config["trainer"]
      Fs.writeFileSync(RunLog.paths(sft).config, JSON.stringify(config))
      const older = yield* failure(Path.join(root, "rl2"), sft, { rank: 2 })
      assert.include(older.message, `--init-from ${sft}: no checkpoint loads (this run's trainer: local:random, LoRA rank 2; give the --model and --lora-rank of the run that saved it)`)
    }))

  it.effect("a checkpoint of another base model of the same shape", () =>
    Effect.gen(function* () {
      const root = tmp()
      const [one, two] = [Path.join(root, "base-1"), Path.join(root, "base-2")]
      yield* Effect.promise(() => Checkpoint.saveBaseModel(one, TINY, initBase(TINY, 1)))
      yield* Effect.promise(() => Checkpoint.saveBaseModel(two, TINY, initBase(TINY, 2)))
      const sft = yield* sftRun(root, { modelDir: one })
      const error = yield* failure(Path.join(root, "rl"), sft, { modelDir: two })
      // both models, by folder and weights
      assert.match(error.message, new RegExp(`run ${sft} trained local:${one} \\(weights sha256:[0-9a-f]{12}\\) with LoRA rank 4, this run local:${two} \\(weights sha256:[0-9a-f]{12}\\) with LoRA rank 4`))
      assert.include(error.message, `--model ${one} --lora-rank 4`)
    }))

  it.effect("the same base model in another folder (a copy, another project's install) is the same model", () =>
    Effect.gen(function* () {
      const root = tmp()
      const [one, two] = [Path.join(root, "project-1", "base"), Path.join(root, "project-2", "base")]
      yield* Effect.promise(() => Checkpoint.saveBaseModel(one, TINY, initBase(TINY, 1)))
      Fs.cpSync(one, two, { recursive: true })
      const sft = yield* sftRun(root, { modelDir: one })
      const rl = Path.join(root, "rl")
      yield* Runner.run(rlSettings(rl, sft, { evalEvery: 0 }), vowels).pipe(Effect.provide(backend(rl, { modelDir: two })), quiet)
      const trainer = readConfig(rl)["trainer"] as Record<string, unknown>
      assert.strictEqual(trainer["model"], `local:${two}`)
      assert.strictEqual(trainer["weights"], (readConfig(sft)["trainer"] as Record<string, unknown>)["weights"])
      assert.match(String(trainer["weights"]), /^sha256:[0-9a-f]{64}$/)
    }))
})

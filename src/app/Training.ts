/**
 * A training run from a settings object: what `gyre run` does after parsing its flags,
 * and what `gyre/runner` offers to code. One path for both. The options and the settings
 * they make are `RunOptions.ts`'s.
 *
 * @since 0.1.0
 */
import * as Path from "node:path"
import { Console, Effect, Layer } from "effect"
import * as Env from "../vocabulary/Env.ts"
import * as Metrics from "../metrics/Metrics.ts"
import * as Report from "./Report.ts"
import * as Runner from "../Runner.ts"
import * as Players from "./Players.ts"
import * as Teacher from "./Teacher.ts"
import * as DpoReference from "./DpoReference.ts"
import * as OtlpExport from "../observe/OtlpExport.ts"
import * as TensorBoard from "../observe/TensorBoard.ts"
import { combine, RunObserver } from "../run/Observer.ts"
import * as RunFolder from "../folder/RunFolder.ts"
import * as RunLog from "../folder/RunLog.ts"
import { FLAG_OF, type RunOptions, settingsFrom } from "./RunOptions.ts"
import { resumeBackend } from "../run/Start.ts"
import { backendLayer } from "./Backend.ts"
import * as UnreleasedRuns from "../backends/loops/UnreleasedRuns.ts"
import { availableEnvs, envFile, isPath, loadEnv } from "./LoadEnv.ts"
import { terminalProgress } from "./TerminalProgress.ts"
import * as Cores from "../run/workers/Cores.ts"
import * as EpisodeWorkers from "../run/workers/Pool.ts"
import type { TokenizerSource } from "../run/workers/Protocol.ts"

export { describeIssues, FLAG_OF, type RunOptions } from "./RunOptions.ts"

/** What a finished run returns. */
export interface RunSummary {
  /** the run folder (config.json, metrics.jsonl, rollouts.jsonl, checkpoints.jsonl, report.html) */
  readonly outDir: string
  /** the settings the run used, as written to config.json */
  readonly settings: Runner.RunSettings
  /** one metrics record per step run by this call */
  readonly metrics: ReadonlyArray<Metrics.MetricRecord>
  /** the last held-out score (`held-out correct`, else `held-out reward`) and its step, when the run evaluated */
  readonly heldOut: { readonly label: string; readonly value: number; readonly step: number } | undefined
}

/** Options that would change the data order of a resumed run. */
const FIXED_ON_RESUME = ["groups", "groupSize", "seed", "difficulty", "dynamicSampling"] as const

/**
 * A config.json as this version reads it: an older run's snake_case `adam` keys become
 * camelCase (`RunFolder.upgradeConfig`).
 */
export const upgradeSaved = RunFolder.upgradeConfig

/** A run folder's config.json, decoded (`RunFolder.readConfig`, older runs' keys too); failures name the file and what to do. */
export const readSaved = (dir: string) =>
  RunFolder.readConfig(RunFolder.paths(dir)).pipe(
    Effect.mapError((e) =>
      new Runner.RunError({ reason: "Resume", message: e.reason === "Missing" ? `${e.path} not found: give a run folder such as runs/math-2026-01-01T00-00-00` : e.message })
    ),
  )

/** The env of `env` (a name, a path, or the env itself): loaded when it is a name or a path. */
export const resolveEnv = (env: string | Env.AnyEnv | Env.Mixture) =>
  typeof env === "string"
    ? loadEnv(env).pipe(Effect.map((source) => ({ source, envSpec: isPath(env) ? Path.resolve(env) : env })))
    : Env.isEnv(env) || Env.isMixture(env)
    ? Effect.succeed({ source: env, envSpec: undefined as string | undefined })
    : Effect.fail(new Env.EnvError({ env: String(env), reason: "InvalidDefinition", message: "env must be a name, a path, or a value made with Env.make({...}) or Env.mixture(...)" }))

/**
 * The run's observers: the HTML report, TensorBoard events (`--tensorboard`) and the OTLP
 * exporters (`--otlp`), as one layer.
 */
const observersOf = (options: RunOptions, outDir: string) => {
  const observer = Layer.effect(
    RunObserver,
    Effect.gen(function* () {
      const tensorboard = options.tensorboard === true ? [yield* TensorBoard.observer(Path.join(outDir, "tensorboard"))] : []
      return combine([Report.observer(outDir), ...tensorboard, ...(options.otlp !== undefined ? [OtlpExport.observer] : [])])
    }),
  )
  return options.otlp !== undefined ? Layer.merge(observer, OtlpExport.layer(options.otlp)) : observer
}

/**
 * The episode workers `--cores` asks for (none for 1): they load the env by its name or
 * path, and the tokenizer `--tokenizer` names (else gyre's character tokenizer, the
 * embedded models'); on a Tinker-protocol service (`--backend <url>`) they sample it
 * themselves; with `--otlp` they send their own spans to the collector. An env given as a
 * value has no module a worker could load: it plays on the main thread, with a line that
 * says so. `gyre run` and `gyre eval` both start them here.
 */
export const episodeWorkers = (options: Pick<RunOptions, "cores" | "tokenizer" | "otlp">, envSpec: string | undefined, backend: string) =>
  Effect.gen(function* () {
    if (options.cores !== undefined && !Cores.isCores(options.cores)) {
      return yield* new Runner.RunError({ reason: "Settings", message: `cores must be a whole number of cores (1 or more) or "auto", got ${JSON.stringify(options.cores)}` })
    }
    const threads = Cores.threadsOf(options.cores)
    if (threads <= 1) return Layer.empty
    if (envSpec === undefined) {
      yield* Effect.logWarning(`--cores ${options.cores}: episodes run on the main thread only: the env was given as a value, which a worker thread cannot load (give its module's path instead)`)
      return Layer.empty
    }
    const tokenizer: TokenizerSource = backend !== "embedded" && options.tokenizer !== undefined ? { kind: "files", dir: Path.resolve(options.tokenizer) } : { kind: "char" }
    // on a Tinker-protocol service the workers sample it themselves
    const direct = /^https?:\/\//.test(backend) ? { direct: { baseUrl: backend } } : {}
    return EpisodeWorkers.layer({ cores: threads, env: { module: envFile(envSpec) }, tokenizer, ...direct, otlp: options.otlp })
  })

/**
 * The run's first line: what it trains, how, on which backend, and where its folder is;
 * `--async` (with its steps off-policy) and `--cores` only when they are on.
 */
export const headerOf = (settings: Runner.RunSettings, backend: string, cores?: Cores.Cores): string => {
  const ahead = settings.maxStepsOffPolicy ?? 1
  const threads = Cores.threadsOf(cores)
  const parts = [
    `gyre: ${settings.sft ? "SFT" : "RL"} on ${settings.env}`,
    `${settings.steps} steps x ${settings.groups} groups x ${settings.groupSize}`,
    `loss ${settings.sft ? "sft (cross_entropy)" : settings.loss}`,
    `lr ${settings.adam.learningRate}`,
    ...(settings.async ? [`async, up to ${ahead} step${ahead === 1 ? "" : "s"} off-policy`] : []),
    ...(threads > 1 ? [`episodes on ${threads} worker threads`] : []),
    `backend ${backend}`,
    `run folder ${settings.outDir}`,
  ]
  return parts.join(" | ")
}

/**
 * Runs a training (RL, or SFT with `sft: true`) and returns its summary. What `gyre run`
 * does; errors carry one message that says what went wrong and what to do.
 */
export const train = Effect.fn("gyre/train")(function* (options: RunOptions) {
  const print = options.print === true
  const say = (line: string) => print ? Console.log(line) : Effect.logInfo(line)
  const resumeDir = options.resume
  const saved = resumeDir !== undefined ? yield* readSaved(resumeDir) : undefined
  if (options.initFrom !== undefined && options.initFrom.trim() === "") {
    return yield* new Runner.RunError({ reason: "Settings", message: `--init-from must name a run folder (runs/<name>), runs/<name>/step-N or a state file, got ""` })
  }
  if (saved !== undefined && options.initFrom !== undefined) {
    return yield* new Runner.RunError({
      reason: "Resume",
      message: "--init-from cannot be given with --resume: a resumed run continues from its own checkpoints (config.json records where it started); start a new run with --init-from instead",
    })
  }
  if (saved !== undefined && options.sft !== undefined && options.sft !== saved.sft) {
    return yield* new Runner.RunError({
      reason: "Resume",
      message: saved.sft
        ? `--resume ${resumeDir} continues an SFT run; --sft=false cannot turn it into RL. Start RL from its weights with --init-from ${resumeDir}`
        : `--resume ${resumeDir} continues an RL run; --sft cannot turn it into SFT. Start a new run instead`,
    })
  }
  if (saved !== undefined) {
    const changed = FIXED_ON_RESUME.filter((k) => options[k] !== undefined)
    if (changed.length > 0) {
      return yield* new Runner.RunError({
        reason: "Resume",
        message: `${changed.map((k) => FLAG_OF[k] ?? `--${k}`).join(", ")} cannot change on --resume (the data order depends on it); start a new run instead`,
      })
    }
  }
  const given = typeof options.env === "object" ? options.env : (saved?.envSpec ?? saved?.env ?? options.env)
  if (given === undefined) {
    return yield* new Runner.RunError({ reason: "Settings", message: `give an env, e.g. \`npx gyre run math\` (available: ${availableEnvs().join(", ")}), or --resume runs/<name>` })
  }
  const backend = yield* resumeBackend(options.backend, saved, resumeDir)
  const { envSpec, source } = yield* resolveEnv(given)
  const settings = yield* settingsFrom({ ...options, backend }, source, envSpec, saved, resumeDir)
  yield* say(headerOf(settings, backend, options.cores))
  if (settings.recipe !== undefined) {
    yield* say(`recipe ${settings.recipe}: ${Runner.recipeFlags(settings.recipe)} (${Runner.RECIPES[settings.recipe].source}); flags given with it override these`)
  }
  const layer = backendLayer({
    backend,
    seed: settings.seed,
    stateDir: RunLog.paths(settings.outDir).state,
    // the env's own base model (Env.make({ baseModel })) unless --model names one; a resumed Loops run's, as config.json records it
    model: options.model ?? (backend === "embedded" && Env.isEnv(source) ? source.baseModel : backend === "loops" ? saved?.trainer?.model : undefined),
    loraRank: options.loraRank ?? (backend === "loops" ? saved?.trainer?.loraRank : undefined),
    tokenizer: options.tokenizer,
    runDir: settings.outDir,
    resume: resumeDir !== undefined,
    loops: options.loops,
    workers: settings.async || options.workers === true,
    ...(settings.teacher?.served === true ? { teacher: settings.teacher.model } : {}),
  })
  // a teacher (--teacher) stands in for the reference of the KL penalty; a remote service's is its backend's Reference
  const teacher = settings.teacher
  const withTeacher = teacher === undefined || teacher.served === true ? layer : Layer.provideMerge(Teacher.layer(teacher, Path.join(RunLog.paths(settings.outDir).state, "teacher")), layer)
  // DPO's reference is the policy it starts from: --init-from's weights, frozen
  const withReference = settings.dpo !== undefined && settings.initFrom !== undefined
    ? Layer.provideMerge(DpoReference.layer(settings.initFrom, Path.join(RunLog.paths(settings.outDir).state, "dpo-reference"), backend), withTeacher)
    : withTeacher
  // a game's frozen players (Game.frozen), started once for the run
  const withPlayers = Players.needed(source) ? Layer.provideMerge(Players.layer(source, RunLog.paths(settings.outDir).state), withReference) : withReference
  const withWorkers = Layer.provideMerge(yield* episodeWorkers(options, envSpec, backend), withPlayers)
  const metrics = yield* Runner.run(settings, source, { resume: resumeDir !== undefined }).pipe(
    Effect.provide(Layer.fresh(withWorkers)),
    // a Loops run that could not be deactivated fails the command, naming the command that stops it
    UnreleasedRuns.guard,
    Effect.provide(observersOf(options, settings.outDir)),
    print ? Effect.provideService(Runner.Progress, terminalProgress()) : (x) => x,
  )
  const components = Runner.headline(Runner.rewardWeightsOf(source))
  const lastEval = [...metrics].reverse().find((m) => Metrics.heldOutScore(m, components) !== undefined)
  const score = lastEval === undefined ? undefined : Metrics.heldOutScore(lastEval, components)
  const heldOut = lastEval === undefined || score === undefined ? undefined : { label: score.label, value: score.value, step: Number(lastEval["step"]) }
  yield* say(
    `done: ${settings.outDir} (metrics.jsonl, rollouts.jsonl, checkpoints.jsonl)${heldOut !== undefined ? `; ${heldOut.label} ${heldOut.value.toFixed(3)} at step ${heldOut.step}` : ""}`,
  )
  return { outDir: settings.outDir, settings, metrics, heldOut } satisfies RunSummary
})

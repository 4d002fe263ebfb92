/**
 * An evaluation: scores the base model or a run's checkpoint on an env's held-out set
 * (or its training problems, or both) without training, with the mean and a 95%
 * interval per reward component, and writes every rollout to `eval.jsonl`. What
 * `gyre eval` runs, and what `gyre/runner` offers to code.
 *
 * @since 0.1.0
 */
import * as Os from "node:os"
import * as Path from "node:path"
import { Console, Effect, Layer } from "effect"
import * as Env from "../vocabulary/Env.ts"
import * as K from "../metrics/MetricKeys.ts"
import * as PassAtK from "../metrics/PassAtK.ts"
import * as Reward from "../vocabulary/Reward.ts"
import * as RunFolder from "../folder/RunFolder.ts"
import * as PlatformFs from "../platform/FileSystem.ts"
import { type Group, sampleRows } from "../run/Collect.ts"
import { evaluateGroups } from "../run/Evaluate.ts"
import { buildServices } from "../run/Services.ts"
import { checkEpisodes } from "../run/EpisodeChecks.ts"
import { ContextLength } from "../run/Rollout.ts"
import { RunError, type RunSettings, defaults } from "../run/Settings.ts"
import { checkTokenizerFits } from "../run/Start.ts"
import { Tokenizer } from "../services/Tokenizer.ts"
import { Trainer } from "../services/Trainer.ts"
import { backendLayer } from "./Backend.ts"
import { templateArgsOf } from "./RunOptions.ts"
import { applyTemplateArgs } from "../tokenizers/TemplateArgs.ts"
import * as Players from "./Players.ts"
import { at } from "../util/Lookup.ts"
import { availableEnvs } from "./LoadEnv.ts"
import { episodeWorkers, readSaved, resolveEnv } from "./Training.ts"
import type { Cores } from "../run/workers/Cores.ts"

/** Which problems `gyre eval` scores. */
export type EvalSplit = "heldout" | "train" | "all"

/** What `gyre eval` takes, as an object (each field is the flag of the same name). */
export interface EvalOptions {
  /** an env by name or path, or the env itself; default: the env of `from` */
  readonly env?: string | Env.AnyEnv | Env.Mixture | undefined
  /** a run folder (its newest checkpoint) or `<run folder>/step-N`; default: the base model */
  readonly from?: string | undefined
  /** held-out problems (default), the first training problems, or both */
  readonly split?: EvalSplit | undefined
  /** problems per split (default: the run's or env's eval size) */
  readonly size?: number | undefined
  /** completions sampled per problem (default 1) */
  readonly samples?: number | undefined
  /** the ks of pass@k and maj@k, as a list or as `--k` takes it ("1,4,16"); default 1 and `samples` */
  readonly k?: ReadonlyArray<number> | string | undefined
  /** a sample is correct (pass@k, maj@k) when its total reward is at least this (default 1) */
  readonly threshold?: number | undefined
  /** sampling temperature (default: the run's or env's eval temperature, else 1) */
  readonly temperature?: number | undefined
  /** seed of the problems and the sampling (default: the run's, else 0) */
  readonly seed?: number | undefined
  /** where to write eval.jsonl (default: the run folder with `from`, else `runs/eval-<env>-<time>`) */
  readonly out?: string | undefined
  /** "embedded" (default) or the URL of a Tinker-protocol service */
  readonly backend?: string | undefined
  /** embedded: folder of the base model (default: the one shipped with gyre) */
  readonly model?: string | undefined
  /** LoRA rank of the checkpoint (default 8) */
  readonly loraRank?: number | undefined
  /** http: folder with the remote model's tokenizer files */
  readonly tokenizer?: string | undefined
  /** sample requests in flight (default 8) */
  readonly sampleConcurrency?: number | undefined
  /** cores that play episodes (`--cores`): 1 (default) on the main thread, N on N worker threads, `auto` on every core */
  readonly cores?: Cores | undefined
  /** extra variables of the model's chat template (`--template-arg`), over the run's or env's */
  readonly templateArgs?: Readonly<Record<string, unknown>> | undefined
}

/** A component's mean over the scored rollouts, with a 95% interval. */
export interface Interval {
  readonly name: string
  readonly n: number
  readonly mean: number
  readonly low: number
  readonly high: number
  /** `wilson` for scores that are all 0 or 1, else `normal` (mean ± 1.96 standard errors) */
  readonly method: "wilson" | "normal"
}

/** pass@k and maj@k of one env's problems in a split (`PassAtK.estimates`). */
export interface EnvAttempts {
  readonly env: string
  /** pass@k then maj@k for each k, each with its 95% bootstrap interval over problems */
  readonly estimates: ReadonlyArray<PassAtK.Estimate>
}

/** What `gyre eval` returns. */
export interface EvalSummary {
  /** the eval.jsonl written */
  readonly file: string
  /** the checkpoint scored (`base` for the base model) */
  readonly checkpoint: string
  /**
   * per split scored: its problems, rollouts, one interval per component (`reward/total`
   * first) and, for multi-turn envs, per episode: turns, tool calls, tool errors and parse
   * errors (`episodes`, empty for single-turn envs), and per env pass@k and maj@k
   * (`attempts`; a sample is correct when its total reaches `threshold`)
   */
  readonly splits: ReadonlyArray<{
    readonly split: "heldout" | "train"
    readonly problems: number
    readonly rollouts: number
    readonly intervals: ReadonlyArray<Interval>
    readonly episodes: ReadonlyArray<Interval>
    readonly attempts: ReadonlyArray<EnvAttempts>
  }>
  /** the total reward a sample needs to count as correct */
  readonly threshold: number
}

const Z = 1.959963984540054

/**
 * A 95% interval for the mean of `values`: Wilson's score interval when every value is
 * 0 or 1 (it stays inside [0, 1] and is not empty at 0 or 1 successes), else the normal
 * approximation mean ± 1.96 · sd / √n (sd with n - 1). Counts (`counts: true`: turns,
 * tool calls) are never proportions, even when every one is 0 or 1: always the normal one.
 */
export const interval = (name: string, values: ReadonlyArray<number>, options: { readonly counts?: boolean } = {}): Interval => {
  const n = values.length
  if (n === 0) return { name, n, mean: Number.NaN, low: Number.NaN, high: Number.NaN, method: "normal" }
  const mean = values.reduce((a, b) => a + b, 0) / n
  if (options.counts !== true && values.every((v) => v === 0 || v === 1)) {
    const z2 = Z * Z
    const center = (mean + z2 / (2 * n)) / (1 + z2 / n)
    const half = (Z / (1 + z2 / n)) * Math.sqrt((mean * (1 - mean)) / n + z2 / (4 * n * n))
    return { name, n, mean, low: Math.max(0, center - half), high: Math.min(1, center + half), method: "wilson" }
  }
  const sd = n > 1 ? Math.sqrt(values.reduce((a, v) => a + (v - mean) ** 2, 0) / (n - 1)) : 0
  const half = Z * sd / Math.sqrt(n)
  return { name, n, mean, low: mean - half, high: mean + half, method: "normal" }
}

/** One interval per component over the groups' rollouts, the total first. Masked rollouts have no total. */
export const intervals = (groups: ReadonlyArray<Group>): Array<Interval> => {
  const scores = groups.flatMap((g) => g.scores)
  const names = [...new Set(scores.flatMap((s) => Object.keys(s.components)))].sort()
  const total = scores.flatMap((s) => (s.masked === undefined && s.value !== undefined && Number.isFinite(s.value) ? [s.value] : []))
  return [
    interval("reward/total", total),
    ...names.map((name) => interval(name, scores.flatMap((s) => { const v = s.components[name]; return v !== undefined && Number.isFinite(v) ? [v] : [] }))),
  ]
}

/** Per-episode counts: never read as proportions. */
const COUNTS = { counts: true } as const

/**
 * Per-episode intervals of a multi-turn env's groups: turns, tool calls, tool errors and
 * parse errors; none for single-turn envs.
 */
export const episodeIntervals = (groups: ReadonlyArray<Group>): Array<Interval> => {
  const episodes = groups.filter((g) => g.task.envDef.episode !== undefined || g.task.envDef.agent !== undefined || g.task.envDef.game !== undefined).flatMap((g) => g.episodes)
  if (episodes.length === 0) return []
  return [
    interval(K.EnvStat.turns, episodes.map((e) => e.turns.length), COUNTS),
    interval(K.EnvStat.toolCalls, episodes.map((e) => e.toolCalls), COUNTS),
    interval(K.EnvStat.toolErrors, episodes.map((e) => e.toolErrors), COUNTS),
    interval(K.EnvStat.parseErrors, episodes.map((e) => e.parseErrors), COUNTS),
  ]
}

/**
 * Each sample of a group as pass@k and maj@k read it: correct when its total reward is at
 * least `threshold`, under the answer its env gives (`Env.answer`, else the normalized
 * completion); `undefined` for a masked sample (no total).
 */
export const attemptSamples = (g: Group, threshold: number): Array<PassAtK.Sample | undefined> =>
  g.rollouts.map((r, i) => {
    const s = at(g.scores, i, "score of rollout")
    if (s.masked !== undefined || s.value === undefined || !Number.isFinite(s.value)) return undefined
    const answer = g.task.envDef.answer?.(r.completion, g.task.problem) ?? PassAtK.normalizeAnswer(r.completion)
    return { correct: s.value >= threshold, answer }
  })

/** pass@k and maj@k for each k, per env, over the groups (one per problem) and their scored samples. */
export const attempts = (groups: ReadonlyArray<Group>, ks: ReadonlyArray<number>, threshold: number): Array<EnvAttempts> => {
  const byEnv = new Map<string, Array<Array<PassAtK.Sample>>>()
  for (const g of groups) {
    const scored = attemptSamples(g, threshold).filter((s) => s !== undefined)
    byEnv.set(g.task.env, [...(byEnv.get(g.task.env) ?? []), scored])
  }
  return [...byEnv].map(([env, problems]) => ({ env, estimates: PassAtK.estimates(problems, ks) }))
}

/** The checkpoint file that `--from` names: `<run>` (newest) or `<run>/step-N`. */
const checkpointOf = (from: string) =>
  Effect.gen(function* () {
    const stepMatch = /^(.*?)[\\/]+(step-\d+)(\.ckpt)?[\\/]*$/.exec(from)
    const runDir = stepMatch?.[1]
    const step = stepMatch?.[2]
    // `<run>/step-N` names a checkpoint of <run>, unless it is a run folder itself
    const inRun = runDir !== undefined && step !== undefined && !(yield* PlatformFs.exists(Path.join(from, "config.json")))
    const dir = inRun ? runDir : from
    const wanted = inRun ? step : undefined
    const files = RunFolder.paths(dir)
    const rows = yield* RunFolder.readCheckpoints(files).pipe(Effect.mapError((e) => new RunError({ reason: "Resume", message: `--from ${from}: ${e.message}` })))
    const row = wanted === undefined ? rows[rows.length - 1] : rows.find((r) => r.name === wanted)
    if (row === undefined) {
      return yield* new RunError({
        reason: "Resume",
        message: `--from ${from}: ${wanted === undefined ? `${files.checkpoints} lists no checkpoint` : `no checkpoint ${wanted} in ${files.checkpoints} (there: ${rows.map((r) => r.name).join(", ") || "none"})`}`,
      })
    }
    return { dir, name: row.name, path: yield* RunFolder.statePath(files, row) }
  })

const fmt = (x: number) => (Number.isFinite(x) ? x.toFixed(3) : "-")

/** The settings an evaluation samples with: the run's (with `--from`) or the env's defaults, and the options over them. */
const evalSettings = (options: EvalOptions, source: Env.AnyEnv | Env.Mixture, saved: RunSettings | undefined) =>
  Effect.gen(function* () {
    // the env's suggestions (a mixture's first member's)
    const suggested = Env.members(source)[0]?.[0].eval
    for (const [flag, v] of [["--size", options.size], ["--samples", options.samples], ["--sample-concurrency", options.sampleConcurrency]] as const) {
      if (v !== undefined && !(Number.isInteger(v) && v >= 1)) return yield* new RunError({ reason: "Settings", message: `${flag} must be a whole number of at least 1, got ${v}` })
    }
    if (options.temperature !== undefined && !(options.temperature >= 0)) {
      return yield* new RunError({ reason: "Settings", message: `--temperature must be 0 or more, got ${options.temperature}` })
    }
    const base = saved ?? defaults(source.name)
    const templateArgs = yield* templateArgsOf(options, source, saved)
    return {
      ...base,
      ...templateArgs,
      env: source.name,
      ...(options.seed !== undefined ? { seed: options.seed } : {}),
      evalSize: options.size ?? (saved === undefined ? suggested?.size : undefined) ?? base.evalSize,
      evalTemperature: options.temperature ?? (saved === undefined ? suggested?.temperature : undefined) ?? base.evalTemperature,
      ...(options.sampleConcurrency !== undefined ? { sampleConcurrency: options.sampleConcurrency } : {}),
    } satisfies RunSettings
  })

/**
 * The ks of pass@k and maj@k (`k`, a list or "1,4,16", each from 1 to `samples`; else 1
 * and `samples`) and the threshold a sample's total must reach to be correct (default 1).
 */
const attemptSettings = (options: EvalOptions, samples: number) =>
  Effect.gen(function* () {
    const threshold = options.threshold ?? 1
    if (!Number.isFinite(threshold)) return yield* new RunError({ reason: "Settings", message: `--threshold must be a number, got ${threshold}` })
    if (options.k === undefined) return { ks: PassAtK.defaultKs(samples), threshold }
    const parsed = PassAtK.parseKs(typeof options.k === "string" ? options.k : options.k.join(","), samples)
    const ks = yield* Effect.fromResult(parsed).pipe(Effect.mapError((message) => new RunError({ reason: "Settings", message })))
    return { ks, threshold }
  })

/** The summary `gyre eval` prints: per split, each component's interval, then (multi-turn envs) the per-episode counts'. */
const summaryLines = (splits: EvalSummary["splits"], threshold: number): Array<string> => {
  const line = (i: Interval) => `  ${i.name.padEnd(24)} ${fmt(i.mean)}  95% ${i.method === "wilson" ? "Wilson" : "normal"} interval [${fmt(i.low)}, ${fmt(i.high)}]  n=${i.n}`
  const estimate = (e: PassAtK.Estimate) => `    ${e.name.padEnd(22)} ${fmt(e.mean)}  95% bootstrap interval [${fmt(e.low)}, ${fmt(e.high)}]  n=${e.problems} problems`
  return splits.flatMap((s) => [
    `${s.split}: ${s.problems} problems, ${s.rollouts} rollouts`,
    ...s.intervals.map(line),
    ...(s.episodes.length > 0 ? ["  per episode:", ...s.episodes.map(line)] : []),
    ...s.attempts.flatMap((a) => [`  ${a.env}: pass@k and maj@k (correct: total reward >= ${threshold})`, ...a.estimates.map(estimate)]),
  ])
}

/** Scores a model on an env without training and writes eval.jsonl; see `EvalOptions`. */
export const evaluateModel = Effect.fn("gyre/eval")(function* (options: EvalOptions, print = false) {
  const say = (line: string) => (print ? Console.log(line) : Effect.logInfo(line))
  const from = options.from !== undefined ? yield* checkpointOf(options.from) : undefined
  const saved = from !== undefined ? yield* readSaved(from.dir) : undefined
  const given = options.env ?? saved?.envSpec ?? saved?.env
  if (given === undefined) {
    return yield* new RunError({ reason: "Settings", message: `give an env, e.g. \`npx gyre eval math\` (available: ${availableEnvs().join(", ")}), or --from runs/<name>` })
  }
  const { source, envSpec } = yield* resolveEnv(given)
  const settings = yield* evalSettings(options, source, saved)
  const split = options.split ?? "heldout"
  const samples = options.samples ?? 1
  const { ks, threshold } = yield* attemptSettings(options, samples)
  const checkpoint = from?.name ?? "base"
  const outDir = options.out ?? from?.dir ?? Path.join("runs", `eval-${source.name}-${new Date().toISOString().replace(/[:.]/g, "-").slice(0, 19)}`)
  const file = Path.join(outDir, "eval.jsonl")
  const backend = options.backend ?? "embedded"
  const layer = backendLayer({
    backend,
    seed: settings.seed,
    // nothing is saved: a checkpoint is only read
    stateDir: from !== undefined ? RunFolder.paths(from.dir).state : Os.tmpdir(),
    // the env's own base model (Env.make({ baseModel })) unless --model names one
    model: options.model ?? (backend === "embedded" && Env.isEnv(source) ? source.baseModel : undefined),
    loraRank: options.loraRank,
    tokenizer: options.tokenizer,
    workers: false,
  })
  const workers = yield* episodeWorkers(options, envSpec, backend)
  yield* say(`gyre eval: ${checkpoint === "base" || from === undefined ? "the base model" : `${from.dir} ${checkpoint}`} on ${source.name} | ${split} | ${samples} sample(s) per problem at temperature ${settings.evalTemperature} | backend ${backend}`)

  const scored = yield* Effect.gen(function* () {
    const trainer = yield* Trainer
    if (from !== undefined) {
      yield* trainer.loadState(from.path).pipe(Effect.mapError((e) => new RunError({ reason: "Resume", message: `cannot load checkpoint ${from.path} (${e.reason}): ${e.message}` })))
    }
    const published = yield* trainer.saveWeightsForSampler(`eval-${checkpoint}`).pipe(
      Effect.mapError((e) => new RunError({ reason: "Backend", message: `save_weights_for_sampler (${e.reason}): ${e.message}` })),
    )
    const info = yield* trainer.info.pipe(Effect.mapError((e) => new RunError({ reason: "Backend", message: `info (${e.reason}): ${e.message}` })))
    yield* checkTokenizerFits(info, yield* Tokenizer)
    const services = yield* buildServices(source)
    yield* checkEpisodes(source, services)
    const runId = `eval-${source.name}-${settings.seed}`
    const out: Array<{ readonly split: "heldout" | "train"; readonly groups: ReadonlyArray<Group> }> = []
    for (const s of split === "all" ? (["heldout", "train"] as const) : [split]) {
      // the runner's own evaluation: distinct problems of the split, `samples` each
      const { groups } = yield* evaluateGroups(settings, source, runId, 0, published.version, { split: s === "heldout" ? "eval" : "train", samples }).pipe(
        Effect.provideContext(services),
        Effect.provideService(Reward.RewardPermits, undefined),
        Effect.provideService(Reward.RewardCache, Reward.makeCache()),
        Effect.provideService(ContextLength, info.maxSequenceLength > 0 ? info.maxSequenceLength : Number.MAX_SAFE_INTEGER),
      )
      out.push({ split: s, groups })
    }
    return out
  }).pipe(
    Effect.scoped,
    applyTemplateArgs(settings.templateArgs),
    // a game's frozen players (Game.frozen), started for the evaluation, and the episode workers --cores asks for
    Effect.provide(Layer.fresh(Layer.provideMerge(workers, Players.needed(source) ? Layer.provideMerge(Players.layer(source, Os.tmpdir()), layer) : layer))),
  )

  const rows = scored.flatMap(({ split: s, groups }) =>
    groups.flatMap((g) => {
      const judged = attemptSamples(g, threshold)
      return sampleRows(g).map((row, i): RunFolder.EvalRow => ({ split: s, checkpoint, problem: g.task.problem, ...row, ...judged[i] }))
    })
  )
  yield* RunFolder.writeEval(file, rows).pipe(
    Effect.mapError((e) => new RunError({ reason: "RunFolder", message: `cannot write ${file}: ${e.message}; pick another --out` })),
  )
  const splits = scored.map(({ split: s, groups }) => ({
    split: s,
    problems: groups.length,
    rollouts: groups.reduce((a, g) => a + g.rollouts.length, 0),
    intervals: intervals(groups),
    episodes: episodeIntervals(groups),
    attempts: attempts(groups, ks, threshold),
  }))
  for (const line of summaryLines(splits, threshold)) yield* say(line)
  yield* say(`wrote ${file}`)
  return { file, checkpoint, splits, threshold } satisfies EvalSummary
})

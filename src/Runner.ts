/**
 * The RL loop, over the `Trainer`, `Sampler` and `Tokenizer` services.
 *
 * One step: draw `groups` problems -> sample `groupSize` completions per problem (one
 * affinity key per group, pinned to the last published version) -> score (bounded
 * concurrency, failure policies) -> advantages -> Datums -> `forwardBackward` in
 * micro-batches -> `optimStep` -> publish -> the next step samples from the new version.
 *
 * In async mode the next step's rollouts are sampled while this step trains; each group
 * remembers the version it was sampled from, and groups more than `maxLag` versions
 * old are requeued (resampled) or dropped.
 *
 * @since 0.1.0
 */
import * as Fs from "node:fs"
import * as Path from "node:path"
import { Context, Effect, Fiber, Schema, Semaphore } from "effect"
import * as Advantage from "./Advantage.ts"
import {
  AdamParams,
  type BackendError,
  type Datum as DatumT,
  LossFn,
  LossFnConfig,
  modelInputFromTokens,
  SamplingParams,
} from "./Contract.ts"
import * as Datum from "./Datum.ts"
import * as Env from "./Env.ts"
import * as Loss from "./Loss.ts"
import * as Metrics from "./Metrics.ts"
import * as Report from "./Report.ts"
import * as Reward from "./Reward.ts"
import * as RunLog from "./RunLog.ts"
import { Sampler } from "./Sampler.ts"
import { encodePrompt, type Prompt, Tokenizer } from "./Tokenizer.ts"
import { Trainer } from "./Trainer.ts"

// ===== Settings =====

/** Everything a run is configured with; written to `config.json`. @since 0.1.0 @category models */
export const RunSettings = Schema.Struct({
  name: Schema.String,
  outDir: Schema.String,
  env: Schema.String,
  steps: Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)),
  /** groups (problems) per step */
  groups: Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)),
  groupSize: Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)),
  loss: LossFn,
  lossConfig: LossFnConfig,
  advantage: Advantage.Mode,
  adam: AdamParams,
  /** sampling defaults; an env's own `sampling` overrides them */
  sampling: SamplingParams,
  /** sampling settings given explicitly (CLI flags): they override the env's */
  samplingOverrides: Schema.optional(Schema.Struct({
    maxTokens: Schema.optional(SamplingParams.fields.maxTokens),
    temperature: Schema.optional(SamplingParams.fields.temperature),
    topP: SamplingParams.fields.topP,
    topK: SamplingParams.fields.topK,
  })),
  /** how the env was named on the command line (a name in envs/ or an absolute path), for --resume */
  envSpec: Schema.optional(Schema.String),
  seed: Schema.Int,
  difficulty: Schema.optional(Schema.Int),
  /** datums per forwardBackward call (0 = all in one call) */
  microBatch: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)),
  /** reward evaluations in flight at once */
  rewardConcurrency: Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)),
  /** sample requests in flight at once */
  sampleConcurrency: Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)),
  /** evaluate held-out problems every N steps (0 = never) */
  evalEvery: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)),
  evalSize: Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)),
  evalTemperature: Schema.Finite.check(Schema.isGreaterThanOrEqualTo(0)),
  /** save_state every N steps (0 = only at the end) */
  saveEvery: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)),
  /** train on reference answers with cross_entropy instead of RL */
  sft: Schema.Boolean,
  async: Schema.Boolean,
  maxLag: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)),
  staleGroups: Schema.Literals(["requeue", "drop"]),
  /** keep one rollouts.jsonl row per sample every N steps (0 = never) */
  logRolloutsEvery: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)),
})
export type RunSettings = typeof RunSettings.Type

/** A run failed: which step, env, reward and problem, and why. @since 0.1.0 @category errors */
export class RunError extends Schema.TaggedError<RunError>()("RunError", {
  reason: Schema.Literals(["Settings", "Reward", "Backend", "Env", "RunFolder", "Resume"]),
  message: Schema.String,
  step: Schema.optional(Schema.Int),
}) {}

/** What the runner reports after each step (the CLI renders it). @since 0.1.0 @category models */
export interface StepSummary {
  readonly step: number
  readonly steps: number
  readonly metrics: Metrics.MetricRecord
}

/** Hooks for progress output; the default logs one line per step. @since 0.1.0 @category services */
export const Progress = Context.Reference<{
  readonly onStep: (summary: StepSummary) => Effect.Effect<void>
  readonly onPhase: (phase: { readonly step: number; readonly steps: number; readonly phase: string; readonly done: number; readonly total: number }) => Effect.Effect<void>
}>("gyre/Runner/Progress", {
  defaultValue: () => ({
    onStep: (s) => Effect.logInfo(formatStep(s)),
    onPhase: () => Effect.void,
  }),
})

/** One progress line. @since 0.1.0 @category formatting */
export const formatStep = ({ step, steps, metrics: m }: StepSummary): string => {
  const f = (k: string, digits = 3) => (m[k] === undefined ? "-" : m[k]!.toFixed(digits))
  const acc = m["env/all/correct"] !== undefined ? ` correct ${f("env/all/correct")}` : ""
  const evalPart = m["test/env/all/reward/total"] !== undefined ? ` | eval ${f("test/env/all/correct") !== "-" ? f("test/env/all/correct") : f("test/env/all/reward/total")}` : ""
  return `step ${step + 1}/${steps} | reward ${f("env/all/reward/total")}${acc} | mixed ${f("by_group/frac_mixed", 2)} | ${Math.round(m["throughput/tokens_per_s"] ?? 0)} tok/s | ${f("time/total", 2)}s${evalPart}`
}

// ===== Rollouts =====

interface Group {
  readonly task: Env.Task<unknown> & { readonly envDef: Env.AnyEnv }
  readonly index: number
  readonly promptTokens: Array<number>
  readonly prompt: Prompt
  readonly version: number
  readonly rollouts: Array<Reward.Rollout<unknown>>
  readonly samplerLogprobs: Array<ReadonlyArray<number>>
  readonly scores: Array<Reward.Score>
}

interface Batch {
  readonly step: number
  readonly groups: Array<Group>
  readonly sampleSeconds: number
  /** async: groups that were older than maxLag when this step trained */
  readonly staleGroups: number
}

const fail = (reason: RunError["reason"], step: number | undefined) => (e: { readonly message: string }) =>
  new RunError({ reason, message: e.message, ...(step !== undefined ? { step } : {}) })

const sampleGroup = Effect.fnUntraced(function* (
  settings: RunSettings,
  runId: string,
  step: number,
  g: number,
  version: number,
  task: Env.Task<unknown> & { readonly envDef: Env.AnyEnv },
  options: { readonly split: Env.Split; readonly numSamples: number; readonly temperature?: number },
) {
  const tokenizer = yield* Tokenizer
  const sampler = yield* Sampler
  const env = task.envDef
  const prompt = env.prompt(task.problem)
  const promptTokens = yield* encodePrompt(tokenizer, prompt).pipe(
    Effect.mapError((e) => new RunError({ reason: "Env", step, message: `${env.name}: cannot encode the prompt of ${task.key}: ${e.message}` })),
  )
  const sampling: SamplingParams = {
    ...settings.sampling,
    ...env.sampling,
    ...settings.samplingOverrides,
    ...(options.temperature !== undefined ? { temperature: options.temperature } : {}),
    seed: Env.hash32(`${settings.seed}/${options.split}/${step}/${g}`),
  }
  const result = yield* sampler.sample(modelInputFromTokens(promptTokens), sampling, {
    numSamples: options.numSamples,
    affinityKey: `${runId}/${options.split}/${step}/${g}`,
    minPolicyVersion: version,
  }).pipe(Effect.mapError((e: BackendError) => new RunError({ reason: "Backend", step, message: `sample (${e.reason}): ${e.message}` })))
  const rollouts = result.sequences.map((s, i): Reward.Rollout<unknown> => ({
    problem: task.problem,
    prompt,
    completion: tokenizer.decode(s.stopReason === "stop" && s.tokens[s.tokens.length - 1] === tokenizer.eos ? s.tokens.slice(0, -1) : s.tokens),
    tokens: s.tokens,
    stopReason: s.stopReason,
    index: i,
    groupSize: result.sequences.length,
  }))
  const scores = yield* Reward.evaluate(env.reward, rollouts).pipe(
    Effect.mapError((e) =>
      new RunError({
        reason: "Reward",
        step,
        message: `env ${env.name}, reward ${e.reward}, problem ${JSON.stringify(task.problem)} (${task.key}): ${e.message}`,
      })
    ),
  )
  return {
    task,
    index: g,
    promptTokens,
    prompt,
    version: result.policyVersion,
    rollouts,
    samplerLogprobs: result.sequences.map((s) => s.logprobs),
    scores,
  } satisfies Group
})

/** Samples and scores one step's groups. */
const collect = Effect.fnUntraced(function* (settings: RunSettings, source: Env.AnyEnv | Env.Mixture, runId: string, step: number, version: number) {
  const progress = yield* Progress
  const start = performance.now()
  const tasks = yield* Effect.forEach(Array.from({ length: settings.groups }, (_, g) => g), (g) =>
    Env.taskAt(source, {
      seed: settings.seed,
      index: step * settings.groups + g,
      split: "train",
      ...(settings.difficulty !== undefined ? { difficulty: settings.difficulty } : {}),
    }).pipe(Effect.mapError(fail("Env", step))))
  let done = 0
  const groups = yield* Effect.forEach(
    tasks,
    (task, g) =>
      sampleGroup(settings, runId, step, g, version, task, { split: "train", numSamples: settings.groupSize }).pipe(
        Effect.tap(() => {
          done++
          return progress.onPhase({ step, steps: settings.steps, phase: "sample+score", done, total: tasks.length })
        }),
      ),
    { concurrency: settings.sampleConcurrency },
  )
  const seconds = (performance.now() - start) / 1000
  return { step, groups, sampleSeconds: seconds, staleGroups: 0 } satisfies Batch
})

// ===== Training =====

/** The ratio bounds behind `optim/clip_fraction`: the loss's own clip thresholds where it has them. */
const clipBounds = (settings: RunSettings) => ({
  low: settings.lossConfig["clip_low_threshold"] ?? (settings.loss === "cispo" ? 0 : 0.8),
  high: settings.lossConfig["clip_high_threshold"] ?? (settings.loss === "cispo" ? 4 : 1.2),
})

interface Trained {
  readonly metrics: Metrics.MetricRecord
  readonly version: number
  readonly advantages: Array<Array<number>>
}

const train = Effect.fnUntraced(function* (settings: RunSettings, batch: Batch, trainerVersion: number) {
  const trainer = yield* Trainer
  const tokenizer = yield* Tokenizer
  const progress = yield* Progress
  const start = performance.now()
  const totals = batch.groups.map((g) => g.scores.map((s) => (s.masked !== undefined ? undefined : s.value)))
  const { advantages, noOpGroups } = Advantage.compute(totals, settings.advantage)

  const data: Array<DatumT> = []
  const pairs: Array<{ readonly group: number; readonly sample: number }> = []
  if (settings.sft) {
    for (const g of batch.groups) {
      const reference = g.task.envDef.reference
      if (reference === undefined) {
        return yield* new RunError({ reason: "Env", step: batch.step, message: `--sft needs env ${g.task.envDef.name} to define reference(problem)` })
      }
      const completion = yield* tokenizer.encode(reference(g.task.problem)).pipe(Effect.mapError(fail("Env", batch.step)))
      data.push(Datum.sft({ prompt: g.promptTokens, completion: [...completion, tokenizer.eos] }))
    }
  } else {
    batch.groups.forEach((g, gi) =>
      g.rollouts.forEach((r, si) => {
        const a = advantages[gi]![si]!
        if (a === 0) return
        data.push(Datum.rl({ prompt: g.promptTokens, completion: r.tokens, samplerLogprobs: g.samplerLogprobs[si]!, advantage: a }))
        pairs.push({ group: gi, sample: si })
      })
    )
  }

  const metrics: Metrics.MetricRecord = { "by_group/no_op": noOpGroups, "train/datums": data.length }
  let version = trainerVersion
  if (data.length > 0) {
    const lossFn = settings.sft ? "cross_entropy" : settings.loss
    const chunk = settings.microBatch === 0 ? data.length : settings.microBatch
    let lossSum = 0
    let active = 0
    const sampler: Array<number> = []
    const learner: Array<number> = []
    for (let i = 0; i < data.length; i += chunk) {
      const slice = data.slice(i, i + chunk)
      const out = yield* trainer.forwardBackward(slice, lossFn, settings.sft ? {} : { lossFnConfig: settings.lossConfig }).pipe(
        Effect.mapError((e) => new RunError({ reason: "Backend", step: batch.step, message: `forward_backward (${e.reason}): ${e.message}` })),
      )
      lossSum += out.metrics["loss:sum"] ?? 0
      active += out.metrics["active_tokens"] ?? 0
      if (!settings.sft) {
        out.lossFnOutputs.forEach((o, j) => {
          const { group, sample } = pairs[i + j]!
          const P = batch.groups[group]!.promptTokens.length
          const s = batch.groups[group]!.samplerLogprobs[sample]!
          for (let t = 0; t < s.length; t++) {
            sampler.push(s[t]!)
            learner.push(o.logprobs[P + t]!)
          }
        })
      }
      yield* progress.onPhase({ step: batch.step, steps: settings.steps, phase: "train", done: Math.min(data.length, i + chunk), total: data.length })
    }
    const optim = yield* trainer.optimStep(settings.adam).pipe(
      Effect.mapError((e) => new RunError({ reason: "Backend", step: batch.step, message: `optim_step (${e.reason}): ${e.message}` })),
    )
    const published = yield* trainer.saveWeightsForSampler(`step-${batch.step + 1}`).pipe(
      Effect.mapError((e) => new RunError({ reason: "Backend", step: batch.step, message: `save_weights_for_sampler (${e.reason}): ${e.message}` })),
    )
    version = published.version
    Object.assign(metrics, {
      "train/loss": active === 0 ? 0 : lossSum / active,
      "train/active_tokens": active,
      ...Object.fromEntries(Object.entries(optim.metrics).map(([k, v]) => [`optim/${k}`, v])),
      ...Metrics.klSampleTrain({ sampler, trainer: learner }, clipBounds(settings)),
    })
  }
  metrics["time/train"] = (performance.now() - start) / 1000
  return { metrics, version, advantages } satisfies Trained
})

// ===== Evaluation =====

/**
 * Scores the fixed held-out set: one sample per problem at the eval temperature.
 * Returns `test/env/<env>/<component>` means.
 * @since 0.1.0 @category evaluation
 */
export const evaluate = Effect.fn("Runner.evaluate")(function* (
  settings: RunSettings,
  source: Env.AnyEnv | Env.Mixture,
  runId: string,
  step: number,
  version: number,
) {
  const start = performance.now()
  const members = Env.members(source)
  const total = members.reduce((s, [, w]) => s + w, 0)
  const groups: Array<Group> = []
  // One running index over all envs, so no two eval problems share a sampling seed or key.
  let offset = 0
  for (const [env, w] of members) {
    const size = Math.max(1, Math.round((settings.evalSize * w) / total))
    const tasks = yield* Env.evalSet(env, {
      seed: settings.seed,
      size,
      ...(settings.difficulty !== undefined ? { difficulty: settings.difficulty } : {}),
    }).pipe(Effect.mapError(fail("Env", step)))
    const scored = yield* Effect.forEach(
      tasks,
      (task, i) =>
        sampleGroup(settings, runId, step, offset + i, version, { ...task, envDef: env }, {
          split: "eval",
          numSamples: 1,
          temperature: settings.evalTemperature,
        }),
      { concurrency: settings.sampleConcurrency },
    )
    groups.push(...scored)
    offset += tasks.length
  }
  const metrics = scoreMetrics(groups, "test/")
  metrics["time/eval"] = (performance.now() - start) / 1000
  return metrics
})

/** Reward and component means over groups, overall and per env. */
const scoreMetrics = (groups: ReadonlyArray<Group>, prefix: string): Metrics.MetricRecord => {
  const out: Metrics.MetricRecord = {}
  const byEnv = new Map<string, Array<Group>>()
  for (const g of groups) byEnv.set(g.task.env, [...(byEnv.get(g.task.env) ?? []), g])
  const scopes: Array<readonly [string, ReadonlyArray<Group>]> = [["all", groups]]
  if (byEnv.size > 1) scopes.push(...byEnv.entries())
  for (const [scope, gs] of scopes) {
    const scores = gs.flatMap((g) => g.scores)
    const total = Metrics.mean(scores.map((s) => (s.masked !== undefined ? undefined : s.value)))
    if (total !== undefined) out[`${prefix}env/${scope}/reward/total`] = total
    const names = new Set(scores.flatMap((s) => Object.keys(s.components)))
    for (const name of names) {
      const m = Metrics.mean(scores.map((s) => s.components[name]))
      if (m !== undefined) out[`${prefix}env/${scope}/${name}`] = m
    }
    out[`${prefix}env/${scope}/frac_masked`] = scores.length === 0 ? 0 : scores.filter((s) => s.masked !== undefined).length / scores.length
  }
  return out
}

// ===== The loop =====

/** Where a run starts: fresh, or after its last complete checkpoint. */
const prepare = Effect.fnUntraced(function* (settings: RunSettings, resume: boolean) {
  const trainer = yield* Trainer
  const files = RunLog.paths(settings.outDir)
  let start = 0
  if (!resume && Fs.existsSync(files.config)) {
    return yield* new RunError({
      reason: "RunFolder",
      message: `run folder ${settings.outDir} already holds a run: continue it with --resume ${settings.outDir}, or pick another --name`,
    })
  }
  if (resume) {
    // Rewriting drops a line torn by a crash, so rows appended after it stay readable.
    const checkpoints = yield* RunLog.filterJsonl(files.checkpoints, () => true).pipe(Effect.mapError(fail("RunFolder", undefined)))
    const last = checkpoints[checkpoints.length - 1]
    if (last !== undefined) {
      // A run folder that was moved still finds its state files.
      const recorded = String(last["path"])
      const moved = Path.join(files.state, Path.basename(recorded))
      const path = !recorded.includes("://") && !Fs.existsSync(recorded) && Fs.existsSync(moved) ? moved : recorded
      yield* trainer.loadState(path, { withOptimizer: true }).pipe(
        Effect.mapError((e) => new RunError({ reason: "Resume", message: `cannot load checkpoint ${path}: ${e.message}` })),
      )
      start = Number(last["step"])
      yield* Effect.logInfo(`resuming ${settings.outDir} after step ${start} from ${path}`)
    } else {
      yield* Effect.logInfo(`no checkpoint in ${settings.outDir}: starting from step 1`)
    }
    // Drop rows of steps after the checkpoint: they are redone with the same data and seeds.
    for (const file of [files.metrics, files.rollouts]) {
      // With no checkpoint the run starts over, base evaluation (step 0) included.
      yield* RunLog.filterJsonl(file, (row) => start > 0 && Number(row["step"]) <= start).pipe(Effect.mapError(fail("RunFolder", undefined)))
    }
  }
  yield* RunLog.writeAtomic(files.config, JSON.stringify(settings, null, 2) + "\n").pipe(Effect.mapError(fail("RunFolder", undefined)))
  const published = yield* trainer.saveWeightsForSampler(`step-${start}`).pipe(
    Effect.mapError((e) => new RunError({ reason: "Backend", message: `save_weights_for_sampler (${e.reason}): ${e.message}` })),
  )
  return { start, version: published.version }
})

/**
 * Runs `settings.steps` RL (or SFT) steps and writes the run folder. With `resume`,
 * continues after the last checkpoint in `settings.outDir`.
 * @since 0.1.0 @category running
 */
export const run = Effect.fn("Runner.run")(function* (
  settings: RunSettings,
  source: Env.AnyEnv | Env.Mixture,
  options: { readonly resume?: boolean } = {},
) {
  const progress = yield* Progress
  const trainer = yield* Trainer
  const files = RunLog.paths(settings.outDir)
  // A bad loss or loss config fails before any sampling or training.
  const check = Loss.resolveLoss(settings.sft ? "cross_entropy" : settings.loss, settings.sft ? {} : settings.lossConfig)
  if (!check.ok) return yield* new RunError({ reason: "Settings", message: `--loss ${settings.loss} --loss-config: ${check.message}` })
  // Sampler logprobs are those of the distribution sampled from; the trainer's are at T=1.
  if (!settings.sft && settings.loss !== "cross_entropy") {
    for (const [env] of Env.members(source)) {
      const p = { ...settings.sampling, ...env.sampling, ...settings.samplingOverrides }
      if (p.temperature !== 1 || (p.topP !== undefined && p.topP < 1) || (p.topK !== undefined && p.topK > 0)) {
        yield* Effect.logWarning(
          `${env.name} samples at temperature ${p.temperature}${p.topP !== undefined ? `, top-p ${p.topP}` : ""}${p.topK ? `, top-k ${p.topK}` : ""}: ` +
            `${settings.loss}'s importance ratios compare those logprobs with the trainer's at temperature 1, so they are not 1 even on-policy (the KL metrics will show it)`,
        )
      }
    }
  }
  const runId = `${Path.basename(settings.outDir)}-${settings.seed}`
  const permits = yield* Semaphore.make(settings.rewardConcurrency)
  const withPermits = <A, E, R>(eff: Effect.Effect<A, E, R>) => Effect.provideService(eff, Reward.RewardPermits, permits)

  let { start, version } = yield* prepare(settings, options.resume ?? false)
  let trainerVersion = version
  const lastMetrics: Array<Metrics.MetricRecord> = []

  // The base policy's held-out score, as row `step: 0`, so every curve has its starting point.
  if (settings.evalEvery > 0 && start === 0) {
    const base = yield* withPermits(evaluate(settings, source, runId, 0, version))
    yield* RunLog.appendJsonl(files.metrics, [{ step: 0, ...base }]).pipe(Effect.mapError(fail("RunFolder", 0)))
    yield* Effect.logInfo(`base policy on the held-out set: ${Object.entries(base).filter(([k]) => k.startsWith("test/env/all/")).map(([k, v]) => `${k.slice(13)} ${v.toFixed(3)}`).join(", ")}`)
  }

  const collectStep = (step: number, at: number) => withPermits(collect(settings, source, runId, step, at))
  let pending = settings.async && start < settings.steps ? yield* Effect.forkChild(collectStep(start, version)) : undefined

  // A checkpoint is complete only once its state file exists; its row is written after it.
  // The embedded backend is given `<run folder>/state` as its state folder by the CLI.
  let completed = start
  let savedAt = start
  const saveCheckpoint = (step: number) =>
    Effect.gen(function* () {
      const saved = yield* trainer.saveState(`step-${step}`).pipe(
        Effect.mapError((e) => new RunError({ reason: "Backend", step, message: `save_state (${e.reason}): ${e.message}` })),
      )
      yield* RunLog.appendJsonl(files.checkpoints, [{ step, name: `step-${step}`, path: saved.path, time: new Date().toISOString() }]).pipe(
        Effect.mapError(fail("RunFolder", step)),
      )
      savedAt = step
    })

  const loop = Effect.gen(function* () {
    for (let step = start; step < settings.steps; step++) {
      const stepStart = performance.now()
      let batch: Batch
      if (pending !== undefined) {
        batch = yield* Fiber.join(pending)
        pending = undefined
        const stale = batch.groups.filter((g) => trainerVersion - g.version > settings.maxLag)
        if (stale.length > 0) {
          if (settings.staleGroups === "drop") {
            batch = { ...batch, groups: batch.groups.filter((g) => trainerVersion - g.version <= settings.maxLag) }
          } else {
            const fresh = yield* Effect.forEach(
              stale,
              (g) => withPermits(sampleGroup(settings, runId, step, g.index, version, g.task, { split: "train", numSamples: settings.groupSize })),
              { concurrency: settings.sampleConcurrency },
            )
            batch = { ...batch, groups: batch.groups.map((g) => fresh.find((f) => f.index === g.index) ?? g) }
          }
        }
        batch = { ...batch, staleGroups: stale.length }
      } else {
        batch = yield* collectStep(step, version)
      }
      // Async: sample the next step from the current version while this one trains.
      if (settings.async && step + 1 < settings.steps) pending = yield* Effect.forkChild(collectStep(step + 1, version))

      // From here to the end of the step nothing is interrupted: a step is trained, logged and
      // (maybe) checkpointed as a whole, so an interrupted run stops between steps.
      const finish = Effect.gen(function* () {
        const versionBefore = trainerVersion
        const trained = yield* train(settings, batch, trainerVersion)
        trainerVersion = trained.version
        version = trained.version

        const metrics: Metrics.MetricRecord = { step: step + 1 }
        Object.assign(metrics, scoreMetrics(batch.groups, ""))
        Object.assign(metrics, Metrics.groupFractions(batch.groups.map((g) => g.scores.map((s) => (s.masked !== undefined ? undefined : s.value)))))
        Object.assign(metrics, trained.metrics)
        const sampledTokens = batch.groups.reduce((s, g) => s + g.rollouts.reduce((t, r) => t + r.tokens.length, 0), 0)
        const lags = batch.groups.map((g) => versionBefore - g.version)
        metrics["policy_version/lag_max"] = Math.max(0, ...lags)
        metrics["policy_version/lag_mean"] = Metrics.mean(lags) ?? 0
        metrics["async/stale_groups"] = batch.staleGroups
        metrics["policy_version/trainer"] = trainerVersion
        metrics["time/sample"] = batch.sampleSeconds
        metrics["time/total"] = (performance.now() - stepStart) / 1000
        metrics["throughput/tokens_per_s"] = sampledTokens / Math.max(1e-9, metrics["time/total"]!)

        if (settings.evalEvery > 0 && ((step + 1) % settings.evalEvery === 0 || step + 1 === settings.steps)) {
          Object.assign(metrics, yield* withPermits(evaluate(settings, source, runId, step + 1, version)))
        }

        yield* RunLog.appendJsonl(files.metrics, [metrics]).pipe(Effect.mapError(fail("RunFolder", step)))
        if (settings.logRolloutsEvery > 0 && (step === 0 || (step + 1) % settings.logRolloutsEvery === 0 || step + 1 === settings.steps)) {
          const rows = batch.groups.flatMap((g, gi) =>
            g.rollouts.map((r, si) => ({
              step: step + 1,
              group: g.index,
              sample: si,
              env: g.task.env,
              key: g.task.key,
              version: g.version,
              prompt: g.prompt,
              completion: r.completion,
              stopReason: r.stopReason,
              reward: g.scores[si]!.value ?? null,
              masked: g.scores[si]!.masked ?? null,
              components: g.scores[si]!.components,
              advantage: trained.advantages[gi]?.[si] ?? 0,
            }))
          )
          yield* RunLog.appendJsonl(files.rollouts, rows).pipe(Effect.mapError(fail("RunFolder", step)))
        }

        completed = step + 1
        const last = step + 1 === settings.steps
        if ((settings.saveEvery > 0 && (step + 1) % settings.saveEvery === 0) || last) yield* saveCheckpoint(step + 1)
        lastMetrics.push(metrics)
        if ("test/env/all/reward/total" in metrics || last || (step + 1) % 100 === 0) {
          yield* Report.write(settings.outDir).pipe(Effect.mapError(fail("RunFolder", step)))
        }
        yield* progress.onStep({ step, steps: settings.steps, metrics })
      })
      yield* Effect.uninterruptible(finish)
    }
  })

  // Interrupted (Ctrl-C): keep the work done so far as a checkpoint that --resume continues from.
  yield* loop.pipe(
    Effect.onInterrupt(() =>
      completed > savedAt
        ? saveCheckpoint(completed).pipe(
          Effect.andThen(Effect.logInfo(`interrupted after step ${completed}: saved checkpoint step-${completed}; continue with --resume ${settings.outDir}`)),
          Effect.catch((e) => Effect.logError(`interrupted after step ${completed}; the checkpoint could not be saved: ${e.message}`)),
        )
        : Effect.logInfo(`interrupted after step ${completed}; the last checkpoint is step-${savedAt}`)
    ),
  )
  if (pending !== undefined) yield* Fiber.interrupt(pending)
  return lastMetrics
})

/** Default settings for a run of an env (the CLI's defaults). @since 0.1.0 @category constructors */
export const defaults = (env: string, overrides: Partial<RunSettings> = {}): RunSettings => {
  const name = overrides.name ?? `${env}-${new Date().toISOString().replace(/[:.]/g, "-").slice(0, 19)}`
  return {
    name,
    outDir: Path.join("runs", name),
    env,
    steps: 2000,
    groups: 8,
    groupSize: 8,
    loss: "ppo",
    lossConfig: {},
    advantage: "group_std",
    adam: { learning_rate: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0, grad_clip_norm: 1 },
    sampling: { maxTokens: 16, temperature: 1 },
    seed: 0,
    microBatch: 0,
    rewardConcurrency: 64,
    sampleConcurrency: 8,
    evalEvery: 500,
    evalSize: 300,
    evalTemperature: 1,
    saveEvery: 500,
    sft: false,
    async: false,
    maxLag: 1,
    staleGroups: "requeue",
    logRolloutsEvery: 10,
    ...overrides,
  }
}

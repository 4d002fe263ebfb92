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
 * Knobs: a learning-rate schedule (a pure function of the step, so a resumed run continues
 * it), the loss aggregation (token mean, sequence mean, or a sum over a constant, by scaling
 * each datum's advantages before the call), and DAPO dynamic sampling (groups with no signal
 * dropped and refilled from a per-step stream). At the rollout-logging cadence the run
 * writes `divergence.jsonl` (sampler - trainer log-prob histogram and worst tokens).
 *
 * `run` reads as its steps: check the settings, open the run (its services, its folder,
 * the version to start from), evaluate the base policy, then per step collect ->
 * advantages -> datums -> train -> publish -> (hack watch) -> evaluate -> log ->
 * checkpoint, each phase its own span. The pieces live in `src/run/`: settings and their
 * checks, the rollout pipeline (sync or async), collection, the training phases, the hack
 * watch, evaluation, progress, and the start (or resume) of a run folder.
 *
 * @since 0.1.0
 */
import * as Path from "node:path"
import { Cause, Context, Effect, Exit, Semaphore } from "effect"
import type * as Env from "./Env.ts"
import * as K from "./MetricKeys.ts"
import * as Metrics from "./Metrics.ts"
import * as Reference from "./Reference.ts"
import * as Report from "./Report.ts"
import * as Reward from "./Reward.ts"
import * as RunFolder from "./RunFolder.ts"
import type { Sampler } from "./Sampler.ts"
import type { Tokenizer } from "./Tokenizer.ts"
import { Trainer } from "./Trainer.ts"
import { type Batch, collect, sampleGroup, sampleRows } from "./run/Collect.ts"
import { evaluate, scoreMetrics } from "./run/Evaluate.ts"
import * as HackWatch from "./run/HackWatch.ts"
import * as Pipeline from "./run/Pipeline.ts"
import { headline, Progress } from "./run/Progress.ts"
import { check, fail, inForce, RunError, type RunSettings } from "./run/Settings.ts"
import { ContextLength } from "./run/Rollout.ts"
import { buildServices } from "./run/Services.ts"
import { prepare } from "./run/Start.ts"
import * as Train from "./run/Train.ts"

export { aggregationOf, defaults, DynamicSampling, envDefaults, LossAggregation, LrSchedule, rewardWeightsOf, RunError, RunSettings } from "./run/Settings.ts"
export { learningRate } from "./run/Train.ts"
export { divergencePath } from "./Report.ts"
export { formatStep, headline, Progress, type StepSummary } from "./run/Progress.ts"
export { evaluate } from "./run/Evaluate.ts"

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
  yield* check(settings, source)
  const { ctx, ledger } = yield* open(settings, source, options.resume ?? false)
  // The base policy's held-out score, as row `step: 0`, so every curve has its starting point.
  if (settings.evalEvery > 0 && ledger.completed === 0) yield* evaluateBase(ctx, ledger.version)
  const pipeline = Pipeline.make({
    settings,
    collect: (step, version) => ctx.provide(collect(settings, source, ctx.runId, step, version)),
    resample: (step, g, version) =>
      ctx.provide(sampleGroup(settings, ctx.runId, step, g.index, version, g.task, { split: "train", numSamples: settings.groupSize })),
  })
  // async: the first k steps are sampled from the version the run starts from
  for (let s = ledger.completed; s < ledger.completed + pipeline.depth; s++) yield* pipeline.ahead(s, ledger.version)
  const history: Array<Metrics.MetricRecord> = []
  const steps = Effect.gen(function* () {
    for (let step = ledger.completed; step < settings.steps; step++) history.push(yield* runStep(ctx, ledger, pipeline, step))
  })
  yield* steps.pipe(Effect.onExit((exit) => (Exit.isSuccess(exit) ? Effect.void : keepWork(ctx, ledger, Cause.hasInterruptsOnly(exit.cause) ? "interrupted" : "stopped by an error"))))
  yield* pipeline.close
  return history
}, Effect.scoped)

/** What every phase of a run reads: its settings, envs, folder and the services its rollouts need. */
interface RunContext {
  readonly settings: RunSettings
  /** the settings the steps train with (the loss aggregation resolved) */
  readonly resolved: RunSettings
  readonly source: Env.AnyEnv | Env.Mixture
  /** the prefix of every affinity key */
  readonly runId: string
  readonly files: RunFolder.Files
  /** the reward components the progress line shows (`Progress.headline`) */
  readonly headline: ReadonlyArray<string>
  /** the hack watch of the run's completions (`hackWatchEvery`) */
  readonly watch: HackWatch.HackWatch
  /** provides the envs' services, the reward permits and cache, and the model's context length */
  readonly provide: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
}

/** What the loop has done so far; the handler that keeps a stopped run's work reads it. */
interface Ledger {
  /** the policy version last published: the trainer's, and the one the sampler serves */
  version: number
  /** steps finished: trained, logged and (when due) checkpointed */
  completed: number
  /** the step of the newest checkpoint */
  savedAt: number
  /** inside a step's training, when the weights may be ahead of `completed` */
  training: boolean
}

/**
 * Opens a run: checks that the backend can give what the settings ask (reference log-probs
 * for a KL penalty), builds the envs' services (closed with the run's scope) and one reward
 * cache for the run, writes `config.json`, and finds the step and version to start from.
 */
const open = Effect.fn("Runner.open")(function* (settings: RunSettings, source: Env.AnyEnv | Env.Mixture, resume: boolean) {
  const trainer = yield* Trainer
  // A KL penalty needs reference log-probs: a backend that cannot give them stops the run now.
  if (!settings.sft) {
    yield* Reference.ensure(settings.klCoef ?? 0).pipe(
      Effect.mapError((e) => new RunError({ reason: e.reason === "InvalidInput" ? "Settings" : "Backend", message: e.message })),
    )
  }
  const permits = yield* Semaphore.make(settings.rewardConcurrency)
  const info = yield* trainer.info.pipe(Effect.mapError((e) => new RunError({ reason: "Backend", message: `info (${e.reason}): ${e.message}` })))
  const contextLength = info.maxSequenceLength > 0 ? info.maxSequenceLength : Number.MAX_SAFE_INTEGER
  const envServices: Context.Context<never> = yield* buildServices(source)
  // never shared with another run (Reward.cached)
  const rewardCache = Reward.makeCache()
  const { resolved, inForce: recorded } = inForce(settings, source)
  const ctx: RunContext = {
    settings,
    resolved,
    source,
    runId: `${Path.basename(settings.outDir)}-${settings.seed}`,
    files: RunFolder.paths(settings.outDir),
    headline: headline(recorded.rewardWeights),
    watch: HackWatch.make(),
    provide: (effect) =>
      effect.pipe(
        Effect.provideContext(envServices),
        Effect.provideService(Reward.RewardPermits, permits),
        Effect.provideService(Reward.RewardCache, rewardCache),
        Effect.provideService(ContextLength, contextLength),
      ),
  }
  const { start, version } = yield* prepare(recorded, resume)
  // Drop divergence rows of steps after the checkpoint: they are redone (all of them when none loaded).
  if (resume) yield* RunFolder.keepThrough(ctx.files.divergence, start).pipe(Effect.mapError(fail("RunFolder", undefined)))
  const ledger: Ledger = { version, completed: start, savedAt: start, training: false }
  return { ctx, ledger }
})

/** Scores the base policy on the held-out problems and writes it as the metrics row of step 0. */
const evaluateBase = Effect.fn("Runner.evaluateBase")(function* (ctx: RunContext, version: number) {
  const base = yield* ctx.provide(evaluate(ctx.settings, ctx.source, ctx.runId, 0, version))
  yield* RunFolder.appendMetrics(ctx.files, { [K.STEP]: 0, ...base }).pipe(Effect.mapError(fail("RunFolder", 0)))
  const all = K.envPrefix("test", K.ALL)
  const scores = Object.entries(base).filter(([k]) => k.startsWith(all) && k !== K.envKey("test", K.ALL, K.EnvStat.problems))
  const problems = Object.entries(base).filter(([k]) => k.endsWith(`/${K.EnvStat.problems}`)).reduce((n, [, v]) => n + v, 0)
  yield* Effect.logInfo(`base policy on the held-out set (${problems} problems): ${scores.map(([k, v]) => `${k.slice(all.length)} ${v.toFixed(3)}`).join(", ")}`)
})

/**
 * One step (0-based): collect its batch (async: start sampling the next step from the
 * current version), then train, evaluate, log and checkpoint it. Only the training can be
 * interrupted (a call the backend keeps failing may be retried for minutes): the run
 * then stops with the checkpoint it had, since the trainer's weights may be ahead of the
 * finished steps. Evaluation, logging and the checkpoint of a trained step always finish.
 */
const runStep = Effect.fn("Runner.step")(function* (ctx: RunContext, ledger: Ledger, pipeline: Pipeline.Pipeline<Sampler | Tokenizer>, step: number) {
  const started = performance.now()
  const batch = yield* pipeline.take(step, ledger.version)
  if (pipeline.depth > 0) yield* pipeline.ahead(step + pipeline.depth, ledger.version)
  return yield* Effect.uninterruptibleMask((restore) => finishStep(ctx, ledger, pipeline, batch, started, restore))
})

/** Lets an effect inside an uninterruptible region be interrupted again. */
type Restore = <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>

/** Trains a collected batch, then evaluates, logs and checkpoints its step; returns the step's metrics row. */
const finishStep = Effect.fn("Runner.finishStep")(function* (
  ctx: RunContext,
  ledger: Ledger,
  pipeline: Pipeline.Pipeline<Sampler | Tokenizer>,
  batch: Batch,
  started: number,
  restore: Restore,
) {
  const { settings } = ctx
  const step = batch.step
  ledger.training = true
  const versionBefore = ledger.version
  // Async: the next step's rollouts finish on the version they started from, so step s
  // always samples from version s - 1 exactly, whatever the timing (reproducible).
  const trained = yield* restore(train(ctx, batch, ledger.version, pipeline.settle))
  ledger.version = trained.version
  const metrics = stepMetrics(batch, trained, versionBefore, started)
  if (HackWatch.due(settings.hackWatchEvery, step)) Object.assign(metrics, yield* ctx.provide(ctx.watch.observe(batch, metrics)))
  if (settings.evalEvery > 0 && ((step + 1) % settings.evalEvery === 0 || step + 1 === settings.steps)) {
    Object.assign(metrics, yield* ctx.provide(evaluate(settings, ctx.source, ctx.runId, step + 1, ledger.version)))
  }
  yield* logStep(ctx, batch, trained, metrics)
  ledger.completed = step + 1
  const last = step + 1 === settings.steps
  if ((settings.saveEvery > 0 && (step + 1) % settings.saveEvery === 0) || last) yield* checkpoint(ctx, ledger, step + 1)
  if (K.envKey("test", K.ALL, K.EnvStat.total) in metrics || last || (step + 1) % 100 === 0) yield* Report.write(settings.outDir)
  yield* (yield* Progress).onStep({ step, steps: settings.steps, metrics, components: ctx.headline })
  ledger.training = false
  return metrics
})

/** What training a batch gives: its metrics, the version published, each sample's advantage, the divergence. */
interface Trained {
  readonly metrics: Metrics.MetricRecord
  readonly version: number
  readonly advantages: Array<Array<number>>
  readonly divergence: Train.Divergence | undefined
}

/**
 * advantages -> datums -> train (forward_backward, optim_step) -> publish. A step with no
 * datum to train on (every group a no-op) changes no weights and publishes nothing.
 * `beforePublish` runs after the optimizer step, before the new weights are published.
 */
const train = Effect.fn("Runner.train")(function* (ctx: RunContext, batch: Batch, version: number, beforePublish: Effect.Effect<void>) {
  const settings = ctx.resolved
  const started = performance.now()
  const { advantages, noOpGroups } = yield* Train.advantages(settings, batch)
  const datums = yield* Train.datums(settings, batch, advantages)
  const lr = Train.learningRate(settings, batch.step)
  // every call submitted before any is awaited (Train.ts)
  const optimizing = datums.data.length > 0 ? yield* Train.submitOptimize(settings, batch, datums, lr) : undefined
  const publishing = optimizing !== undefined ? yield* Train.submitPublish(batch.step, beforePublish) : undefined
  const optimized = optimizing !== undefined ? yield* optimizing : undefined
  const published = publishing !== undefined ? yield* publishing : version
  const metrics: Metrics.MetricRecord = {
    [K.ByGroup.noOp]: noOpGroups,
    [K.Train.datums]: datums.data.length,
    ...datums.klMetrics,
    ...optimized?.metrics,
    // the schedule's value for this step (the one the optimizer step used, when there was one)
    [K.Optim.learningRate]: lr,
    [K.Time.train]: (performance.now() - started) / 1000,
  }
  return { metrics, version: published, advantages, divergence: optimized?.divergence } satisfies Trained
})

/**
 * A step's metrics row: rewards and group shapes (with dynamic sampling, those of the
 * step's first draw, what the run would train on without it, so they compare with a run
 * without it), training, dynamic sampling, policy lag, times and throughput.
 */
const stepMetrics = (batch: Batch, trained: Trained, versionBefore: number, started: number): StepRow => {
  const scored = batch.dynamic?.drawn ?? batch.groups
  const sampledTokens = [...batch.groups, ...(batch.dynamic?.dropped ?? [])].reduce((s, g) => s + g.rollouts.reduce((t, r) => t + r.tokens.length, 0), 0)
  const lags = batch.groups.map((g) => versionBefore - g.version)
  const total = (performance.now() - started) / 1000
  return {
    [K.STEP]: batch.step + 1,
    ...scoreMetrics(scored, "train"),
    ...Metrics.groupFractions(scored.map((g) => g.scores.map((s) => (s.masked !== undefined ? undefined : s.value)))),
    ...trained.metrics,
    ...(batch.dynamic !== undefined
      ? {
        [K.Dynamic.dropped]: batch.dynamic.dropped.length,
        [K.Dynamic.refilled]: batch.dynamic.refilled,
        [K.Dynamic.rounds]: batch.dynamic.rounds,
        [K.Dynamic.groups]: batch.groups.length,
      }
      : {}),
    [K.PolicyVersion.lagMax]: Math.max(0, ...lags),
    [K.PolicyVersion.lagMean]: Metrics.mean(lags) ?? 0,
    [K.Async.staleGroups]: batch.staleGroups,
    [K.PolicyVersion.trainer]: trained.version,
    [K.Time.sample]: batch.sampleSeconds,
    [K.Time.total]: total,
    [K.Throughput.tokensPerS]: sampledTokens / Math.max(1e-9, total),
  }
}

/** A step's metrics row, as `metrics.jsonl` holds it: `step` first. */
type StepRow = Metrics.MetricRecord & { readonly step: number }

/** Appends the step's metrics row and, at the rollout-logging cadence, its rollouts and divergence rows. */
const logStep = Effect.fn("Runner.log")(function* (ctx: RunContext, batch: Batch, trained: Trained, metrics: StepRow) {
  const { settings } = ctx
  const step = batch.step
  yield* RunFolder.appendMetrics(ctx.files, metrics).pipe(Effect.mapError(fail("RunFolder", step)))
  if (!(settings.logRolloutsEvery > 0 && (step === 0 || (step + 1) % settings.logRolloutsEvery === 0 || step + 1 === settings.steps))) return
  const logged = [...batch.groups.map((g, gi) => ({ g, advantages: trained.advantages[gi] })), ...(batch.dynamic?.dropped ?? []).map((g) => ({ g, advantages: undefined }))]
  const rows = logged.flatMap(({ advantages, g }) =>
    sampleRows(g).map((row, si): RunFolder.RolloutRow => ({
      step: step + 1,
      ...row,
      problem: g.task.problem,
      advantage: advantages?.[si] ?? 0,
      // dynamic sampling dropped the group (no signal): it did not train
      ...(advantages === undefined ? { dropped: true } : {}),
    }))
  )
  yield* RunFolder.appendRollouts(ctx.files, rows).pipe(Effect.mapError(fail("RunFolder", step)))
  const d = trained.divergence
  if (d !== undefined) {
    yield* RunFolder.appendDivergence(ctx.files, { step: step + 1, edges: Metrics.DIVERGENCE_EDGES, counts: d.counts, tokens: d.tokens, worst: d.worst }).pipe(
      Effect.mapError(fail("RunFolder", step)),
    )
  }
})

/**
 * Saves the trainer's state as checkpoint `step-<step>` and records it in
 * `checkpoints.jsonl`. A checkpoint is complete only once its state file exists; its row
 * is written after it. (The CLI gives the embedded backend `<run folder>/state` as its
 * state folder.)
 */
const checkpoint = Effect.fn("Runner.checkpoint")(function* (ctx: RunContext, ledger: Ledger, step: number) {
  const saved = yield* (yield* Trainer).saveState(`step-${step}`).pipe(
    Effect.mapError((e) => new RunError({ reason: "Backend", step, message: `save_state (${e.reason}): ${e.message}` })),
  )
  yield* RunFolder.appendCheckpoint(ctx.files, { step, name: `step-${step}`, path: saved.path, time: new Date().toISOString() }).pipe(
    Effect.mapError(fail("RunFolder", step)),
  )
  ledger.savedAt = step
})

/**
 * Interrupted (Ctrl-C) or stopped by an error (an env's step that throws, say): keeps the
 * finished steps as a checkpoint that --resume continues from. (Not after a failure inside
 * a step's training: the weights may be ahead of `completed`.)
 */
const keepWork = (ctx: RunContext, ledger: Ledger, how: string) =>
  ledger.completed > ledger.savedAt && !ledger.training
    ? checkpoint(ctx, ledger, ledger.completed).pipe(
      Effect.andThen(Effect.logInfo(`${how} after step ${ledger.completed}: saved checkpoint step-${ledger.completed}; continue with --resume ${ctx.settings.outDir}`)),
      Effect.catch((e) => Effect.logError(`${how} after step ${ledger.completed}; the checkpoint could not be saved: ${e.message}`)),
    )
    : Effect.logInfo(`${how} after step ${ledger.completed}; the last checkpoint is step-${ledger.savedAt}`)

/**
 * The steps of a run: each started (its batch taken, its training calls submitted), then
 * completed (its results read, evaluated, logged, checkpointed). What every phase reads
 * is the run's context; what the loop has done so far is its ledger.
 *
 * @since 0.1.0
 */
import { Clock, Duration, Effect, Ref } from "effect"
import type * as Env from "../vocabulary/Env.ts"
import * as K from "../metrics/MetricKeys.ts"
import * as Metrics from "../metrics/Metrics.ts"
import * as RunFolder from "../folder/RunFolder.ts"
import type { Sampler } from "../services/Sampler.ts"
import type { Tokenizer } from "../services/Tokenizer.ts"
import { Trainer } from "../services/Trainer.ts"
import { type Batch, collect, sampleRows } from "./Collect.ts"
import { evaluate, scoreMetrics } from "./Evaluate.ts"
import { RunObserver } from "./Observer.ts"
import * as HackWatch from "./HackWatch.ts"
import * as MaskedWatch from "./MaskedWatch.ts"
import type * as Pipeline from "./Pipeline.ts"
import { Progress } from "./Progress.ts"
import * as RunSpans from "./RunSpans.ts"
import { fail, RunError, type RunSettings } from "./Settings.ts"
import * as Stream from "./Stream.ts"
import * as Train from "./Train.ts"

/** What every phase of a run reads: its settings, envs, folder and the services its rollouts need. @since 0.1.0 @category models */
export interface RunContext {
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
  /** whether the trainer queues work (`Trainer.submit`): a step's results may then be read after the next step's calls are submitted */
  readonly queuesWork: boolean
  /** provides the envs' services, the reward permits and cache, and the model's context length */
  readonly provide: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
}

/** What the loop has done so far. @since 0.1.0 @category models */
export interface LedgerState {
  /** the policy version last published: the trainer's, and the one the sampler serves */
  readonly version: number
  /** steps finished: trained, logged and (when due) checkpointed */
  readonly completed: number
  /** the step of the newest checkpoint */
  readonly savedAt: number
  /** steps whose training was submitted and not completed: the weights may be ahead of `completed` */
  readonly training: number
  /** the steps that masked more than `maxMasked` of their samples (`MaskedWatch.ts`) */
  readonly masked: MaskedWatch.Watch
}

/**
 * The loop's ledger, in a `Ref`: the steps update it, and the handler that keeps a stopped
 * run's work reads it.
 * @since 0.1.0 @category models
 */
export type Ledger = Ref.Ref<LedgerState>

/** Updates one field of the ledger. */
const note = (ledger: Ledger, change: Partial<LedgerState> | ((l: LedgerState) => Partial<LedgerState>)) =>
  Ref.update(ledger, (l) => ({ ...l, ...(typeof change === "function" ? change(l) : change) }))

/** The default of `maxMasked`. @since 0.1.0 @category constants */
export const DEFAULT_MAX_MASKED = 0.5

/** Lets an effect inside an uninterruptible region be interrupted again. */
type Restore = <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>

/** What training a batch gives: its metrics, the version published, each sample's advantage, the divergence. */
interface Trained {
  readonly metrics: Metrics.MetricRecord
  readonly version: number
  readonly advantages: Array<Array<number>>
  readonly divergence: Train.Divergence | undefined
}

/** A step whose training calls are submitted and whose results have not been read. */
interface Submitted {
  readonly batch: Batch
  /** when the step started (performance.now()) */
  readonly started: number
  /** the trainer's version before the step trained */
  readonly versionBefore: number
  /** the version once it has trained: one more when it trains */
  readonly versionAfter: number
  /** awaits the version its publication serves (the version before when it publishes nothing) */
  readonly published: Effect.Effect<number, RunError>
  /** awaits its training calls and gives the step's training metrics */
  readonly trained: Effect.Effect<Trained, RunError>
}

/**
 * Whether step `step`'s results may be read after the next step's training calls are
 * submitted: in async mode on a trainer that queues work (`Trainer.submit`), so that
 * the next step's calls reach the service before it starts its next cycle. Not when the
 * step evaluates or checkpoints (those read the trainer as the step left it), nor for
 * the last step.
 */
/** Whether step `step` (0-based) ends with an evaluation: every `evalEvery` steps, and the last. */
const evaluates = (settings: RunSettings, step: number) => settings.evalEvery > 0 && ((step + 1) % settings.evalEvery === 0 || step + 1 === settings.steps)

/** Whether step `step` (0-based) ends with a checkpoint: every `saveEvery` steps, and the last. */
const checkpoints = (settings: RunSettings, step: number) => (settings.saveEvery > 0 && (step + 1) % settings.saveEvery === 0) || step + 1 === settings.steps

const overlaps = (ctx: RunContext, step: number) => {
  const { settings } = ctx
  return settings.async && ctx.queuesWork && !evaluates(settings, step) && !checkpoints(settings, step)
}

/**
 * The steps from `ledger.completed` on. Each step is started (its batch taken, its
 * training calls submitted), then the step before it, when its results were left to
 * read, is completed, then the step itself unless it `overlaps`.
 * @since 0.1.0 @category running
 */
export const runSteps = Effect.fn("Steps.runSteps")(function* (ctx: RunContext, ledger: Ledger, pipeline: Pipeline.Pipeline<Sampler | Tokenizer | Trainer>, history: Array<Metrics.MetricRecord>) {
  let inFlight: Submitted | undefined
  for (let step = (yield* Ref.get(ledger)).completed; step < ctx.settings.steps; step++) {
    const previous = inFlight
    const submitted = yield* startStep(ctx, ledger, pipeline, step, previous).pipe(RunSpans.atStep(step + 1))
    inFlight = undefined
    if (previous !== undefined) history.push(yield* Effect.uninterruptibleMask((restore) => completeStep(ctx, ledger, previous, restore)).pipe(RunSpans.atStep(previous.batch.step + 1)))
    if (overlaps(ctx, step)) inFlight = submitted
    else history.push(yield* Effect.uninterruptibleMask((restore) => completeStep(ctx, ledger, submitted, restore)).pipe(RunSpans.atStep(step + 1)))
  }
  yield* maskedVerdict(ctx, ledger)
})

/**
 * Starts step `step` (0-based): takes its batch, starts sampling the step `depth` steps
 * ahead (async), and submits its training calls. With the step before still in flight,
 * the sampling ahead starts once that step's publication is done (it samples from it),
 * after this step's `forward_backward` and `optim_step` are submitted.
 */
const startStep = Effect.fn("Steps.startStep")(function* (
  ctx: RunContext,
  ledger: Ledger,
  pipeline: Pipeline.Pipeline<Sampler | Tokenizer | Trainer>,
  step: number,
  previous: Submitted | undefined,
) {
  const started = performance.now()
  const versionBefore = previous?.versionAfter ?? (yield* Ref.get(ledger)).version
  const aheadFrom = (version: number) => (pipeline.depth > 0 ? pipeline.ahead(step + pipeline.depth, version) : Effect.void)
  const stream = ctx.resolved.streamMinibatches
  if (stream !== undefined) {
    // sync only (Settings.check): the step's groups train in minibatches while it is sampled
    const lr = Train.learningRate(ctx.resolved, step)
    const streamer = yield* Stream.make(ctx.resolved, stream, step, lr)
    yield* note(ledger, (l) => ({ training: l.training + 1 }))
    const batch = yield* ctx.provide(collect(ctx.settings, ctx.source, ctx.runId, step, versionBefore, streamer.onGroup))
    const optimizing = yield* streamed(streamer, batch)
    return yield* submitTraining(ctx, batch, versionBefore, { afterOptimize: Effect.void, beforePublish: pipeline.settle }, started, optimizing)
  }
  const batch = yield* pipeline.take(step, versionBefore, previous === undefined ? Effect.void : Effect.asVoid(previous.published))
  if (previous === undefined) yield* aheadFrom(versionBefore)
  const afterOptimize = previous === undefined ? Effect.void : Effect.flatMap(previous.published, aheadFrom)
  yield* note(ledger, (l) => ({ training: l.training + 1 }))
  const optimizing = yield* submitWhole(ctx, batch)
  // async: the rollouts sampled ahead finish on the version they started from (settle), so
  // step s always samples from version s - depth exactly, whatever the timing (reproducible)
  return yield* submitTraining(ctx, batch, versionBefore, { afterOptimize, beforePublish: pipeline.settle }, started, optimizing)
})

/** A step's training calls, submitted: how many optimizer steps, and what awaiting them gives. */
interface Optimizing {
  readonly optimSteps: number
  readonly result: Effect.Effect<{
    readonly advantages: Array<Array<number>>
    readonly noOpGroups: number
    readonly datums: number
    readonly klMetrics: Metrics.MetricRecord
    readonly optimized: Train.Optimized | undefined
  }, RunError>
  /** when the training was submitted (performance.now()) */
  readonly since: number
}

/** advantages -> datums -> submit forward_backward and optim_step (Train.ts), for the batch as a whole. */
const submitWhole = Effect.fnUntraced(function* (ctx: RunContext, batch: Batch) {
  const settings = ctx.resolved
  const since = performance.now()
  const { advantages, noOpGroups } = yield* Train.advantages(settings, batch)
  const datums = yield* Train.datums(settings, batch, advantages)
  const lr = Train.learningRate(settings, batch.step)
  const optimizing = datums.data.length > 0 ? yield* Train.submitOptimize(settings, batch, datums, lr) : undefined
  const result = Effect.map(optimizing ?? Effect.succeed(undefined), (optimized) => ({ advantages, noOpGroups, datums: datums.data.length, klMetrics: datums.klMetrics, optimized }))
  return { optimSteps: optimizing === undefined ? 0 : 1, result, since } satisfies Optimizing
})

/** The rest of a streamed step's training submitted (its last minibatches, its optimizer step). */
const streamed = Effect.fnUntraced(function* (streamer: Stream.Streamer, batch: Batch) {
  const since = performance.now()
  const pending = yield* streamer.finish(batch)
  const result = Effect.map(pending, (s) => ({ ...s, klMetrics: {} }))
  return { optimSteps: streamer.optimSteps(), result, since } satisfies Optimizing
})

/**
 * After a step's `forward_backward` and `optim_step` are submitted (`optimizing`):
 * `afterOptimize` -> `beforePublish` -> submit the publication. A step with no datum to
 * train on (every group a no-op) changes no weights and publishes nothing. The training calls can be
 * interrupted (a call the backend keeps failing may be retried for minutes): the run then
 * stops with the checkpoint it had, since the trainer's weights may be ahead of the
 * finished steps.
 */
const submitTraining = Effect.fn("Steps.submitTraining")(function* (
  ctx: RunContext,
  batch: Batch,
  versionBefore: number,
  hooks: { readonly afterOptimize: Effect.Effect<void, RunError, Sampler | Tokenizer | Trainer>; readonly beforePublish: Effect.Effect<void, RunError, Sampler | Tokenizer | Trainer> },
  started: number,
  optimizing: Optimizing,
) {
  yield* hooks.afterOptimize
  const publishing = optimizing.optimSteps > 0 ? yield* Train.submitPublish(batch.step, hooks.beforePublish) : undefined
  // awaited once however often it is read (the next step's sampling waits on it, then this step's completion)
  const published = publishing !== undefined ? yield* Effect.cached(publishing) : Effect.succeed(versionBefore)
  const trained = Effect.gen(function* () {
    const r = yield* optimizing.result
    const metrics: Metrics.MetricRecord = {
      [K.ByGroup.noOp]: r.noOpGroups,
      [K.Train.datums]: r.datums,
      ...r.klMetrics,
      ...r.optimized?.metrics,
      // the schedule's value for this step (the one the optimizer step used, when there was one)
      [K.Optim.learningRate]: Train.learningRate(ctx.resolved, batch.step),
      [K.Time.train]: (performance.now() - optimizing.since) / 1000,
    }
    return { metrics, version: yield* published, advantages: r.advantages, divergence: r.optimized?.divergence } satisfies Trained
  })
  return { batch, started, versionBefore, versionAfter: versionBefore + optimizing.optimSteps, published, trained } satisfies Submitted
})

/** Reads a started step's training results, then evaluates, logs and checkpoints it; returns the step's metrics row. */
const completeStep = Effect.fn("Steps.completeStep")(function* (ctx: RunContext, ledger: Ledger, submitted: Submitted, restore: Restore) {
  const { settings } = ctx
  const { batch } = submitted
  const step = batch.step
  const trained = yield* restore(submitted.trained)
  if (trained.version !== submitted.versionAfter) {
    yield* Effect.logWarning(`step ${step + 1}: the trainer serves policy version ${trained.version}, where one version per optimizer step makes ${submitted.versionAfter}`)
  }
  yield* note(ledger, { version: trained.version })
  const metrics = stepMetrics(batch, trained, submitted.versionBefore, submitted.started)
  if (HackWatch.due(settings.hackWatchEvery, step)) Object.assign(metrics, yield* ctx.provide(ctx.watch.observe(batch, metrics)))
  if (evaluates(settings, step)) {
    Object.assign(metrics, yield* ctx.provide(evaluate(settings, ctx.source, ctx.runId, step + 1, trained.version)))
  }
  yield* logStep(ctx, batch, trained, metrics)
  yield* note(ledger, { completed: step + 1 })
  if (checkpoints(settings, step)) yield* checkpoint(ctx, ledger, step + 1)
  yield* ((yield* RunObserver).onStepEnd?.({ step: step + 1, steps: settings.steps, evaluated: K.envKey("test", K.ALL, K.EnvStat.total) in metrics }) ?? Effect.void)
  yield* (yield* Progress).onStep({ step, steps: settings.steps, metrics, components: ctx.headline })
  yield* note(ledger, (l) => ({ training: l.training - 1 }))
  yield* watchMasked(ctx, ledger, batch, restore)
  return metrics
})

/**
 * After a step that masked more than `maxMasked` of its samples: waits before the next
 * step, or stops the run once such steps have lasted (`MaskedWatch.ts`). An outage (a
 * judge, a tool server) that does not end would otherwise train on nothing for the rest
 * of the run; one of a few seconds is waited out. The error names the most common reason.
 */
const watchMasked = Effect.fnUntraced(function* (ctx: RunContext, ledger: Ledger, batch: Batch, restore: Restore) {
  const bound = ctx.settings.maxMasked ?? DEFAULT_MAX_MASKED
  const scores = batch.groups.flatMap((g) => g.scores)
  const masked = scores.flatMap((s) => (s.masked === undefined ? [] : [s.masked]))
  const patience = yield* MaskedWatch.MaskedPatience
  const now = yield* Clock.currentTimeMillis
  const { decision, watch } = MaskedWatch.next((yield* Ref.get(ledger)).masked, { masked, samples: scores.length, bound, now }, patience)
  yield* note(ledger, { masked: watch })
  if (decision._tag === "Go") return
  const { count, reason } = MaskedWatch.mostCommon(watch.reasons)
  if (decision._tag === "Stop") {
    return yield* new RunError({
      reason: "Env",
      step: batch.step,
      message:
        `${watch.streak} steps in a row, over ${Math.round(decision.seconds)} s, masked more than ${bound} of their samples (step ${batch.step + 1}: ${masked.length} of ${scores.length}); ` +
        `the most common reason (${count}): ${reason}. Fix the cause, then continue with --resume ${ctx.settings.outDir} (--max-masked 1 never stops)`,
    })
  }
  if (batch.step + 1 >= ctx.settings.steps) return
  const lasting = Duration.format(Duration.fromInputUnsafe(patience.lasting))
  yield* Effect.logWarning(
    `step ${batch.step + 1}: ${masked.length} of ${scores.length} samples masked, ${watch.streak} step${watch.streak === 1 ? "" : "s"} in a row over --max-masked ${bound} ` +
      `(the most common reason: ${reason}); waiting ${decision.millis / 1000} s before the next step (the run stops once such steps last ${patience.steps} steps and ${lasting})`,
  )
  yield* restore(Effect.sleep(decision.millis))
})

/** The run's end: a warning when some steps masked more than `maxMasked` of their samples, a failure when most did. */
const maskedVerdict = Effect.fnUntraced(function* (ctx: RunContext, ledger: Ledger) {
  const verdict = MaskedWatch.verdict((yield* Ref.get(ledger)).masked, ctx.settings.maxMasked ?? DEFAULT_MAX_MASKED, ctx.settings.outDir)
  if (verdict === undefined) return
  if (verdict._tag === "Warn") return yield* Effect.logWarning(verdict.message)
  return yield* new RunError({ reason: "Env", message: verdict.message })
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
const logStep = Effect.fn("Steps.logStep")(function* (ctx: RunContext, batch: Batch, trained: Trained, metrics: StepRow) {
  const { settings } = ctx
  const step = batch.step
  yield* RunFolder.appendMetrics(ctx.files, metrics).pipe(Effect.mapError(fail("RunFolder", step)))
  const observer = yield* RunObserver
  yield* observer.onMetrics(metrics)
  // the samples are gathered only for an observer that reads them
  if (observer.onSamples !== undefined) yield* observer.onSamples(step + 1, batch.groups.flatMap(sampleRows))
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
 * @since 0.1.0 @category running
 */
export const checkpoint = Effect.fn("Steps.checkpoint")(function* (ctx: RunContext, ledger: Ledger, step: number) {
  const saved = yield* (yield* Trainer).saveState(`step-${step}`).pipe(
    Effect.mapError((e) => new RunError({ reason: "Backend", step, message: `save_state (${e.reason}): ${e.message}` })),
  )
  yield* RunFolder.appendCheckpoint(ctx.files, { step, name: `step-${step}`, path: saved.path, time: new Date().toISOString() }).pipe(
    Effect.mapError(fail("RunFolder", step)),
  )
  yield* note(ledger, { savedAt: step })
})

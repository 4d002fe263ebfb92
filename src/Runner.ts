/**
 * The RL loop, over the `Trainer`, `Sampler` and `Tokenizer` services.
 *
 * One step: draw `groups` problems -> sample `groupSize` completions per problem (one
 * affinity key per group, pinned to the last published version) -> score (bounded
 * concurrency, failure policies) -> advantages -> Datums -> `forwardBackward` in
 * micro-batches -> `optimStep` -> publish -> the next step samples from the new version.
 *
 * In async mode the rollouts of step s + k (k = `maxStepsOffPolicy`, default 1) are
 * sampled while step s trains; each group remembers the version it was sampled from, and
 * groups more than `maxLag` versions old are requeued (resampled) or dropped. On a
 * trainer that queues work, a step's training calls are submitted back to back, and in
 * async mode the next step's are submitted before this step's results are read.
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
 * checks, the rollout pipeline (sync or async), collection, the steps (started, then
 * completed), the training phases, the hack watch, evaluation, progress, and the start
 * (or resume) of a run folder.
 *
 * @since 0.1.0
 */
import * as Path from "node:path"
import { Cause, Context, Effect, Exit, Ref, Semaphore } from "effect"
import type * as Env from "./vocabulary/Env.ts"
import * as K from "./metrics/MetricKeys.ts"
import * as Metrics from "./metrics/Metrics.ts"
import * as ReferencePenalty from "./loss/ReferencePenalty.ts"
import * as Reward from "./vocabulary/Reward.ts"
import * as RunFolder from "./folder/RunFolder.ts"
import { Trainer } from "./services/Trainer.ts"
import { collect, sampleGroup } from "./run/Collect.ts"
import { evaluate } from "./run/Evaluate.ts"
import * as HackWatch from "./run/HackWatch.ts"
import * as Pipeline from "./run/Pipeline.ts"
import { headline } from "./run/Progress.ts"
import { check, fail, inForce, klCoefOf, RunError, type RunSettings } from "./run/Settings.ts"
import { RunObserver } from "./run/Observer.ts"
import * as RunSpans from "./run/RunSpans.ts"
import { ContextLength } from "./run/Rollout.ts"
import { buildServices } from "./run/Services.ts"
import { checkEpisodes } from "./run/EpisodeChecks.ts"
import { prepare } from "./run/Start.ts"
import { applyTemplateArgs } from "./tokenizers/TemplateArgs.ts"
import * as MaskedWatch from "./run/MaskedWatch.ts"
import { checkpoint, type Ledger, type RunContext, runSteps } from "./run/Steps.ts"

export { aggregationOf, defaults, DynamicSampling, envDefaults, klCoefOf, LossAggregation, LrSchedule, Overlong, RecipeName, rewardWeightsOf, RunError, RunSettings, Teacher } from "./run/Settings.ts"
export { RECIPES, recipeFlags } from "./run/Recipes.ts"
export { learningRate } from "./run/Train.ts"
/**
 * A run folder's `divergence.jsonl`: one row per rollout-logging step, `{ step, edges,
 * counts, tokens, worst }`, with the histogram of sampler - trainer log-prob differences
 * of the trained tokens (`counts` per bin of `edges`, see `Metrics.DIVERGENCE_EDGES`) and
 * the worst-divergent tokens (group, sample, problem key, position after the prompt,
 * token id and text, sampler and trainer log-probs).
 * @since 0.1.0 @category models
 */
export const divergencePath = (dir: string): string => RunFolder.paths(dir).divergence
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
  const begun = yield* Ref.get(ledger)
  if (settings.evalEvery > 0 && begun.completed === 0) yield* evaluateBase(ctx, begun.version).pipe(RunSpans.atStep(0))
  const pipeline = yield* Pipeline.make({
    settings,
    collect: (step, version) => ctx.provide(collect(settings, source, ctx.runId, step, version)),
    resample: (step, g, version) =>
      ctx.provide(sampleGroup(settings, ctx.runId, step, g.index, version, g.task, { split: "train", numSamples: settings.groupSize })),
  })
  // async: the first k steps are sampled from the version the run starts from
  for (let s = begun.completed; s < begun.completed + pipeline.depth; s++) yield* pipeline.ahead(s, begun.version)
  const history: Array<Metrics.MetricRecord> = []
  yield* runSteps(ctx, ledger, pipeline, history).pipe(Effect.onExit((exit) => (Exit.isSuccess(exit) ? Effect.void : keepWork(ctx, ledger, Cause.hasInterruptsOnly(exit.cause) ? "interrupted" : "stopped by an error"))))
  return history
  // every prompt of the run is rendered with its chat-template arguments
}, Effect.scoped, (effect, settings) => applyTemplateArgs(settings.templateArgs)(effect))


/**
 * Opens a run: checks that the backend can give what the settings ask (reference log-probs
 * for a KL penalty), builds the envs' services (closed with the run's scope) and one reward
 * cache for the run, writes `config.json`, and finds the step and version to start from.
 */
const open = Effect.fn("Runner.open")(function* (settings: RunSettings, source: Env.AnyEnv | Env.Mixture, resume: boolean) {
  const trainer = yield* Trainer
  // A KL penalty needs reference log-probs: a backend that cannot give them stops the run now.
  if (!settings.sft) {
    yield* ReferencePenalty.ensure(settings.dpo !== undefined ? 1 : klCoefOf(settings), settings.dpo !== undefined ? "--dpo" : settings.teacher !== undefined ? "--teacher" : "--kl-coef").pipe(
      Effect.mapError((e) => new RunError({ reason: e.reason === "InvalidInput" ? "Settings" : "Backend", message: e.message, cause: e })),
    )
    yield* ReferencePenalty.ensure(settings.klLossCoef ?? 0, "--kl-loss-coef").pipe(
      Effect.mapError((e) => new RunError({ reason: e.reason === "InvalidInput" ? "Settings" : "Backend", message: e.message, cause: e })),
    )
  }
  const permits = yield* Semaphore.make(settings.rewardConcurrency)
  const info = yield* trainer.info.pipe(Effect.mapError((e) => new RunError({ reason: "Backend", message: `info (${e.reason}): ${e.message}`, cause: e })))
  const contextLength = info.maxSequenceLength > 0 ? info.maxSequenceLength : Number.MAX_SAFE_INTEGER
  const envServices: Context.Context<never> = yield* buildServices(source)
  yield* checkEpisodes(source, envServices)
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
    queuesWork: trainer.submit !== undefined,
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
  const ledger: Ledger = yield* Ref.make({ version, completed: start, savedAt: start, training: 0, masked: MaskedWatch.empty })
  return { ctx, ledger }
})

/** Scores the starting policy (the base, or the weights of --init-from) on the held-out problems and writes it as the metrics row of step 0. */
const evaluateBase = Effect.fn("Runner.evaluateBase")(function* (ctx: RunContext, version: number) {
  const base = yield* ctx.provide(evaluate(ctx.settings, ctx.source, ctx.runId, 0, version))
  yield* RunFolder.appendMetrics(ctx.files, { [K.STEP]: 0, ...base }).pipe(Effect.mapError(fail("RunFolder", 0)))
  yield* (yield* RunObserver).onMetrics({ ...base, step: 0 })
  const all = K.envPrefix("test", K.ALL)
  const scores = Object.entries(base).filter(([k]) => k.startsWith(all) && k !== K.envKey("test", K.ALL, K.EnvStat.problems))
  const problems = Object.entries(base).filter(([k]) => k.endsWith(`/${K.EnvStat.problems}`)).reduce((n, [, v]) => n + v, 0)
  // a run started from another run's weights does not begin at the base policy
  const policy = ctx.settings.initFrom !== undefined ? `the policy of ${ctx.settings.initFrom} (--init-from)` : "base policy"
  yield* Effect.logInfo(`${policy} on the held-out set (${problems} problems): ${scores.map(([k, v]) => `${k.slice(all.length)} ${v.toFixed(3)}`).join(", ")}`)
})


/**
 * Interrupted (Ctrl-C) or stopped by an error (an env's step that throws, say): keeps the
 * finished steps as a checkpoint that --resume continues from. (Not after a failure inside
 * a step's training: the weights may be ahead of `completed`.)
 */
const keepWork = (ctx: RunContext, ledger: Ledger, how: string) =>
  Effect.flatMap(Ref.get(ledger), (l) =>
    l.completed > l.savedAt && l.training === 0
      ? checkpoint(ctx, ledger, l.completed).pipe(
        Effect.andThen(Effect.logInfo(`${how} after step ${l.completed}: saved checkpoint step-${l.completed}; continue with --resume ${ctx.settings.outDir}`)),
        Effect.catch((e) => Effect.logError(`${how} after step ${l.completed}; the checkpoint could not be saved: ${e.message}`)),
      )
      : Effect.logInfo(`${how} after step ${l.completed}; the last checkpoint is step-${l.savedAt}`))

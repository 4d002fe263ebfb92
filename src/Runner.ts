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
 * The pieces live in `src/run/`: settings, progress, collection, training, evaluation,
 * and the start (or resume) of a run folder.
 *
 * @since 0.1.0
 */
import * as Path from "node:path"
import { Cause, Effect, Exit, Fiber, Semaphore } from "effect"
import * as Env from "./Env.ts"
import * as Loss from "./Loss.ts"
import * as Metrics from "./Metrics.ts"
import * as Reference from "./Reference.ts"
import * as Report from "./Report.ts"
import * as Reward from "./Reward.ts"
import * as RunLog from "./RunLog.ts"
import { Trainer } from "./Trainer.ts"
import { type Batch, collect, sampleGroup, sampleRows } from "./run/Collect.ts"
import { evaluate, scoreMetrics } from "./run/Evaluate.ts"
import { Progress } from "./run/Progress.ts"
import { fail, RunError, type RunSettings } from "./run/Settings.ts"
import { ContextLength } from "./run/Rollout.ts"
import { buildServices } from "./run/Services.ts"
import { prepare } from "./run/Start.ts"
import { aggregationOf, train } from "./run/Train.ts"

export { defaults, DynamicSampling, envDefaults, LossAggregation, LrSchedule, RunError, RunSettings } from "./run/Settings.ts"
export { aggregationOf, learningRate } from "./run/Train.ts"
export { divergencePath } from "./Report.ts"
export { formatStep, Progress, type StepSummary } from "./run/Progress.ts"
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
  // One sample per group has nothing to be compared with: every advantage would be 0.
  if (!settings.sft && settings.groupSize < 2 && (settings.advantage === "group_std" || settings.advantage === "mean_only")) {
    return yield* new RunError({
      reason: "Settings",
      message: `--group-size ${settings.groupSize} trains nothing with --advantage ${settings.advantage}: a group's advantages are relative to its own mean, ` +
        "so a group of one is always a no-op. Use --group-size 2 or more, or --advantage batch_std or none",
    })
  }
  const schedule = settings.lrSchedule
  if (schedule?.minLr !== undefined && schedule.kind !== "constant" && schedule.minLr > settings.adam.learningRate) {
    return yield* new RunError({
      reason: "Settings",
      message: `--min-lr ${schedule.minLr} is above --lr ${settings.adam.learningRate}: the ${schedule.kind} schedule decays from --lr down to --min-lr; give a --min-lr of at most ${settings.adam.learningRate}`,
    })
  }
  const aggregationGiven = settings.lossAggregation
  if (aggregationGiven !== undefined && aggregationGiven.kind !== "constant" && aggregationGiven.constant !== undefined) {
    return yield* new RunError({
      reason: "Settings",
      message: `--loss-constant ${aggregationGiven.constant} is only used by --loss-aggregation constant (this run has --loss-aggregation ${aggregationGiven.kind}): drop it, or use --loss-aggregation constant`,
    })
  }
  if (settings.dynamicSampling !== undefined && !settings.sft && (settings.advantage === "batch_std" || settings.advantage === "none")) {
    yield* Effect.logWarning(
      `--dynamic-sampling drops groups whose rewards are all equal, but with --advantage ${settings.advantage} such a group still has non-zero advantages (they are not relative to the group): it drops groups that would have trained`,
    )
  }
  if (settings.sft && settings.dynamicSampling !== undefined) {
    return yield* new RunError({
      reason: "Settings",
      message: "--dynamic-sampling drops groups whose rewards are all equal, but --sft trains on reference answers without rewards: use one or the other",
    })
  }
  // A KL penalty needs reference log-probs: a backend that cannot give them stops the run now.
  if (!settings.sft) {
    yield* Reference.ensure(settings.klCoef ?? 0).pipe(
      Effect.mapError((e) => new RunError({ reason: e.reason === "InvalidInput" ? "Settings" : "Backend", message: e.message })),
    )
  }
  const runId = `${Path.basename(settings.outDir)}-${settings.seed}`
  const permits = yield* Semaphore.make(settings.rewardConcurrency)
  const info = yield* trainer.info.pipe(Effect.mapError((e) => new RunError({ reason: "Backend", message: `info (${e.reason}): ${e.message}` })))
  const contextLength = info.maxSequenceLength > 0 ? info.maxSequenceLength : Number.MAX_SAFE_INTEGER
  // The envs' services (judges, sandboxes, ...): built once for the run, closed when it
  // ends, fails or is interrupted (the run's scope).
  const envServices = yield* buildServices(source)
  // one reward cache for the whole run (Reward.cached), never shared with another run
  const rewardCache = Reward.makeCache()
  const withPermits = <A, E, R>(eff: Effect.Effect<A, E, R>) =>
    eff.pipe(
      Effect.provideContext(envServices),
      Effect.provideService(Reward.RewardPermits, permits),
      Effect.provideService(Reward.RewardCache, rewardCache),
      Effect.provideService(ContextLength, contextLength),
    )

  // config.json records the sampling settings in force: a single env's own override the defaults.
  const members = Env.members(source)
  // each component's weight; in a mixture, a component weighted in any env counts as weighted
  let weights: Record<string, number> | undefined
  for (const [env] of members) {
    for (const [name, w] of Object.entries(Reward.weights(env.reward) ?? {})) {
      weights ??= {}
      if (weights[name] === undefined || weights[name] === 0) weights[name] = w
    }
  }
  // Dr. GRPO's divisor, when not given: samples per step x the most tokens a sample may have
  const maxTokens = Math.max(...members.map(([env]) => ({ ...settings.sampling, ...env.sampling, ...settings.samplingOverrides }).maxTokens))
  const aggregation = aggregationOf(settings, maxTokens)
  const resolved: RunSettings = settings.lossAggregation === undefined ? settings : { ...settings, lossAggregation: aggregation }
  const inForce: RunSettings = {
    ...(members.length === 1 ? { ...resolved, sampling: { ...resolved.sampling, ...members[0]![0].sampling, ...resolved.samplingOverrides } } : resolved),
    ...(weights !== undefined ? { rewardWeights: weights } : {}),
  }
  let { start, version } = yield* prepare(inForce, options.resume ?? false)
  // Drop divergence rows of steps after the checkpoint: they are redone (all of them when none loaded).
  const divergenceFile = Report.divergencePath(settings.outDir)
  if (options.resume === true) yield* RunLog.filterJsonl(divergenceFile, (row) => start > 0 && Number(row["step"]) <= start).pipe(Effect.mapError(fail("RunFolder", undefined)))
  let trainerVersion = version
  const lastMetrics: Array<Metrics.MetricRecord> = []

  // The base policy's held-out score, as row `step: 0`, so every curve has its starting point.
  if (settings.evalEvery > 0 && start === 0) {
    const base = yield* withPermits(evaluate(settings, source, runId, 0, version))
    yield* RunLog.appendJsonl(files.metrics, [{ step: 0, ...base }]).pipe(Effect.mapError(fail("RunFolder", 0)))
    const scores = Object.entries(base).filter(([k]) => k.startsWith("test/env/all/") && k !== "test/env/all/problems")
    const problems = Object.entries(base).filter(([k]) => k.endsWith("/problems")).reduce((n, [, v]) => n + v, 0)
    yield* Effect.logInfo(`base policy on the held-out set (${problems} problems): ${scores.map(([k, v]) => `${k.slice(13)} ${v.toFixed(3)}`).join(", ")}`)
  }

  const collectStep = (step: number, at: number) => withPermits(collect(settings, source, runId, step, at))
  let pending = settings.async && start < settings.steps ? yield* Effect.forkChild(collectStep(start, version)) : undefined

  // A checkpoint is complete only once its state file exists; its row is written after it.
  // The embedded backend is given `<run folder>/state` as its state folder by the CLI.
  let completed = start
  let savedAt = start
  let training = false
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
            const swap = (g: (typeof batch.groups)[number]) => fresh.find((f) => f.index === g.index) ?? g
            batch = {
              ...batch,
              groups: batch.groups.map(swap),
              ...(batch.dynamic !== undefined ? { dynamic: { ...batch.dynamic, drawn: batch.dynamic.drawn.map(swap) } } : {}),
            }
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
        training = true
        const versionBefore = trainerVersion
        // Async: the next step's rollouts finish on the version they started from, so step s
        // always samples from version s - 1 exactly, whatever the timing (reproducible).
        const settle = pending === undefined ? Effect.void : Effect.asVoid(Fiber.await(pending))
        const trained = yield* train(resolved, batch, trainerVersion, settle)
        trainerVersion = trained.version
        version = trained.version

        const metrics: Metrics.MetricRecord = { step: step + 1 }
        // Dynamic sampling: reward and group-shape metrics are those of the step's first draw
        // (what the run would train on without it), so they compare with a run without it.
        const scored = batch.dynamic?.drawn ?? batch.groups
        Object.assign(metrics, scoreMetrics(scored, ""))
        Object.assign(metrics, Metrics.groupFractions(scored.map((g) => g.scores.map((s) => (s.masked !== undefined ? undefined : s.value)))))
        Object.assign(metrics, trained.metrics)
        if (batch.dynamic !== undefined) {
          metrics["dynamic/dropped"] = batch.dynamic.dropped.length
          metrics["dynamic/refilled"] = batch.dynamic.refilled
          metrics["dynamic/rounds"] = batch.dynamic.rounds
          metrics["dynamic/groups"] = batch.groups.length
        }
        const sampledTokens = [...batch.groups, ...(batch.dynamic?.dropped ?? [])].reduce((s, g) => s + g.rollouts.reduce((t, r) => t + r.tokens.length, 0), 0)
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
          const logged = [...batch.groups.map((g, gi) => ({ g, advantages: trained.advantages[gi] })), ...(batch.dynamic?.dropped ?? []).map((g) => ({ g, advantages: undefined }))]
          const rows = logged.flatMap(({ advantages, g }) =>
            sampleRows(g).map((row, si) => ({
              step: step + 1,
              ...row,
              advantage: advantages?.[si] ?? 0,
              // dynamic sampling dropped the group (no signal): it did not train
              ...(advantages === undefined ? { dropped: true } : {}),
            }))
          )
          yield* RunLog.appendJsonl(files.rollouts, rows).pipe(Effect.mapError(fail("RunFolder", step)))
          const d = trained.divergence
          if (d !== undefined) {
            yield* RunLog.appendJsonl(divergenceFile, [{ step: step + 1, edges: Metrics.DIVERGENCE_EDGES, counts: d.counts, tokens: d.tokens, worst: d.worst }]).pipe(
              Effect.mapError(fail("RunFolder", step)),
            )
          }
        }

        completed = step + 1
        const last = step + 1 === settings.steps
        if ((settings.saveEvery > 0 && (step + 1) % settings.saveEvery === 0) || last) yield* saveCheckpoint(step + 1)
        lastMetrics.push(metrics)
        if ("test/env/all/reward/total" in metrics || last || (step + 1) % 100 === 0) {
          yield* Report.write(settings.outDir)
        }
        yield* progress.onStep({ step, steps: settings.steps, metrics })
        training = false
      })
      yield* Effect.uninterruptible(finish)
    }
  })

  // Interrupted (Ctrl-C) or stopped by an error (an env's step that throws, say): keep the
  // finished steps as a checkpoint that --resume continues from.
  // (Not after a failure inside a step's training: the weights may be ahead of `completed`.)
  const keepWork = (how: string) =>
    completed > savedAt && !training
      ? saveCheckpoint(completed).pipe(
        Effect.andThen(Effect.logInfo(`${how} after step ${completed}: saved checkpoint step-${completed}; continue with --resume ${settings.outDir}`)),
        Effect.catch((e) => Effect.logError(`${how} after step ${completed}; the checkpoint could not be saved: ${e.message}`)),
      )
      : Effect.logInfo(`${how} after step ${completed}; the last checkpoint is step-${savedAt}`)
  yield* loop.pipe(
    Effect.onExit((exit) =>
      Exit.isSuccess(exit) ? Effect.void : keepWork(Cause.hasInterruptsOnly(exit.cause) ? "interrupted" : "stopped by an error")
    ),
  )
  if (pending !== undefined) yield* Fiber.interrupt(pending)
  return lastMetrics
}, Effect.scoped)

/**
 * One training step: advantages -> Datums -> `forwardBackward` (micro-batches) ->
 * `optimStep` -> publish.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import * as Advantage from "../Advantage.ts"
import { type Datum as DatumT, modelInputTokens } from "../Contract.ts"
import * as Datum from "../Datum.ts"
import * as Metrics from "../Metrics.ts"
import { Tokenizer } from "../Tokenizer.ts"
import { Trainer } from "../Trainer.ts"
import type { Batch } from "./Collect.ts"
import { type Aggregation, aggregationWeights, forwardBackwardChunked } from "./MicroBatch.ts"
import * as Reference from "../Reference.ts"
import { Progress } from "./Progress.ts"
import { fail, RunError, type RunSettings } from "./Settings.ts"

/** @since 0.1.0 @category models */
export interface Trained {
  readonly metrics: Metrics.MetricRecord
  readonly version: number
  readonly advantages: Array<Array<number>>
  /** sampler/trainer log-prob differences of the trained tokens (none for SFT or an empty step) */
  readonly divergence: Divergence | undefined
}

/** One trained token where sampler and trainer disagree most. @since 0.1.0 @category models */
export interface DivergentToken {
  readonly group: number
  readonly sample: number
  /** the problem's key */
  readonly key: string
  /** the token's index after the prompt (observations of earlier turns count) */
  readonly position: number
  readonly token: number
  readonly text: string
  readonly sampler: number
  readonly trainer: number
}

/** A step's sampler - trainer log-prob differences: a histogram with fixed bins and the worst tokens. @since 0.1.0 @category models */
export interface Divergence {
  /** counts per bin of `Metrics.DIVERGENCE_EDGES` */
  readonly counts: ReadonlyArray<number>
  readonly tokens: number
  readonly worst: ReadonlyArray<DivergentToken>
}

/** The worst-divergent tokens kept per step. @since 0.1.0 @category models */
export const WORST_TOKENS = 8

/**
 * The learning rate of step `step` (0-based) under `settings.lrSchedule`, with
 * `settings.adam.learningRate` as the peak (see `LrSchedule`). A pure function of the
 * step and the settings: a resumed run continues the schedule exactly.
 * @since 0.1.0 @category training
 */
export const learningRate = (settings: Pick<RunSettings, "adam" | "steps" | "lrSchedule">, step: number): number => {
  const peak = settings.adam.learningRate
  const schedule = settings.lrSchedule ?? { kind: "constant", warmupSteps: 0 }
  const warmup = schedule.warmupSteps
  if (step < warmup) return (peak * (step + 1)) / warmup
  if (schedule.kind === "constant") return peak
  const min = schedule.minLr ?? 0
  const p = Math.min(1, (step - warmup) / Math.max(1, settings.steps - warmup))
  const f = schedule.kind === "linear" ? 1 - p : 0.5 * (1 + Math.cos(Math.PI * p))
  return min + (peak - min) * f
}

/**
 * The loss aggregation in force: `constant` without a constant divides by samples per
 * step x `maxTokens` (Dr. GRPO's generation budget).
 * @since 0.1.0 @category training
 */
export const aggregationOf = (settings: RunSettings, maxTokens: number = settings.sampling.maxTokens): Aggregation => {
  const a = settings.lossAggregation ?? { kind: "token_mean" }
  if (a.kind !== "constant") return { kind: a.kind }
  return { kind: "constant", constant: a.constant ?? (settings.sft ? settings.groups : settings.groups * settings.groupSize) * maxTokens }
}

/** Turns a batch into Datums, runs forward_backward and optim_step, and publishes. @since 0.1.0 @category training */
export const train = Effect.fnUntraced(function* (
  settings: RunSettings,
  batch: Batch,
  trainerVersion: number,
  /** runs after the optimizer step, before the new weights are published (async: the next step's sampling ends) */
  beforePublish: Effect.Effect<void> = Effect.void,
) {
  const trainer = yield* Trainer
  const tokenizer = yield* Tokenizer
  const progress = yield* Progress
  const start = performance.now()
  const totals = batch.groups.map((g) => g.scores.map((s) => (s.masked !== undefined ? undefined : s.value)))
  const { advantages, noOpGroups, overflowGroups } = Advantage.compute(totals, settings.advantage)
  if (!settings.sft && overflowGroups.length > 0) {
    const g = batch.groups[overflowGroups[0]!]!
    return yield* new RunError({
      reason: "Reward",
      step: batch.step,
      message: `env ${g.task.env}, problem ${g.task.key}: the rewards ${JSON.stringify(totals[overflowGroups[0]!])} overflow the ${settings.advantage} advantages ` +
        `(${overflowGroups.length} group(s) this step); an advantage must be a finite float32. Keep rewards in a sane range (Reward.clamp or Reward.map)`,
    })
  }

  let data: Array<DatumT> = []
  let pairs: Array<{ readonly group: number; readonly sample: number }> = []
  const klCoef = settings.sft ? 0 : settings.klCoef ?? 0
  const klMetrics: Metrics.MetricRecord = {}
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
    // With a KL penalty every unmasked sample's tokens are penalized, zero-advantage groups
    // too (as tinker-cookbook does); `masks` marks the sampled positions.
    const masks: Array<ReadonlyArray<number>> = []
    batch.groups.forEach((g, gi) =>
      g.episodes.forEach((e, si) => {
        const a = advantages[gi]![si]!
        if (g.scores[si]!.masked !== undefined) return
        if (a === 0 && klCoef === 0) return
        const sampled = klCoef > 0 ? Datum.episode(e.turns, 1) : []
        Datum.episode(e.turns, a).forEach((d, k) => {
          data.push(d)
          pairs.push({ group: gi, sample: si })
          if (klCoef > 0) masks.push(sampled[k]!.lossFnInputs["advantages"]!.data)
        })
      })
    )
    if (klCoef > 0 && data.length > 0) {
      const penalized = yield* Reference.penalize(data, klCoef, { masks }).pipe(
        Effect.mapError((e) => new RunError({ reason: "Backend", step: batch.step, message: `reference log-probs for the KL penalty (${e.reason}): ${e.message}` })),
      )
      const keep = penalized.data.map((d) => d.lossFnInputs["advantages"]!.data.some((x) => x !== 0))
      data = penalized.data.filter((_, j) => keep[j])
      pairs = pairs.filter((_, j) => keep[j])
      Object.assign(klMetrics, penalized.metrics)
    }
  }

  const metrics: Metrics.MetricRecord = { "by_group/no_op": noOpGroups, "train/datums": data.length, ...klMetrics }
  let version = trainerVersion
  let divergence: Divergence | undefined
  const lr = learningRate(settings, batch.step)
  if (data.length > 0) {
    const lossFn = settings.sft ? "cross_entropy" : settings.loss
    const weights = aggregationWeights(data, lossFn, aggregationOf(settings), settings.sft ? undefined : pairs.map((p) => `${p.group}/${p.sample}`))
    const out = yield* forwardBackwardChunked(data, lossFn, {
      chunk: settings.microBatch,
      weights,
      ...(settings.sft ? {} : { lossFnConfig: settings.lossConfig }),
      onChunk: (done, total) => progress.onPhase({ step: batch.step, steps: settings.steps, phase: "train", done, total }),
    }).pipe(Effect.mapError((e) => {
      // name the problem and sample behind a datum the trainer refused
      const at = /data\[(\d+)\]/.exec(e.message)
      const pair = at ? pairs[Number(at[1])] : undefined
      const where = pair ? ` (datum ${at![1]} is sample ${pair.sample} of problem ${batch.groups[pair.group]!.task.key})` : ""
      return new RunError({ reason: "Backend", step: batch.step, message: `forward_backward (${e.reason}): ${e.message}${where}` })
    }))
    // sampler vs learner log-probs on the trained positions (advantage != 0)
    const sampler: Array<number> = []
    const learner: Array<number> = []
    // where each pair is: datum and position
    const at: Array<readonly [number, number]> = []
    if (!settings.sft) {
      out.lossFnOutputs.forEach((o, j) => {
        const inputs = data[j]!.lossFnInputs
        const adv = inputs["advantages"]!.data
        const q = inputs["logprobs"]!.data
        for (let t = 0; t < adv.length; t++) {
          if (adv[t] === 0) continue
          sampler.push(q[t]!)
          learner.push(o.logprobs[t]!)
          at.push([j, t])
        }
      })
    }
    if (sampler.length > 0) {
      const worst = Metrics.worstDivergent({ sampler, trainer: learner }, WORST_TOKENS).map((i): DivergentToken => {
        const [j, t] = at[i]!
        const pair = pairs[j]!
        const g = batch.groups[pair.group]!
        const token = modelInputTokens(data[j]!.modelInput)[t]!
        let text: string
        try {
          text = tokenizer.decode([token])
        } catch {
          text = `<token ${token}>`
        }
        return { group: g.index, sample: pair.sample, key: g.task.key, position: t - g.promptTokens.length, token, text, sampler: sampler[i]!, trainer: learner[i]! }
      })
      divergence = { counts: Metrics.divergenceHistogram({ sampler, trainer: learner }), tokens: sampler.length, worst }
    }
    const optim = yield* trainer.optimStep({ ...settings.adam, learningRate: lr }).pipe(
      Effect.mapError((e) => new RunError({ reason: "Backend", step: batch.step, message: `optim_step (${e.reason}): ${e.message}` })),
    )
    yield* beforePublish
    const published = yield* trainer.saveWeightsForSampler(`step-${batch.step + 1}`).pipe(
      Effect.mapError((e) => new RunError({ reason: "Backend", step: batch.step, message: `save_weights_for_sampler (${e.reason}): ${e.message}` })),
    )
    version = published.version
    Object.assign(metrics, {
      "train/loss": out.loss,
      "train/active_tokens": out.activeTokens,
      ...(out.clipFraction !== undefined ? { "optim/clip_fraction": out.clipFraction } : {}),
      ...Object.fromEntries(Object.entries(optim.metrics).map(([k, v]) => [`optim/${k}`, v])),
      ...Metrics.klSampleTrain({ sampler, trainer: learner }),
    })
  }
  // the schedule's value for this step (the one the optimizer step used, when there was one)
  metrics["optim/learning_rate"] = lr
  metrics["time/train"] = (performance.now() - start) / 1000
  return { metrics, version, advantages, divergence } satisfies Trained
})


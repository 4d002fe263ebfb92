/**
 * One training step: advantages -> Datums -> `forwardBackward` (micro-batches) ->
 * `optimStep` -> publish.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import * as Advantage from "../Advantage.ts"
import type { Datum as DatumT } from "../Contract.ts"
import * as Datum from "../Datum.ts"
import * as Metrics from "../Metrics.ts"
import { Tokenizer } from "../Tokenizer.ts"
import { Trainer } from "../Trainer.ts"
import type { Batch } from "./Collect.ts"
import { Progress } from "./Progress.ts"
import { fail, RunError, type RunSettings } from "./Settings.ts"

/** The ratio bounds behind `optim/clip_fraction`: the loss's own clip thresholds where it has them. */
const clipBounds = (settings: RunSettings) => ({
  low: settings.lossConfig["clip_low_threshold"] ?? (settings.loss === "cispo" ? 0 : 0.8),
  high: settings.lossConfig["clip_high_threshold"] ?? (settings.loss === "cispo" ? 4 : 1.2),
})

/** @since 0.1.0 @category models */
export interface Trained {
  readonly metrics: Metrics.MetricRecord
  readonly version: number
  readonly advantages: Array<Array<number>>
}

/** Turns a batch into Datums, runs forward_backward and optim_step, and publishes. @since 0.1.0 @category training */
export const train = Effect.fnUntraced(function* (settings: RunSettings, batch: Batch, trainerVersion: number) {
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


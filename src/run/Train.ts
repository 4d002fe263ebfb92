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
import { forwardBackwardChunked } from "./MicroBatch.ts"
import { Progress } from "./Progress.ts"
import { fail, RunError, type RunSettings } from "./Settings.ts"

/** @since 0.1.0 @category models */
export interface Trained {
  readonly metrics: Metrics.MetricRecord
  readonly version: number
  readonly advantages: Array<Array<number>>
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
      g.episodes.forEach((e, si) => {
        const a = advantages[gi]![si]!
        if (a === 0) return
        for (const d of Datum.episode(e.turns, a)) {
          data.push(d)
          pairs.push({ group: gi, sample: si })
        }
      })
    )
  }

  const metrics: Metrics.MetricRecord = { "by_group/no_op": noOpGroups, "train/datums": data.length }
  let version = trainerVersion
  if (data.length > 0) {
    const lossFn = settings.sft ? "cross_entropy" : settings.loss
    const out = yield* forwardBackwardChunked(data, lossFn, {
      chunk: settings.microBatch,
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
    if (!settings.sft) {
      out.lossFnOutputs.forEach((o, j) => {
        const inputs = data[j]!.lossFnInputs
        const adv = inputs["advantages"]!.data
        const q = inputs["logprobs"]!.data
        for (let t = 0; t < adv.length; t++) {
          if (adv[t] === 0) continue
          sampler.push(q[t]!)
          learner.push(o.logprobs[t]!)
        }
      })
    }
    const optim = yield* trainer.optimStep(settings.adam).pipe(
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
  metrics["time/train"] = (performance.now() - start) / 1000
  return { metrics, version, advantages } satisfies Trained
})


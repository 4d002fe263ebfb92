/**
 * The datums of an RL step: every unmasked sample that trains, where each came from, and
 * what the step's loss needs beside them: the batch's totals (for the denominators of
 * `denominator: "batch"`), the KL penalty folded into the advantages (`--kl-coef`,
 * `--teacher`), or the reference log-probs of the KL term of the loss (`--kl-loss-coef`).
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { Datum as DatumT } from "../contract/Contract.ts"
import * as Datum from "../vocabulary/Datum.ts"
import type { BatchTotals } from "../loss/MicroBatch.ts"
import * as ReferencePenalty from "../loss/ReferencePenalty.ts"
import type * as Metrics from "../metrics/Metrics.ts"
import * as Reference from "../services/Reference.ts"
import { at } from "../util/Lookup.ts"
import { type Batch, scoreOf } from "./Collect.ts"
import { klCentredOf, klCoefOf, RunError, type RunSettings } from "./Settings.ts"

/** The sample a datum was cut from: its group's index in the batch and its index in the group. @since 0.1.0 @category models */
export interface Origin {
  readonly group: number
  readonly sample: number
}

/** The KL term of the loss (`--kl-loss-coef`): each datum's sampled positions and reference log-probs. @since 0.1.0 @category models */
export interface KlLossInputs {
  readonly coef: number
  readonly masks: ReadonlyArray<ReadonlyArray<number>>
  readonly reference: ReadonlyArray<ReadonlyArray<number>>
}

/** What a step trains on: the datums, where each came from (RL only), and the KL penalty's metrics. @since 0.1.0 @category models */
export interface Datums {
  readonly data: Array<DatumT>
  readonly origins: Array<Origin>
  readonly klMetrics: Metrics.MetricRecord
  /** RL: the batch's unmasked samples and their sampled tokens, zero-advantage ones included */
  readonly batch?: BatchTotals | undefined
  /** RL with `--kl-loss-coef`: what the loss's KL term reads */
  readonly klLoss?: KlLossInputs | undefined
}

/** A loss input of an RL datum (`Datum.episode` and `ReferencePenalty.penalize` always write both). @since 0.1.0 @category combinators */
export const lossInput = (d: DatumT, name: "advantages" | "logprobs"): ReadonlyArray<number> => {
  const input = d.lossFnInputs[name]
  if (input === undefined) throw new Error(`an RL datum has no ${name} loss input`)
  return input.data
}

const advantagesOf = (d: DatumT) => lossInput(d, "advantages")

/**
 * The RL datums of a step: the episodes' datums of every unmasked sample that trains (a
 * non-zero advantage; any, with a KL penalty or a KL term, which train every sampled token).
 * @since 0.1.0 @category training
 */
export const rlDatums = Effect.fnUntraced(function* (settings: RunSettings, batch: Batch, advantages: ReadonlyArray<ReadonlyArray<number>>) {
  const klCoef = klCoefOf(settings)
  const klLossCoef = settings.klLossCoef ?? 0
  const everySample = klCoef > 0 || klLossCoef > 0
  const data: Array<DatumT> = []
  const origins: Array<Origin> = []
  // With a KL penalty or term every unmasked sample's tokens count, zero-advantage groups
  // too (as tinker-cookbook and TRL do); `masks` marks the sampled positions.
  const masks: Array<ReadonlyArray<number>> = []
  let samples = 0
  let tokens = 0
  batch.groups.forEach((g, gi) => {
    // the advantages have the batch's shape: they are computed from its groups' scores
    const groupAdvantages = at(advantages, gi, "advantages of group")
    g.episodes.forEach((e, si) => {
      const a = at(groupAdvantages, si, `group ${gi}: advantage of sample`)
      if (scoreOf(g, si).masked !== undefined) return
      samples++
      tokens += e.turns.reduce((n, t) => n + t.sampled.length, 0)
      if (a === 0 && !everySample) return
      for (const d of Datum.episode(e.turns, a)) {
        data.push(d)
        origins.push({ group: gi, sample: si })
      }
      // the same turns make as many datums, so the masks stay parallel to `data`
      if (everySample) for (const d of Datum.episode(e.turns, 1)) masks.push(advantagesOf(d))
    })
  })
  const totals: BatchTotals = { samples, tokens }
  if (klLossCoef > 0 && data.length > 0) {
    const reference = yield* (yield* Reference.current).logprobs(data.map((d) => d.modelInput)).pipe(
      Effect.mapError((e) => new RunError({ reason: "Backend", step: batch.step, message: `reference log-probs for --kl-loss-coef (${e.reason}): ${e.message}` })),
    )
    return { data, origins, klMetrics: {}, batch: totals, klLoss: { coef: klLossCoef, masks, reference } } satisfies Datums
  }
  if (klCoef === 0 || data.length === 0) return { data, origins, klMetrics: {}, batch: totals } satisfies Datums
  const penalized = yield* ReferencePenalty.penalize(data, klCoef, { masks, centred: klCentredOf(settings) }).pipe(
    Effect.mapError((e) => new RunError({ reason: "Backend", step: batch.step, message: `reference log-probs for the KL penalty (${e.reason}): ${e.message}` })),
  )
  const keep = penalized.data.map((d) => advantagesOf(d).some((x) => x !== 0))
  return {
    data: penalized.data.filter((_, j) => keep[j]),
    origins: origins.filter((_, j) => keep[j]),
    klMetrics: penalized.metrics,
    batch: totals,
  } satisfies Datums
})

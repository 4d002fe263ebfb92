/**
 * Streaming minibatches (tinker-cookbook's `StreamMinibatchConfig`): a sync step's groups
 * train in `count` minibatches while the rest are still being sampled. Minibatch j holds
 * the groups of indices [j·m, (j + 1)·m), m = ceil(groups / count); its
 * `forward_backward` is submitted as soon as all of its groups are scored and every
 * earlier minibatch was submitted (index order, so a seeded run is the same every time,
 * whatever order groups finish in), with one `optim_step` per minibatch or one per step.
 *
 * The objective: with one optimizer step per step, the mean over the minibatches of each
 * minibatch's loss aggregated as the run says (token mean, sequence mean: over the
 * minibatch's own tokens or samples; a constant: the step's, so minibatches add up to the
 * step's sum); with one per minibatch, each minibatch's own. One minibatch is the step
 * trained as a whole, exactly.
 *
 * Group-local advantages only (`group_std`, `mean_only`, `none`): `batch_std`, a KL
 * penalty (its mean is over the step), dynamic sampling (it refills the batch) and async
 * runs (their batch is sampled before its step starts) are refused by the settings check.
 *
 * @since 0.1.0
 */
import { Effect, Semaphore } from "effect"
import type { Datum as DatumT } from "../contract/Contract.ts"
import { activeCount } from "../vocabulary/Datum.ts"
import * as K from "../metrics/MetricKeys.ts"
import * as Metrics from "../metrics/Metrics.ts"
import type { Batch, Group } from "./Collect.ts"
import { RunError, type RunSettings } from "./Settings.ts"
import type { Tokenizer } from "../services/Tokenizer.ts"
import type { Trainer } from "../services/Trainer.ts"
import * as Train from "./Train.ts"

/** How a step streams: `count` minibatches, one optimizer step per step or per minibatch. @since 0.1.0 @category models */
export interface StreamSettings {
  readonly count: number
  readonly optimEvery: "step" | "minibatch"
}

/** What a minibatch submitted: its datums, its groups' advantages and its pending result. */
interface Submitted {
  readonly datums: Train.Datums
  readonly advantages: Array<Array<number>>
  readonly noOpGroups: number
  readonly result: Effect.Effect<Train.Optimized, RunError> | undefined
}

/** What a streamed step submitted, awaited. @since 0.1.0 @category models */
export interface Streamed {
  readonly advantages: Array<Array<number>>
  readonly noOpGroups: number
  readonly datums: number
  readonly optimized: Train.Optimized | undefined
}

/** A step's streaming trainer (see {@link make}). @since 0.1.0 @category models */
export interface Streamer {
  /** hands it a group as soon as it is scored */
  readonly onGroup: (group: Group) => Effect.Effect<void, RunError, Trainer | Tokenizer>
  /** the whole batch: submits what is left; the effect it succeeds with awaits the step's training */
  readonly finish: (batch: Batch) => Effect.Effect<Effect.Effect<Streamed, RunError>, RunError, Trainer | Tokenizer>
  /** optimizer steps submitted: one per trained minibatch, or one for the step */
  readonly optimSteps: () => number
}

/** The share of the step's objective a minibatch carries (see the module's note). */
const shareOf = (settings: RunSettings, stream: StreamSettings): number => {
  const constant = settings.lossAggregation?.kind === "constant"
  if (stream.optimEvery === "step") return constant ? 1 : 1 / stream.count
  return constant ? stream.count : 1
}

/**
 * A step's streaming trainer: `onGroup` is handed each group as it is scored; `finish`
 * takes the whole batch, submits what is left (the last minibatches, the step's
 * `optim_step`) and gives the effect that awaits the step's training.
 * @since 0.1.0 @category constructors
 */
export const make = Effect.fnUntraced(function* (settings: RunSettings, stream: StreamSettings, step: number, lr: number) {
  const size = Math.ceil(settings.groups / stream.count)
  const scored = new Map<number, Group>()
  const submitted: Array<Submitted> = []
  const turn = yield* Semaphore.make(1)
  /** the group indices of minibatch `j` */
  const members = (j: number) => Array.from({ length: Math.min(size, settings.groups - j * size) }, (_, i) => j * size + i)

  /** Submits minibatch `j` (its groups all scored). */
  const submitMinibatch = Effect.fnUntraced(function* (j: number) {
    const groups = members(j).map((g) => scored.get(g)!)
    const part: Batch = { step, groups, sampleSeconds: 0, staleGroups: 0 }
    const { advantages, noOpGroups } = yield* Train.advantages(settings, part)
    const datums = yield* Train.datums(settings, part, advantages)
    const weights = datums.data.length === 0 ? undefined : weightsOf(settings, stream, datums)
    const result = datums.data.length === 0
      ? undefined
      : yield* Train.submitOptimize(settings, part, datums, lr, { weights, optimStep: stream.optimEvery === "minibatch" })
    submitted.push({ datums, advantages, noOpGroups, result })
  })

  /** Submits every minibatch that is complete and next in order. */
  const submitReady = turn.withPermits(1)(Effect.gen(function* () {
    for (let j = submitted.length; j < stream.count; j++) {
      if (!members(j).every((g) => scored.has(g))) return
      yield* submitMinibatch(j)
    }
  }))

  const onGroup = (g: Group) => Effect.suspend(() => {
    scored.set(g.index, g)
    return submitReady
  })

  const finish = Effect.fnUntraced(function* (batch: Batch) {
    if (batch.groups.length !== settings.groups) {
      return yield* new RunError({ reason: "Settings", step, message: `streaming minibatches: the step has ${batch.groups.length} groups, not ${settings.groups}` })
    }
    yield* submitReady
    const trains = submitted.some((m) => m.result !== undefined)
    const stepOptim = trains && stream.optimEvery === "step" ? yield* Train.submitOptimStep(settings, step, lr) : undefined
    return Effect.gen(function* () {
      const parts = yield* Effect.forEach(submitted, (m) => (m.result === undefined ? Effect.succeed(undefined) : m.result))
      const optim = stepOptim === undefined ? undefined : yield* stepOptim
      return {
        advantages: submitted.flatMap((m) => m.advantages),
        noOpGroups: submitted.reduce((n, m) => n + m.noOpGroups, 0),
        datums: submitted.reduce((n, m) => n + m.datums.data.length, 0),
        optimized: trains ? combine(stream, parts, optim?.metrics) : undefined,
      } satisfies Streamed
    })
  })

  /** optimizer steps submitted: one per trained minibatch, or one for the step */
  const optimSteps = () => {
    const trained = submitted.filter((m) => m.result !== undefined).length
    return stream.optimEvery === "minibatch" ? trained : Math.min(1, trained)
  }
  return { onGroup, finish, optimSteps } satisfies Streamer
})

/** A minibatch's per-datum weights: its aggregation's, times its share of the step. */
const weightsOf = (settings: RunSettings, stream: StreamSettings, datums: Train.Datums): ReadonlyArray<number> | undefined => {
  const share = shareOf(settings, stream)
  const own = Train.weightsOf(settings, datums)
  // one minibatch, one optimizer step: the step's own weights, so the step trains exactly as unstreamed
  if (share === 1) return own
  const base = own ?? tokenMean(settings, datums.data)
  return base.map((w) => w * share)
}

/** Token-mean weights made explicit: 1 / (the minibatch's active tokens) each. */
const tokenMean = (settings: RunSettings, data: ReadonlyArray<DatumT>): Array<number> => {
  const n = activeCount(data, settings.sft ? "cross_entropy" : settings.loss)
  return data.map(() => (n === 0 ? 0 : 1 / n))
}

/**
 * The step's training metrics from its minibatches': the loss is their sum (each carries its
 * share of the objective; with one optimizer step per minibatch, their mean), tokens add up,
 * the clip fraction pools over tokens, the optimizer's metrics are the step's own optimizer
 * step's (per minibatch: their mean), and the sampler/trainer agreement and divergence are
 * those of every trained token of the step.
 */
const combine = (stream: StreamSettings, parts: ReadonlyArray<Train.Optimized | undefined>, stepOptim: Metrics.MetricRecord | undefined): Train.Optimized => {
  const trained = parts.filter((p): p is Train.Optimized => p !== undefined)
  const stepOptimMetrics = Object.fromEntries(Object.entries(stepOptim ?? {}).map(([k, v]) => [K.optim(k), v]))
  // one minibatch: the step trained as a whole, reported as such
  if (trained.length === 1) return { ...trained[0]!, metrics: { ...trained[0]!.metrics, ...stepOptimMetrics } }
  const sum = (key: string) => trained.reduce((s, p) => s + (p.metrics[key] ?? 0), 0)
  const tokens = sum(K.Train.activeTokens)
  const pairs = { sampler: trained.flatMap((p) => p.pairs.sampler), trainer: trained.flatMap((p) => p.pairs.trainer) }
  const metrics: Record<string, number> = {}
  // the optimizer's own metrics, per minibatch: their mean
  for (const key of new Set(trained.flatMap((p) => Object.keys(p.metrics).filter((k) => k.startsWith("optim/"))))) {
    metrics[key] = Metrics.mean(trained.map((p) => p.metrics[key])) ?? 0
  }
  metrics[K.Train.loss] = stream.optimEvery === "step" ? sum(K.Train.loss) : sum(K.Train.loss) / Math.max(1, trained.length)
  metrics[K.Train.activeTokens] = tokens
  if (trained.some((p) => p.metrics[K.Optim.clipFraction] !== undefined)) {
    metrics[K.Optim.clipFraction] = tokens === 0 ? 0 : trained.reduce((s, p) => s + (p.metrics[K.Optim.clipFraction] ?? 0) * (p.metrics[K.Train.activeTokens] ?? 0), 0) / tokens
  }
  Object.assign(metrics, stepOptimMetrics, Metrics.klSampleTrain(pairs))
  return { metrics, divergence: mergeDivergence(trained, pairs), pairs }
}

/** One divergence of the minibatches' (their histograms added, the worst tokens of them all). */
const mergeDivergence = (trained: ReadonlyArray<Train.Optimized>, pairs: Metrics.LogprobPairs): Train.Divergence | undefined => {
  const all = trained.flatMap((p) => (p.divergence === undefined ? [] : [p.divergence]))
  if (all.length === 0) return undefined
  const gap = (t: Train.DivergentToken) => Math.abs(t.sampler - t.trainer)
  return {
    counts: Metrics.divergenceHistogram(pairs),
    tokens: pairs.sampler.length,
    // each minibatch kept its worst; the step's are among them (a stable sort keeps the step's order on ties)
    worst: all.flatMap((d) => d.worst).sort((a, b) => gap(b) - gap(a)).slice(0, Train.WORST_TOKENS),
  }
}

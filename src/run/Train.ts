/**
 * The phases of a training step, each its own span: `advantages` -> `datums` ->
 * `submitOptimize` (`forwardBackward` in micro-batches, then `optimStep`) ->
 * `submitPublish`. The training calls are submitted back to back and awaited after the
 * last is queued: a service that runs queued work in cycles runs a step in one.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import * as Advantage from "../vocabulary/Advantage.ts"
import { type BackendError, type Datum as DatumT, float32, type ForwardBackwardResult, type LossFn, modelInputTokens } from "../contract/Contract.ts"
import * as CustomLoss from "../vocabulary/CustomLoss.ts"
import * as Datum from "../vocabulary/Datum.ts"
import * as Dpo from "./Dpo.ts"
import { render } from "../contract/DatumIssue.ts"
import * as K from "../metrics/MetricKeys.ts"
import * as Metrics from "../metrics/Metrics.ts"
import type { Sampler } from "../services/Sampler.ts"
import { Tokenizer, type TokenizerShape } from "../services/Tokenizer.ts"
import { submitter, Trainer } from "../services/Trainer.ts"
import type { Batch } from "./Collect.ts"
import { aggregationWeights, type ChunkedResult, submitChunked } from "../loss/MicroBatch.ts"
import * as KlLoss from "../loss/KlLoss.ts"
import { resolveLoss } from "../loss/Loss.ts"
import { at } from "../util/Lookup.ts"
import { Progress } from "./Progress.ts"
import { type Datums, lossInput, rlDatums } from "./RlDatums.ts"
import { aggregationOf, fail, RunError, type RunSettings } from "./Settings.ts"

export type { Datums, Origin } from "./RlDatums.ts"

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

/** A step's advantages, one per sample of each group, and how many groups had none. @since 0.1.0 @category models */
export interface Advantages {
  readonly advantages: Array<Array<number>>
  readonly noOpGroups: number
}

/**
 * `Advantage.compute` with a game's samples split by role: each role's samples of a group
 * are a group of their own, so the sides of a zero-sum game are normalized apart.
 */
const computeByRole = (batch: Batch, totals: ReadonlyArray<ReadonlyArray<number | undefined>>, mode: Advantage.Mode) => {
  const parts: Array<{ readonly group: number; readonly members: Array<number> }> = []
  batch.groups.forEach((g, gi) => {
    const roles = g.roles
    if (roles === undefined) return parts.push({ group: gi, members: totals[gi]!.map((_, i) => i) })
    for (const role of new Set(roles)) parts.push({ group: gi, members: roles.flatMap((r, i) => (r === role ? [i] : [])) })
  })
  const computed = Advantage.compute(parts.map((p) => p.members.map((i) => totals[p.group]![i])), mode)
  const advantages = totals.map((t) => t.map(() => 0))
  parts.forEach((p, k) => p.members.forEach((i, j) => (advantages[p.group]![i] = computed.advantages[k]![j]!)))
  const overflowGroups = [...new Set(computed.overflowGroups.map((k) => parts[k]!.group))]
  return { advantages, noOpGroups: computed.noOpGroups, overflowGroups }
}

/**
 * The advantages of a batch's samples under `settings.advantage` (masked samples count as
 * missing). Fails when the rewards overflow them (an advantage must be a finite float32).
 * @since 0.1.0 @category training
 */
export const advantages = Effect.fn("Train.advantages")(function* (settings: RunSettings, batch: Batch) {
  const totals = batch.groups.map((g) => g.scores.map((s) => (s.masked !== undefined ? undefined : s.value)))
  const { advantages, noOpGroups, overflowGroups } = computeByRole(batch, totals, settings.advantage)
  const [overflowing] = overflowGroups
  if (!settings.sft && overflowing !== undefined) {
    const g = at(batch.groups, overflowing, "overflowing group")
    return yield* new RunError({
      reason: "Reward",
      step: batch.step,
      message: `env ${g.task.env}, problem ${g.task.key}: the rewards ${JSON.stringify(totals[overflowing])} overflow the ${settings.advantage} advantages ` +
        `(${overflowGroups.length} group(s) this step); an advantage must be a finite float32. Keep rewards in a sane range (Reward.clamp or Reward.map)`,
    })
  }
  return { advantages, noOpGroups } satisfies Advantages
})

/**
 * The datums of a step: for SFT one per group, the env's reference answer; for RL the
 * episodes' datums of every unmasked sample that trains (`RlDatums.rlDatums`).
 * @since 0.1.0 @category training
 */
export const datums = Effect.fn("Train.datums")(function* (settings: RunSettings, batch: Batch, advantages: Advantages["advantages"]) {
  if (settings.dpo !== undefined) return { data: yield* Dpo.pairDatums(batch.groups, batch.step), origins: [], klMetrics: {} } satisfies Datums
  return settings.sft ? yield* sftDatums(batch) : yield* rlDatums(settings, batch, advantages)
})

const sftDatums = Effect.fnUntraced(function* (batch: Batch) {
  const tokenizer = yield* Tokenizer
  const data: Array<DatumT> = []
  for (const g of batch.groups) {
    const reference = g.task.envDef.reference
    if (reference === undefined) {
      return yield* new RunError({ reason: "Env", step: batch.step, message: `--sft needs env ${g.task.envDef.name} to define reference(problem)` })
    }
    const completion = yield* tokenizer.encode(reference(g.task.problem)).pipe(Effect.mapError(fail("Env", batch.step)))
    data.push(Datum.sft({ prompt: g.promptTokens, completion: [...completion, tokenizer.eos] }))
  }
  return { data, origins: [], klMetrics: {} } satisfies Datums
})

/** What the optimizer step of a step with datums reports: its metrics and the sampler/trainer divergence. @since 0.1.0 @category models */
export interface Optimized {
  readonly metrics: Metrics.MetricRecord
  /** sampler/trainer log-prob differences of the trained tokens (none for SFT) */
  readonly divergence: Divergence | undefined
  /** the sampler's and the trainer's log-probs of the trained tokens (none for SFT) */
  readonly pairs: Metrics.LogprobPairs
}

/**
 * The per-datum weights of a step's objective under the run's loss aggregation
 * (`MicroBatch.aggregationWeights`; undefined for the token mean).
 * @since 0.1.0 @category training
 */
export const weightsOf = (settings: RunSettings, datums: Datums) =>
  aggregationWeights(
    // the KL term of the loss trains every sampled token: its denominators count them
    datums.klLoss !== undefined ? datums.data.map((d, j) => ({ ...d, lossFnInputs: { ...d.lossFnInputs, advantages: float32(datums.klLoss!.masks[j]!) } })) : datums.data,
    settings.sft ? "cross_entropy" : settings.loss,
    aggregationOf(settings),
    settings.sft ? undefined : datums.origins.map((p) => `${p.group}/${p.sample}`),
    datums.batch,
  )

/**
 * Submits the step's `optim_step` at learning rate `lr`; the effect it succeeds with awaits it.
 * @since 0.1.0 @category training
 */
export const submitOptimStep = Effect.fn("Train.submitOptimStep")(function* (settings: RunSettings, step: number, lr: number) {
  const optimError = (e: BackendError) => new RunError({ reason: "Backend", step, message: `optim_step (${e.reason}): ${e.message}` })
  const pending = yield* submitter(yield* Trainer).optimStep({ ...settings.adam, learningRate: lr }).pipe(Effect.mapError(optimError))
  return Effect.mapError(pending, optimError)
})

/**
 * Submits `forwardBackward` of a step's datums in micro-batches, then `optimStep` at
 * learning rate `lr`, back to back; succeeds once both are queued, with the effect that
 * awaits them. Its metrics: the loss, active tokens, clip fraction, the optimizer's own,
 * and the sampler/trainer KL on the trained tokens.
 * @since 0.1.0 @category training
 */
export const submitOptimize = Effect.fn("Train.submitOptimize")(function* (
  settings: RunSettings,
  batch: Batch,
  datums: Datums,
  lr: number,
  options: {
    /** per-datum weights other than the run's aggregation's (a streamed minibatch's share) */
    readonly weights?: ReadonlyArray<number> | undefined
    /** false: no `optim_step` (the caller submits one for several calls) */
    readonly optimStep?: boolean
  } = {},
) {
  const tokenizer = yield* Tokenizer
  const { data } = datums
  const lossFn = settings.sft || settings.dpo !== undefined ? "cross_entropy" : settings.loss
  const weights = "weights" in options ? options.weights : weightsOf(settings, datums)
  const backward = yield* backwardOf(settings, batch, datums, weights)
  const step = options.optimStep === false ? undefined : yield* submitOptimStep(settings, batch.step, lr)
  return Effect.gen(function* () {
    const out = yield* backward.pipe(Effect.mapError((e) => (e._tag === "RunError" ? e : refused(e, batch, datums, lossFn))))
    const trained = settings.sft || settings.dpo !== undefined ? { sampler: [], learner: [], datum: [], position: [] } : trainedLogprobs(data, out.lossFnOutputs)
    const divergence = trained.sampler.length > 0 ? divergenceOf(tokenizer, batch, datums, trained) : undefined
    const optim = step === undefined ? undefined : yield* step
    const pairs = { sampler: trained.sampler, trainer: trained.learner }
    const metrics: Metrics.MetricRecord = {
      [K.Train.loss]: out.loss,
      [K.Train.activeTokens]: out.activeTokens,
      ...(out.clipFraction !== undefined ? { [K.Optim.clipFraction]: out.clipFraction } : {}),
      ...Object.fromEntries(Object.entries(optim?.metrics ?? {}).map(([k, v]) => [K.optim(k), v])),
      ...Metrics.klSampleTrain(pairs),
      ...out.extra,
    }
    return { metrics, divergence, pairs } satisfies Optimized
  })
})

/** What a step's backward gives: a chunked call's result, and metrics of its own (DPO's). */
type Backward = ChunkedResult & { readonly extra?: Metrics.MetricRecord | undefined }

/**
 * Submits a step's backward: DPO's pairs through `CustomLoss.dpo`, `gspo` as a custom loss
 * on a trainer without it, else the loss in micro-batches; the effect awaits it.
 */
const backwardOf = Effect.fnUntraced(function* (settings: RunSettings, batch: Batch, datums: Datums, weights: ReadonlyArray<number> | undefined) {
  const progress = yield* Progress
  const trainer = yield* Trainer
  const { data } = datums
  const lossFn = settings.sft || settings.dpo !== undefined ? "cross_entropy" : settings.loss
  if (settings.dpo !== undefined) return Effect.succeed(fromCustom(yield* Dpo.backward(data, settings.dpo.beta, batch.step, settings.microBatch), { active: "active_tokens", extra: "dpo/" }))
  if (datums.klLoss !== undefined) return Effect.succeed(fromCustom(yield* klLossBackward(settings, batch, datums, weights), { active: K.KlLoss.activeTokens, clip: K.KlLoss.clipFraction, extra: "kl/" }))
  // a loss the trainer does not compute itself (gspo over the wire) trains as a custom loss
  if (lossFn === "gspo" && !(trainer.losses ?? []).includes("gspo")) {
    const config = settings.lossConfig as { readonly clip_low_threshold?: number; readonly clip_high_threshold?: number }
    const out = yield* CustomLoss.forwardBackward(data, CustomLoss.gspo(config, weights), { chunk: settings.microBatch }).pipe(
      Effect.mapError((e) => new RunError({ reason: "Backend", step: batch.step, message: e.message })),
    )
    return Effect.succeed(fromCustom(out, { active: "gspo:active_tokens", clip: "gspo:clip_fraction" }))
  }
  const pending = yield* submitChunked(data, lossFn, {
    chunk: settings.microBatch,
    weights,
    ...(settings.sft ? {} : { lossFnConfig: settings.lossConfig }),
    onChunk: (done, total) => progress.onPhase({ step: batch.step, steps: settings.steps, phase: "train", done, total }),
  }).pipe(Effect.mapError((e) => refused(e, batch, datums, lossFn)))
  return pending.pipe(Effect.mapError((e): BackendError | RunError => e)) as Effect.Effect<Backward, BackendError | RunError>
})

/** The run's loss plus the KL term (`--kl-loss-coef`, `KlLoss.objective`), as a custom loss. */
const klLossBackward = Effect.fnUntraced(function* (settings: RunSettings, batch: Batch, datums: Datums, weights: ReadonlyArray<number> | undefined) {
  const klLoss = datums.klLoss!
  const resolved = resolveLoss(settings.loss, settings.lossConfig)
  if (!resolved.ok) return yield* new RunError({ reason: "Settings", step: batch.step, message: resolved.message })
  const loss = CustomLoss.make("kl_loss", (data, logprobs) =>
    Effect.succeed(KlLoss.objective({ data, logprobs, reference: klLoss.reference, masks: klLoss.masks, loss: resolved.value, coef: klLoss.coef, weights })))
  return yield* CustomLoss.forwardBackward(datums.data, loss, { chunk: settings.microBatch }).pipe(
    Effect.mapError((e) => new RunError({ reason: "Backend", step: batch.step, message: e.message })),
  )
})

/**
 * A custom loss's result as a chunked call's: its loss and the active-token count under
 * `keys.active` (its loss sum their product), the clip fraction under `keys.clip`, and the
 * metrics whose names start with `keys.extra` kept for the step's row.
 */
const fromCustom = (out: CustomLoss.CustomLossResult, keys: { readonly active: string; readonly clip?: string; readonly extra?: string }): Backward => {
  const metrics: Readonly<Record<string, number>> = out.metrics
  const loss = metrics["loss"] ?? 0
  const active = metrics[keys.active] ?? 0
  return {
    lossFnOutputs: out.lossFnOutputs,
    loss,
    lossSum: loss * active,
    activeTokens: active,
    clipFraction: keys.clip !== undefined ? metrics[keys.clip] : undefined,
    ...(keys.extra !== undefined ? { extra: Object.fromEntries(Object.entries(metrics).filter(([k]) => k.startsWith(keys.extra!))) } : {}),
  }
}

/**
 * A refused `forward_backward` as the step's error, naming the problem and sample behind
 * the datum: the issue's datum is its index in the step (the embedded backend and gyre's
 * server send the issue; the HTTP client reads it from the error body). A refusal that
 * carries no issue (another server answers with text only) is located by the one validator
 * run here on the step's datums, which finds every problem but those of the model's limits.
 */
const refused = (e: BackendError, batch: Batch, datums: Datums, lossFn: LossFn): RunError => {
  const local = e.issue === undefined && e.reason === "InvalidInput" ? Datum.checkAll(datums.data, lossFn) : undefined
  const d = (e.issue ?? local)?.datum
  const origin = d === undefined ? undefined : datums.origins[d]
  const sample = origin ? `datum ${d} is sample ${origin.sample} of problem ${at(batch.groups, origin.group, "group").task.key}` : undefined
  const where = sample === undefined ? "" : local === undefined ? ` (${sample})` : ` (checked here: ${render(local)}; ${sample})`
  return new RunError({ reason: "Backend", step: batch.step, message: `forward_backward (${e.reason}): ${e.message}${where}` })
}

/** Sampler and learner log-probs of the trained positions (advantage != 0), with the datum and position of each. */
interface TrainedLogprobs {
  readonly sampler: Array<number>
  readonly learner: Array<number>
  /** where each trained token is: its datum and its position in it (two parallel lists, no pair per token) */
  readonly datum: Array<number>
  readonly position: Array<number>
}

const trainedLogprobs = (data: ReadonlyArray<DatumT>, outputs: ForwardBackwardResult["lossFnOutputs"]): TrainedLogprobs => {
  const result: TrainedLogprobs = { sampler: [], learner: [], datum: [], position: [] }
  outputs.forEach((o, j) => {
    const datum = at(data, j, "datum")
    const adv = lossInput(datum, "advantages")
    const q = lossInput(datum, "logprobs")
    for (let t = 0; t < adv.length; t++) {
      if (adv[t] === 0) continue
      // a datum's per-token inputs and outputs all have its length
      result.sampler.push(q[t]!)
      result.learner.push(o.logprobs[t]!)
      result.datum.push(j)
      result.position.push(t)
    }
  })
  return result
}

/** The histogram of sampler - trainer log-prob differences and the `WORST_TOKENS` worst tokens. */
const divergenceOf = (tokenizer: TokenizerShape, batch: Batch, datums: Datums, trained: TrainedLogprobs): Divergence => {
  const pair = { sampler: trained.sampler, trainer: trained.learner }
  // worstDivergent gives indices into the trained positions, which index the datums
  const worst = Metrics.worstDivergent(pair, WORST_TOKENS).map((i): DivergentToken => {
    const j = at(trained.datum, i, "trained datum")
    const t = at(trained.position, i, "trained position")
    const origin = at(datums.origins, j, "origin of datum")
    const g = at(batch.groups, origin.group, "group")
    const token = at(modelInputTokens(at(datums.data, j, "datum").modelInput), t, `datum ${j}: token`)
    let text: string
    try {
      text = tokenizer.decode([token])
    } catch {
      text = `<token ${token}>`
    }
    return {
      group: g.index,
      sample: origin.sample,
      key: g.task.key,
      position: t - g.promptTokens.length,
      token,
      text,
      sampler: at(trained.sampler, i, "sampler log-prob"),
      trainer: at(trained.learner, i, "learner log-prob"),
    }
  })
  return { counts: Metrics.divergenceHistogram(pair), tokens: trained.sampler.length, worst }
}

/**
 * Submits the publication of step `step`'s weights (0-based) to the sampler as
 * `step-<step + 1>`, after `beforePublish` (async: the next step's sampling ends on the
 * version it started from); the effect it succeeds with awaits the version now served.
 * @since 0.1.0 @category training
 */
export const submitPublish = Effect.fn("Train.submitPublish")(function* (step: number, beforePublish: Effect.Effect<void, RunError, Sampler | Tokenizer | Trainer> = Effect.void) {
  const submit = submitter(yield* Trainer)
  yield* beforePublish
  const publishError = (e: BackendError) => new RunError({ reason: "Backend", step, message: `save_weights_for_sampler (${e.reason}): ${e.message}` })
  const published = yield* submit.saveWeightsForSampler(`step-${step + 1}`).pipe(Effect.mapError(publishError))
  return published.pipe(
    Effect.mapError(publishError),
    Effect.map((p) => p.version),
  )
})

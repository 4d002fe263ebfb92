/**
 * What a run is configured with (`config.json`), its defaults, and the run's error type.
 *
 * @since 0.1.0
 */
import * as Path from "node:path"
import { Schema } from "effect"
import * as Advantage from "../Advantage.ts"
import { AdamParams, LossFn, LossFnConfig, SamplingParams } from "../Contract.ts"
import type { RunDefaults } from "../Env.ts"

/**
 * The learning rate of step s (0-based) of a run of `steps` steps, with `adam.learningRate`
 * as the peak `lr`: during the first `warmupSteps` steps it rises linearly,
 * `lr * (s + 1) / warmupSteps`; after them, with `p = (s - warmupSteps) / (steps - warmupSteps)`
 * in [0, 1), it is `lr` (constant), `minLr + (lr - minLr) * (1 - p)` (linear) or
 * `minLr + (lr - minLr) * (1 + cos(pi * p)) / 2` (cosine). `minLr` defaults to 0. A pure
 * function of the step, so a resumed run continues the schedule exactly.
 * @since 0.1.0 @category models
 */
export const LrSchedule = Schema.Struct({
  kind: Schema.Literals(["constant", "linear", "cosine"]),
  warmupSteps: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)),
  minLr: Schema.optional(Schema.Finite.check(Schema.isGreaterThanOrEqualTo(0))),
})
export type LrSchedule = typeof LrSchedule.Type

/**
 * How a step's per-token losses are combined (active tokens only; `n_i` = the active
 * tokens of sample i, `N` = all of the step's, `S` = the samples that train):
 * - `token_mean`: `sum / N`, every token weighs the same (the Loops rule; the default);
 * - `sequence_mean`: `mean over samples of (sum_i / n_i)`, every sample weighs the same
 *   (GRPO's original);
 * - `constant`: `sum / constant` (Dr. GRPO), `constant` defaulting to
 *   samples per step x the sampling maxTokens, so no sample's length scales its tokens.
 * @since 0.1.0 @category models
 */
export const LossAggregation = Schema.Struct({
  kind: Schema.Literals(["token_mean", "sequence_mean", "constant"]),
  /** `constant` only: the divisor (default: samples per step x maxTokens, recorded in config.json) */
  constant: Schema.optional(Schema.Finite.check(Schema.isGreaterThan(0))),
})
export type LossAggregation = typeof LossAggregation.Type

/**
 * DAPO's dynamic sampling: groups whose unmasked rewards are all equal (no learning
 * signal) are dropped and new problems are sampled to take their place, in at most
 * `maxRounds` extra rounds per step (0 = drop only). Refill problems come from their own
 * stream per step, so the problems of later steps do not move.
 * @since 0.1.0 @category models
 */
export const DynamicSampling = Schema.Struct({
  maxRounds: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)),
})
export type DynamicSampling = typeof DynamicSampling.Type

/** Everything a run is configured with; written to `config.json`. @since 0.1.0 @category models */
export const RunSettings = Schema.Struct({
  name: Schema.String,
  outDir: Schema.String,
  env: Schema.String,
  steps: Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)),
  /** groups (problems) per step */
  groups: Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)),
  groupSize: Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)),
  loss: LossFn,
  lossConfig: LossFnConfig,
  advantage: Advantage.Mode,
  adam: AdamParams,
  /** sampling defaults; an env's own `sampling` overrides them */
  sampling: SamplingParams,
  /** sampling settings given explicitly (CLI flags): they override the env's */
  samplingOverrides: Schema.optional(Schema.Struct({
    maxTokens: Schema.optional(SamplingParams.fields.maxTokens),
    temperature: Schema.optional(SamplingParams.fields.temperature),
    topP: SamplingParams.fields.topP,
    topK: SamplingParams.fields.topK,
  })),
  /** how the env was named on the command line (a name in envs/ or an absolute path), for --resume */
  envSpec: Schema.optional(Schema.String),
  seed: Schema.Int,
  difficulty: Schema.optional(Schema.Int),
  /** datums per forwardBackward call (0 = all in one call) */
  microBatch: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)),
  /** reward evaluations in flight at once */
  rewardConcurrency: Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)),
  /** sample requests in flight at once */
  sampleConcurrency: Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)),
  /** evaluate held-out problems every N steps (0 = never) */
  evalEvery: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)),
  evalSize: Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)),
  evalTemperature: Schema.Finite.check(Schema.isGreaterThanOrEqualTo(0)),
  /** save_state every N steps (0 = only at the end) */
  saveEvery: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)),
  /** train on reference answers with cross_entropy instead of RL */
  sft: Schema.Boolean,
  /**
   * start a fresh run from another run's trainer weights (its LoRA adapter), with a fresh
   * optimizer: a run folder (its newest checkpoint that loads), a run folder and step
   * (`runs/<name>/step-30`) or a state file (`runs/<name>/state/step-30.ckpt`).
   * config.json records the state file it resolved to.
   */
  initFrom: Schema.optional(Schema.String),
  async: Schema.Boolean,
  maxLag: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)),
  staleGroups: Schema.Literals(["requeue", "drop"]),
  /** the backend the run trained on: "embedded" or a Tinker-protocol URL (where `gyre export` fetches remote checkpoints) */
  backend: Schema.optional(Schema.String),
  /** KL penalty against the base model, folded into each sampled token's advantage (0 = off) */
  klCoef: Schema.optional(Schema.Finite.check(Schema.isGreaterThanOrEqualTo(0))),
  /** each reward component's weight in the total (0 = metric only), recorded for the report */
  rewardWeights: Schema.optional(Schema.Record(Schema.String, Schema.Finite)),
  /** keep one rollouts.jsonl row per sample every N steps (0 = never) */
  logRolloutsEvery: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)),
  /** the learning rate of each step (`adam.learningRate` is the peak); absent = constant */
  lrSchedule: Schema.optional(LrSchedule),
  /** how per-token losses add up to a step's loss; absent = token_mean */
  lossAggregation: Schema.optional(LossAggregation),
  /** DAPO dynamic sampling: drop groups whose rewards are all equal and refill the batch; absent = off */
  dynamicSampling: Schema.optional(DynamicSampling),
})
export type RunSettings = typeof RunSettings.Type

/** A run failed: which step, env, reward and problem, and why. @since 0.1.0 @category errors */
export class RunError extends Schema.TaggedError<RunError>()("RunError", {
  reason: Schema.Literals(["Settings", "Reward", "Backend", "Env", "RunFolder", "Resume"]),
  message: Schema.String,
  step: Schema.optional(Schema.Int),
}) {}

/** Wraps a failure's message as a `RunError` of a reason and step. @since 0.1.0 @category errors */
export const fail = (reason: RunError["reason"], step: number | undefined) => (e: { readonly message: string }) =>
  new RunError({ reason, message: e.message, ...(step !== undefined ? { step } : {}) })

/** Default settings for a run of an env (the CLI's defaults). @since 0.1.0 @category constructors */
export const defaults = (env: string, overrides: Partial<RunSettings> = {}): RunSettings => {
  const name = overrides.name ?? `${env}-${new Date().toISOString().replace(/[:.]/g, "-").slice(0, 19)}`
  return {
    name,
    outDir: Path.join("runs", name),
    env,
    steps: 2000,
    groups: 8,
    groupSize: 8,
    loss: "ppo",
    lossConfig: {},
    advantage: "group_std",
    adam: { learningRate: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0, gradClipNorm: 1 },
    sampling: { maxTokens: 16, temperature: 1 },
    seed: 0,
    microBatch: 0,
    rewardConcurrency: 64,
    sampleConcurrency: 8,
    evalEvery: 500,
    evalSize: 300,
    evalTemperature: 1,
    saveEvery: 500,
    sft: false,
    async: false,
    maxLag: 1,
    staleGroups: "requeue",
    logRolloutsEvery: 10,
    lrSchedule: { kind: "constant", warmupSteps: 0 },
    lossAggregation: { kind: "token_mean" },
    ...overrides,
  }
}

/**
 * The settings an env suggests (`Env.make({ defaults })`), as overrides of `defaults`.
 * @since 0.1.0 @category constructors
 */
export const envDefaults = (env: { readonly defaults?: RunDefaults | undefined }, base: RunSettings): Partial<RunSettings> => {
  const d = env.defaults ?? {}
  return {
    ...(d.steps !== undefined ? { steps: d.steps } : {}),
    ...(d.groups !== undefined ? { groups: d.groups } : {}),
    ...(d.groupSize !== undefined ? { groupSize: d.groupSize } : {}),
    ...(d.evalEvery !== undefined ? { evalEvery: d.evalEvery } : {}),
    ...(d.saveEvery !== undefined ? { saveEvery: d.saveEvery } : {}),
    ...(d.learningRate !== undefined ? { adam: { ...base.adam, learningRate: d.learningRate } } : {}),
  }
}

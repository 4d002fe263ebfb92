/**
 * What a run is configured with, as `config.json` holds it: `RunSettings` and the settings
 * it is made of (schedules, aggregation, dynamic sampling, recipes, overlong shaping, the
 * teacher). Beside the run folder's other schemas, so that the folder imports nothing of
 * the run loop; `run/Settings.ts` re-exports them with the checks and defaults.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"
import * as Advantage from "../vocabulary/Advantage.ts"
import { AdamParams, LossFn, LossFnConfig, SamplingParams } from "../contract/Contract.ts"

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
 *
 * `denominator` says what `N` and `S` count: `trained` (absent), only the samples with an
 * active token (a sample whose advantage is 0 counts in no denominator, as the Loops rule
 * has it for tokens); `batch`, every unmasked sample of the step and all its sampled
 * tokens, as the papers' `1/G` and `1/sum|o_i|` do (the recipes).
 * @since 0.1.0 @category models
 */
export const LossAggregation = Schema.Struct({
  kind: Schema.Literals(["token_mean", "sequence_mean", "constant"]),
  /** `constant` only: the divisor (default: samples per step x maxTokens, recorded in config.json) */
  constant: Schema.optional(Schema.Finite.check(Schema.isGreaterThan(0))),
  /** what the denominators count: the samples that train (absent) or every sample of the batch */
  denominator: Schema.optional(Schema.Literals(["trained", "batch"])),
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

/** The named recipes of `--recipe` (`run/Recipes.ts` says what each sets). @since 0.1.0 @category models */
export const RecipeName = Schema.Literals(["grpo", "dr-grpo", "dapo", "gspo", "cispo"])
export type RecipeName = typeof RecipeName.Type

/**
 * DAPO's overlong reward shaping: with `L` the sampling maxTokens and `B = ceil(fraction·L)`,
 * a sample of `n` sampled tokens gets `0` when `n <= L - B` and `(L - B - n) / B` above it
 * (down to -1 at `L`), added to its training reward as the component `overlong`. An
 * episode of several turns takes its worst turn's penalty, each turn against `L`.
 * @since 0.1.0 @category models
 */
export const Overlong = Schema.Struct({
  fraction: Schema.Finite.check(Schema.isGreaterThan(0), Schema.isLessThanOrEqualTo(1)),
})
export type Overlong = typeof Overlong.Type

/**
 * On-policy distillation (`--teacher`): the teacher whose log-probs of every sampled token
 * stand in for the reference of the KL penalty (`coef` its coefficient, `--teacher-coef`),
 * so each token's advantage gains `coef · (teacher − student log-prob)`, less the step's mean
 * of that difference (`centred`, the default and what runs recorded without the field did),
 * or not (`--teacher-uncentred`, `centred: false`: tinker-cookbook's distillation recipe).
 * `model` is the teacher's base model folder, `state` the adapter of a run's checkpoint;
 * with `served`, the run's own remote service scores with `model` (a sampler path or base
 * model it serves, or on Loops `loops:<run id>`).
 * @since 0.1.0 @category models
 */
export const Teacher = Schema.Struct({
  given: Schema.String,
  model: Schema.String,
  served: Schema.optional(Schema.Boolean),
  state: Schema.optional(Schema.String),
  loraRank: Schema.optional(Schema.Int.check(Schema.isGreaterThanOrEqualTo(1))),
  coef: Schema.Finite.check(Schema.isGreaterThan(0)),
  centred: Schema.optional(Schema.Boolean),
})
export type Teacher = typeof Teacher.Type

/**
 * A game env's roles and who plays each in training (`players`) and in held-out
 * evaluation (`evalPlayers`): `policy`, `frozen <model>` (with its temperature when it has
 * its own) or `scripted`.
 * @since 0.1.0 @category models
 */
export const GameRecord = Schema.Struct({
  roles: Schema.Array(Schema.String),
  players: Schema.Record(Schema.String, Schema.String),
  evalPlayers: Schema.Record(Schema.String, Schema.String),
})
export type GameRecord = typeof GameRecord.Type

/** The KL coefficient in force: the teacher's when there is one, else `--kl-coef`. @since 0.1.0 @category training */
export const klCoefOf = (settings: { readonly klCoef?: number | undefined; readonly teacher?: Teacher | undefined }): number => settings.teacher?.coef ?? settings.klCoef ?? 0

/**
 * Whether the KL term in force is centred on the step's mean: `--kl-coef`'s always is (the RL
 * recipe's); a teacher's unless `--teacher-uncentred` recorded `centred: false`.
 * @since 0.1.0 @category training
 */
export const klCentredOf = (settings: { readonly teacher?: Teacher | undefined }): boolean => settings.teacher === undefined || settings.teacher.centred !== false

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
  /**
   * extra variables of the model's chat template (`{ enable_thinking: false }`): the env's
   * `chat.templateArgs` under `--template-arg`; absent = none
   */
  templateArgs: Schema.optional(Schema.JsonObject),
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
  /**
   * async: how many steps ahead rollouts are sampled (tinker-cookbook's
   * `max_steps_off_policy`); step s trains on rollouts of version s - k. Absent = 1
   */
  maxStepsOffPolicy: Schema.optional(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 16 }))),
  maxLag: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)),
  /**
   * the run stops when more than this fraction of a step's samples is masked (a reward's or
   * a tool's infrastructure failing) for `MASKED_STEPS` steps in a row; absent = 0.5, 1 = never
   */
  maxMasked: Schema.optional(Schema.Finite.check(Schema.isBetween({ minimum: 0, maximum: 1 }))),
  /**
   * sync: train a step's groups in `count` minibatches as they are scored, with one
   * optimizer step per step or per minibatch (`Stream.ts`); absent = the step as a whole
   */
  streamMinibatches: Schema.optional(Schema.Struct({
    count: Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)),
    optimEvery: Schema.Literals(["step", "minibatch"]),
  })),
  staleGroups: Schema.Literals(["requeue", "drop"]),
  /** the backend the run trained on: "embedded" or a Tinker-protocol URL (where `gyre export` fetches remote checkpoints) */
  backend: Schema.optional(Schema.String),
  /** KL penalty against the base model, folded into each sampled token's advantage (0 = off) */
  klCoef: Schema.optional(Schema.Finite.check(Schema.isGreaterThanOrEqualTo(0))),
  /**
   * KL to the base model as a term of the loss (DeepSeekMath's GRPO): `beta · k3` at every
   * sampled token, `k3 = r - log r - 1` with `r = pi_ref / pi`, aggregated as the loss is;
   * absent or 0 = off
   */
  klLossCoef: Schema.optional(Schema.Finite.check(Schema.isGreaterThanOrEqualTo(0))),
  /** each reward component's weight in the total (0 = metric only), recorded for the report */
  rewardWeights: Schema.optional(Schema.Record(Schema.String, Schema.Finite)),
  /** each game env's roles and who plays them, by env name: recorded from the env, which sets them */
  games: Schema.optional(Schema.Record(Schema.String, GameRecord)),
  /** keep one rollouts.jsonl row per sample every N steps (0 = never) */
  logRolloutsEvery: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)),
  /** the learning rate of each step (`adam.learningRate` is the peak); absent = constant */
  lrSchedule: Schema.optional(LrSchedule),
  /** how per-token losses add up to a step's loss; absent = token_mean */
  lossAggregation: Schema.optional(LossAggregation),
  /** DAPO dynamic sampling: drop groups whose rewards are all equal and refill the batch; absent = off */
  dynamicSampling: Schema.optional(DynamicSampling),
  /** the hack watch (`run/HackWatch.ts`) every N steps (0 = off); absent = off (older runs) */
  hackWatchEvery: Schema.optional(Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))),
  /** the named recipe the run started from (`--recipe`); its settings are the fields above */
  recipe: Schema.optional(RecipeName),
  /** DAPO's overlong reward shaping; absent = off */
  overlong: Schema.optional(Overlong),
  /** on-policy distillation from a teacher (`--teacher`); absent = off */
  teacher: Schema.optional(Teacher),
  /** DPO on the env's preference pairs instead of RL (`--dpo`, `beta` its temperature), against the policy the run starts from; absent = off */
  dpo: Schema.optional(Schema.Struct({ beta: Schema.Finite.check(Schema.isGreaterThan(0)) })),
})
export type RunSettings = typeof RunSettings.Type

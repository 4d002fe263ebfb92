/**
 * The Schemas of the files in a run folder `runs/<name>/`, one per file a run writes and
 * reads back (`RunFolder.ts` reads and writes them):
 *
 * - `config.json`: {@link Config}, the settings in force and the trainer trained; the
 *   lenient {@link ConfigHints} for readers that need a few of its fields (export, report);
 * - `checkpoints.jsonl`: {@link CheckpointRow}, one per saved checkpoint;
 * - `metrics.jsonl`: {@link MetricsRow}, one per step, `step` and numbers
 *   (keys in `MetricKeys.ts`);
 * - `rollouts.jsonl`: {@link RolloutRow}, one per logged sample;
 * - `eval.jsonl`: {@link EvalRow}, one per sample `gyre eval` scored;
 * - `divergence.jsonl`: {@link DivergenceRow}, one per rollout-logging step.
 *
 * Folders written by earlier versions fit these Schemas.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"
import { RunSettings } from "./RunSettings.ts"

/**
 * The trainer a run trained, as `config.json` records it (`trainer`): an adapter fits only
 * the base model and LoRA rank it was trained on.
 * @since 0.1.0 @category models
 */
export const TrainerRecord = Schema.Struct({
  model: Schema.String,
  loraRank: Schema.Int,
  /** `sha256:<hex>` of an embedded model's weights.bin, which identifies it wherever its folder lies (absent before it was recorded) */
  weights: Schema.optional(Schema.String),
})
export type TrainerRecord = typeof TrainerRecord.Type

/**
 * `config.json`: every setting in force (`RunSettings`), and the trainer trained (absent
 * in folders written before it was recorded).
 * @since 0.1.0 @category models
 */
export const Config = Schema.Struct({
  ...RunSettings.fields,
  trainer: Schema.optional(TrainerRecord),
})
export type Config = typeof Config.Type

/**
 * The fields of `config.json` that readers other than `--resume` use, each optional, so
 * a folder with a partial config (or one written by another tool) still exports and
 * reports. `baseModel` and `model` name a base model for export where a config gives one.
 * @since 0.1.0 @category models
 */
export const ConfigHints = Schema.Struct({
  name: Schema.optional(Schema.String),
  env: Schema.optional(Schema.String),
  envSpec: Schema.optional(Schema.String),
  backend: Schema.optional(Schema.String),
  baseModel: Schema.optional(Schema.String),
  model: Schema.optional(Schema.String),
  rewardWeights: Schema.optional(Schema.Record(Schema.String, Schema.Finite)),
  trainer: Schema.optional(TrainerRecord),
})
export type ConfigHints = typeof ConfigHints.Type

/**
 * A `checkpoints.jsonl` row: the step saved, the checkpoint's name (`step-<step>`), where
 * its state is (a state file, or a backend's `tinker://` or `bt://` path) and when.
 * @since 0.1.0 @category models
 */
export const CheckpointRow = Schema.Struct({
  step: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)),
  name: Schema.String,
  path: Schema.String,
  time: Schema.optional(Schema.String),
})
export type CheckpointRow = typeof CheckpointRow.Type

/**
 * A `metrics.jsonl` row: `step` (0 is the base policy's evaluation) and numbers under the
 * keys of `MetricKeys.ts` (null where a value was not a number, as JSON writes NaN).
 * @since 0.1.0 @category models
 */
export const MetricsRow = Schema.StructWithRest(
  Schema.Struct({ step: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)) }),
  // a value that is not a number is written as null (NaN) or left out (undefined), as JSON does
  [Schema.Record(Schema.String, Schema.NullishOr(Schema.Number))],
)
export type MetricsRow = typeof MetricsRow.Type

/** A chat message of a prompt. @since 0.1.0 @category models */
export const Message = Schema.Struct({
  role: Schema.Literals(["system", "user", "assistant"]),
  content: Schema.String,
})

/** One turn of an episode: what the model wrote, and what the env answered. @since 0.1.0 @category models */
export const TurnRow = Schema.Struct({
  sampled: Schema.String,
  observation: Schema.optional(Schema.String),
  toolError: Schema.optional(Schema.String),
  toolResult: Schema.optional(Schema.String),
  /** an agent's turn whose request re-sent an earlier reply changed past recognizing: the text the policy was given from that reply on */
  rewritten: Schema.optional(Schema.String),
})

/**
 * One scored sample, as `rollouts.jsonl` and `eval.jsonl` write it: the group and sample,
 * the env and problem key, the policy version it was sampled from, the prompt and
 * completion (for episodes every turn and why it ended), the reward (null when masked: a
 * partial sum would read as a real total), the mask reason and each component's score.
 * @since 0.1.0 @category models
 */
export const sampleFields = {
  group: Schema.Int,
  sample: Schema.Int,
  env: Schema.String,
  key: Schema.String,
  version: Schema.Int,
  prompt: Schema.Union([Schema.String, Schema.Array(Message)]),
  completion: Schema.String,
  stopReason: Schema.Literals(["stop", "length"]),
  /** a game env's sample: the role the policy played and its outcome */
  role: Schema.optional(Schema.String),
  outcome: Schema.optional(Schema.Finite),
  reward: Schema.NullOr(Schema.Number),
  masked: Schema.NullOr(Schema.String),
  // a component that did not apply is left out; JSON writes a NaN score as null
  components: Schema.Record(Schema.String, Schema.NullishOr(Schema.Number)),
  /** each component that failed (any weight) with its message, when one did */
  failed: Schema.optional(Schema.Record(Schema.String, Schema.String)),
  /** what a reward noted (a judge's replies), when one did */
  notes: Schema.optional(Schema.Record(Schema.String, Schema.Array(Schema.String))),
  turns: Schema.optional(Schema.Array(TurnRow)),
  episodeStop: Schema.optional(Schema.String),
  /** an agent env's episode: completions asked for, tokens re-tokenizing its messages would have changed, replies re-sent changed past recognizing */
  agent: Schema.optional(Schema.Struct({ requests: Schema.Int, diverged: Schema.Int, rewritten: Schema.Int })),
} as const

const { env, group, key, sample, ...sampleRest } = sampleFields

/**
 * A `rollouts.jsonl` row: a sample of a step, its problem (absent in folders written
 * before it was logged), its advantage, and `dropped` when dynamic sampling dropped its
 * group (it did not train).
 * @since 0.1.0 @category models
 */
export const RolloutRow = Schema.Struct({
  step: Schema.Int,
  group,
  sample,
  env,
  key,
  problem: Schema.optional(Schema.Unknown),
  ...sampleRest,
  advantage: Schema.Number,
  dropped: Schema.optional(Schema.Boolean),
})
export type RolloutRow = typeof RolloutRow.Type

/**
 * An `eval.jsonl` row: the split scored (`heldout` or `train`), the checkpoint (`base`
 * for the base model), the problem and the sample; for a scored sample, whether its total
 * reached the pass@k threshold (`correct`) and the answer majority vote counted it under
 * (`answer`; both absent for masked samples and in files written before they were).
 * @since 0.1.0 @category models
 */
export const EvalRow = Schema.Struct({
  split: Schema.Literals(["heldout", "train"]),
  checkpoint: Schema.String,
  problem: Schema.Unknown,
  ...sampleFields,
  correct: Schema.optional(Schema.Boolean),
  answer: Schema.optional(Schema.String),
})
export type EvalRow = typeof EvalRow.Type

/**
 * One of a step's worst-divergent tokens in `divergence.jsonl`: where it is (group,
 * sample, problem key, position after the prompt), the token and its text, and the
 * sampler's and trainer's log-probs (null where JSON could not hold the number).
 * @since 0.1.0 @category models
 */
export const DivergentTokenRow = Schema.Struct({
  group: Schema.Int,
  sample: Schema.Int,
  key: Schema.String,
  position: Schema.Int,
  token: Schema.Int,
  text: Schema.String,
  sampler: Schema.NullOr(Schema.Number),
  trainer: Schema.NullOr(Schema.Number),
})
export type DivergentTokenRow = typeof DivergentTokenRow.Type

/**
 * A `divergence.jsonl` row: for one rollout-logging step, the histogram of sampler -
 * trainer log-prob differences of the trained tokens (`counts` per bin of `edges`, one
 * more count than edges; see `Metrics.DIVERGENCE_EDGES`), how many tokens it counts, and
 * the worst-divergent tokens.
 * @since 0.1.0 @category models
 */
export const DivergenceRow = Schema.Struct({
  step: Schema.Int,
  edges: Schema.Array(Schema.Number),
  counts: Schema.Array(Schema.Number),
  tokens: Schema.Int,
  worst: Schema.Array(DivergentTokenRow),
})
export type DivergenceRow = typeof DivergenceRow.Type

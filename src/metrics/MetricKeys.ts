/**
 * The keys of a `metrics.jsonl` row, in one place: what the runner writes and what the
 * progress line, the run summary and the report read.
 *
 * Keys of the reward and of episodes are per scope and split: `env/<scope>/<name>` for
 * training, `test/env/<scope>/<name>` for the held-out evaluation, where the scope is `all`
 * or, in a mixture, an env's name ({@link envKey}). A reward component is a name there
 * too (`env/all/<component>`): the framework names none, the env's reward does.
 *
 * @since 0.1.0
 */

/** The step a row belongs to (0: the base policy's evaluation). @since 0.1.0 @category keys */
export const STEP = "step"

/** The scope of every env together. @since 0.1.0 @category keys */
export const ALL = "all"

/** Which samples an env key describes: the training batch or the held-out evaluation. @since 0.1.0 @category models */
export type Split = "train" | "test"

/**
 * The names under `env/<scope>/` that are not reward components: the total, the masked
 * samples (a fraction and a count), the problems evaluated, and the episode counters of
 * multi-turn envs.
 * @since 0.1.0 @category keys
 */
export const EnvStat = {
  total: "reward/total",
  fracMasked: "frac_masked",
  /** samples masked (an infrastructure failure): left out of the total and of every component's mean */
  masked: "masked",
  problems: "problems",
  turns: "turns",
  toolCalls: "tool_calls",
  toolErrors: "tool_errors",
  parseErrors: "parse_errors",
  /** agent envs: tokens per episode that re-tokenizing the agent's messages would have changed */
  agentDiverged: "agent/diverged_tokens",
  /** agent envs: replies per episode the agent re-sent changed past recognizing */
  agentRewritten: "agent/rewritten",
} as const

/** `--dpo`: the fraction of held-out pairs whose chosen completion the policy gives the higher log-prob. @since 0.1.0 @category keys */
export const DPO_ACCURACY = "test/dpo/accuracy"

/** The prefix of the fraction of episodes that ended for a stop reason (`stop/<reason>`). @since 0.1.0 @category keys */
export const STOP_PREFIX = "stop/"

/**
 * The key of `name` (a reward component or an {@link EnvStat}) in `scope` for `split`.
 *
 * @example
 * envKey("test", "all", EnvStat.total) // => "test/env/all/reward/total"
 * envKey("train", "all", "correct")    // => "env/all/correct"
 * @since 0.1.0 @category keys
 */
export const envKey = (split: Split, scope: string, name: string): string => `${split === "test" ? "test/" : ""}env/${scope}/${name}`

/** The prefix of the keys of `scope` for `split` (`env/all/`, `test/env/all/`). @since 0.1.0 @category keys */
export const envPrefix = (split: Split, scope: string): string => envKey(split, scope, "")

/**
 * The name under `env/all/` (train or held-out) that `key` holds, or undefined for a key of
 * another family or scope.
 * @since 0.1.0 @category keys
 */
export const envAllName = (key: string): string | undefined => {
  const m = /^(?:test\/)?env\/all\/(.+)$/.exec(key)
  return m === null ? undefined : m[1]
}

/** Rollouts of a step on which a reward component failed (`reward/<name>/failed`). @since 0.1.0 @category keys */
export const rewardFailed = (component: string): string => `reward/${component}/failed`

/** Episodes of a step masked because a tool's infrastructure failed (`tool/<name>/infra_failed`). @since 0.1.0 @category keys */
export const toolInfraFailed = (tool: string): string => `tool/${tool}/infra_failed`

/** Whether `key` counts a reward component's failures ({@link rewardFailed}). @since 0.1.0 @category keys */
export const isRewardFailed = (key: string): boolean => /^reward\/.+\/failed$/.test(key)

/** Group shapes of a step (see `Metrics.groupFractions`) and its no-op groups. @since 0.1.0 @category keys */
export const ByGroup = {
  fracMixed: "by_group/frac_mixed",
  fracAllGood: "by_group/frac_all_good",
  fracAllBad: "by_group/frac_all_bad",
  fracAllEqual: "by_group/frac_all_equal",
  noOp: "by_group/no_op",
} as const

/** What a step trained on and its loss. @since 0.1.0 @category keys */
export const Train = {
  datums: "train/datums",
  loss: "train/loss",
  activeTokens: "train/active_tokens",
} as const

/**
 * The KL penalty against the base model (`--kl-coef`, `KlPenalty.ts`): two estimates of
 * KL(policy ‖ reference) on the sampled tokens, and how many tokens they average over.
 * @since 0.1.0 @category keys
 */
export const KlPenalty = {
  v1: "kl/policy_ref_v1",
  k3: "kl/policy_ref_k3",
  tokens: "kl/policy_ref_tokens",
} as const

/** The KL term in the loss (`--kl-loss-coef`): its sampled tokens and the clipped share of its trained ones. @since 0.1.0 @category keys */
export const KlLoss = {
  activeTokens: "kl_loss:active_tokens",
  clipFraction: "kl_loss:clip_fraction",
} as const

/**
 * The optimizer's step and the sampler/trainer agreement (see `Metrics.klSampleTrain`).
 * The trainer's own optimizer metrics are written as `optim/<name>` ({@link optim}).
 * @since 0.1.0 @category keys
 */
export const Optim = {
  learningRate: "optim/learning_rate",
  clipFraction: "optim/clip_fraction",
  klSampleTrainV1: "optim/kl_sample_train_v1",
  klSampleTrainV2: "optim/kl_sample_train_v2",
  klSampleTrainK3: "optim/kl_sample_train_k3",
  entropy: "optim/entropy",
  isRatioMean: "optim/is_ratio/mean",
  isRatioP99: "optim/is_ratio/p99",
  isRatioMax: "optim/is_ratio/max",
  essOverN: "optim/ess_over_n",
} as const

/** The key of a metric the trainer's optimizer step reports (`grad_norm` -> `optim/grad_norm`). @since 0.1.0 @category keys */
export const optim = (name: string): string => `optim/${name}`

/** DAPO dynamic sampling (with `dynamicSampling`). @since 0.1.0 @category keys */
export const Dynamic = {
  dropped: "dynamic/dropped",
  refilled: "dynamic/refilled",
  rounds: "dynamic/rounds",
  groups: "dynamic/groups",
} as const

/** Policy versions: how far behind the trained version the batch was sampled, and the version trained. @since 0.1.0 @category keys */
export const PolicyVersion = {
  lagMax: "policy_version/lag_max",
  lagMean: "policy_version/lag_mean",
  trainer: "policy_version/trainer",
} as const

/** Async sampling: groups older than `maxLag` when their step trained. @since 0.1.0 @category keys */
export const Async = {
  staleGroups: "async/stale_groups",
} as const

/** Seconds spent per phase of a step (and on an evaluation). @since 0.1.0 @category keys */
export const Time = {
  sample: "time/sample",
  train: "time/train",
  total: "time/total",
  eval: "time/eval",
} as const

/** Sampled tokens per second of a step. @since 0.1.0 @category keys */
export const Throughput = {
  tokensPerS: "throughput/tokens_per_s",
} as const

/**
 * The hack watch (`run/HackWatch.ts`), at its cadence: per reward component, the rates
 * ({@link hackKey}); the completions watched, the rates that rose while the reward rose
 * (each one warned about) and the watch's seconds.
 * @since 0.1.0 @category keys
 */
export const Hack = {
  watched: "hack/watched",
  warnings: "hack/warnings",
  time: "time/hack_watch",
} as const

/**
 * The rates of a component under the hack watch: the fraction of watched completions whose
 * score a meaning-preserving edit changed, the fraction of exploit variants that scored
 * above the midpoint between a wrong answer and the real one, and the fraction of watched
 * completions on which at least one variant did.
 * @since 0.1.0 @category keys
 */
export const HackRate = {
  transformChanged: "transform_changed",
  exploitWins: "exploit_wins",
  exploitable: "exploitable",
} as const

/**
 * The key of a component's hack-watch rate (`hack/<component>/<rate>`).
 *
 * @example
 * hackKey("correct", HackRate.exploitWins) // => "hack/correct/exploit_wins"
 * @since 0.1.0 @category keys
 */
export const hackKey = (component: string, rate: (typeof HackRate)[keyof typeof HackRate]): string => `hack/${component}/${rate}`

/** The component and rate a hack-watch key names, or undefined for another key. @since 0.1.0 @category keys */
export const hackRateOf = (key: string): { readonly component: string; readonly rate: string } | undefined => {
  const m = /^hack\/(.+)\/(transform_changed|exploit_wins|exploitable)$/.exec(key)
  const component = m?.[1]
  const rate = m?.[2]
  return component === undefined || rate === undefined ? undefined : { component, rate }
}

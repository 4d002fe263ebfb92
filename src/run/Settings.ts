/**
 * What a run is configured with (`config.json`), its defaults, the run's error type, the
 * cross-checks of its settings before any work, and the settings it trains with.
 *
 * @since 0.1.0
 */
import * as Path from "node:path"
import { Effect, Schema } from "effect"
import * as Env from "../vocabulary/Env.ts"
import * as Loss from "../loss/Loss.ts"
import * as Reward from "../vocabulary/Reward.ts"
import type { Aggregation } from "../loss/MicroBatch.ts"

export { DynamicSampling, klCentredOf, klCoefOf, LossAggregation, LrSchedule, Overlong, RecipeName, RunSettings, Teacher } from "../folder/RunSettings.ts"
import { type GameRecord, klCoefOf, type RunSettings } from "../folder/RunSettings.ts"
import type { Game, Player } from "../game/Spec.ts"

/** A run failed: which step, env, reward and problem, and why. @since 0.1.0 @category errors */
export class RunError extends Schema.TaggedError<RunError>()("RunError", {
  reason: Schema.Literals(["Settings", "Reward", "Backend", "Env", "RunFolder", "Resume"]),
  message: Schema.String,
  step: Schema.optional(Schema.Int),
  /** the failure it wraps (a backend's, an env's, the run folder's), kept for `--verbose` and for code that reads it */
  cause: Schema.optional(Schema.Defect()),
}) {}

/** Wraps a failure's message as a `RunError` of a reason and step. @since 0.1.0 @category errors */
export const fail = (reason: RunError["reason"], step: number | undefined) => (e: { readonly message: string }) =>
  new RunError({ reason, message: e.message, cause: e, ...(step !== undefined ? { step } : {}) })

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
    staleGroups: "requeue",
    logRolloutsEvery: 10,
    lrSchedule: { kind: "constant", warmupSteps: 0 },
    lossAggregation: { kind: "token_mean" },
    hackWatchEvery: 10,
    ...overrides,
    // a group sampled k steps ahead is k versions old when it trains: the lag allowed follows k
    // unless given (else every group sampled ahead would be requeued), as the CLI's --max-lag does
    maxLag: overrides.maxLag ?? overrides.maxStepsOffPolicy ?? 1,
  }
}

/**
 * The settings an env suggests (`Env.make({ defaults })`), as overrides of `defaults`.
 * @since 0.1.0 @category constructors
 */
export const envDefaults = (env: { readonly defaults?: Env.RunDefaults | undefined }, base: RunSettings): Partial<RunSettings> => {
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

const settingsError = (message: string) => new RunError({ reason: "Settings", message })

/** The sampling parameters of `env` under `settings`: the defaults, the env's own, then the flags. */
const samplingOf = (settings: RunSettings, env: Env.AnyEnv) => ({ ...settings.sampling, ...env.sampling, ...settings.samplingOverrides })

/**
 * Checks a run's settings against each other and against its envs, before any sampling or
 * training: a bad loss or loss config, a group of one under a group-relative advantage, a
 * `--min-lr` above `--lr`, a `--loss-constant` without `--loss-aggregation constant`, and
 * dynamic sampling with `--sft` fail; an RL loss on samples not drawn at temperature 1 and
 * dynamic sampling with advantages that are not group-relative are warned about.
 * @since 0.1.0 @category running
 */
/** Why the settings cannot stream minibatches (`Stream.ts`), if they ask to and cannot. */
const streamingProblem = (settings: RunSettings): string | undefined => {
  const stream = settings.streamMinibatches
  if (stream === undefined) return undefined
  const flag = `--stream-minibatches ${stream.count}`
  if (stream.count > settings.groups) return `${flag} asks for more minibatches than the step has groups (--groups ${settings.groups}); give at most ${settings.groups}`
  if (settings.dpo !== undefined) return `${flag} streams sampled groups into RL minibatches; --dpo trains on preference pairs: drop one`
  if (settings.async) return `${flag} trains a step while it is sampled, which a sync step does; --async samples the step before it starts: use one or the other`
  if (settings.dynamicSampling !== undefined) return `${flag} cannot stream with --dynamic-sampling, which refills the batch after it is sampled`
  if (!settings.sft && settings.advantage === "batch_std") return `${flag} needs advantages of a group's own (group_std, mean_only, none); batch_std needs the whole batch`
  if (!settings.sft && klCoefOf(settings) > 0) return `${flag} cannot stream with ${settings.teacher !== undefined ? "--teacher" : "--kl-coef"}, whose penalty is centred on the step's mean`
  return undefined
}

export const check = Effect.fn("Settings.check")(function* (settings: RunSettings, source: Env.AnyEnv | Env.Mixture) {
  const loss = Loss.resolveLoss(settings.sft ? "cross_entropy" : settings.loss, settings.sft ? {} : settings.lossConfig)
  if (!loss.ok) return yield* settingsError(`--loss ${settings.loss} --loss-config: ${loss.message}`)
  // Sampler logprobs are those of the distribution sampled from; the trainer's are at T=1.
  if (!settings.sft && settings.loss !== "cross_entropy") {
    for (const [env] of Env.members(source)) {
      const p = samplingOf(settings, env)
      if (p.temperature !== 1 || (p.topP !== undefined && p.topP < 1) || (p.topK !== undefined && p.topK > 0)) {
        yield* Effect.logWarning(
          `${env.name} samples at temperature ${p.temperature}${p.topP !== undefined ? `, top-p ${p.topP}` : ""}${p.topK ? `, top-k ${p.topK}` : ""}: ` +
            `${settings.loss}'s importance ratios compare those logprobs with the trainer's at temperature 1, so they are not 1 even on-policy (the KL metrics will show it)`,
        )
      }
    }
  }
  // One sample per group has nothing to be compared with: every reward advantage would be 0
  // (a teacher's per-token KL still trains it: distillation needs no groups).
  if (!settings.sft && settings.teacher === undefined && settings.groupSize < 2 && (settings.advantage === "group_std" || settings.advantage === "group_sample_std" || settings.advantage === "mean_only")) {
    return yield* settingsError(
      `--group-size ${settings.groupSize} trains nothing with --advantage ${settings.advantage}: a group's advantages are relative to its own mean, ` +
        "so a group of one is always a no-op. Use --group-size 2 or more, or --advantage batch_std or none (with --teacher, a group of one distills)",
    )
  }
  if (settings.dynamicSampling !== undefined && settings.groupSize < 2) {
    return yield* settingsError(`--dynamic-sampling drops groups whose rewards are all equal, and a group of one sample always is: use --group-size 2 or more${settings.recipe === "dapo" ? " (--recipe dapo sets dynamic sampling)" : ""}`)
  }
  const streamed = streamingProblem(settings)
  if (streamed !== undefined) return yield* settingsError(streamed)
  if ((settings.maxStepsOffPolicy ?? 1) > 1 && !settings.async) {
    return yield* settingsError(`--max-steps-off-policy ${settings.maxStepsOffPolicy} samples ahead of the trainer, which only --async does: add --async (or drop the flag)`)
  }
  const schedule = settings.lrSchedule
  if (schedule?.minLr !== undefined && schedule.kind !== "constant" && schedule.minLr > settings.adam.learningRate) {
    return yield* settingsError(
      `--min-lr ${schedule.minLr} is above --lr ${settings.adam.learningRate}: the ${schedule.kind} schedule decays from --lr down to --min-lr; give a --min-lr of at most ${settings.adam.learningRate}`,
    )
  }
  const aggregation = settings.lossAggregation
  if (aggregation !== undefined && aggregation.kind !== "constant" && aggregation.constant !== undefined) {
    return yield* settingsError(
      `--loss-constant ${aggregation.constant} is only used by --loss-aggregation constant (this run has --loss-aggregation ${aggregation.kind}): drop it, or use --loss-aggregation constant`,
    )
  }
  if (settings.dynamicSampling !== undefined && !settings.sft && (settings.advantage === "batch_std" || settings.advantage === "none")) {
    yield* Effect.logWarning(
      `--dynamic-sampling drops groups whose rewards are all equal, but with --advantage ${settings.advantage} such a group still has non-zero advantages (they are not relative to the group): it drops groups that would have trained`,
    )
  }
  if (settings.teacher !== undefined && (settings.klCoef ?? 0) > 0) {
    return yield* settingsError(`--teacher and --kl-coef ${settings.klCoef} both fold a KL into the advantages, through one reference: distill from the teacher (--teacher-coef) or penalize drift from the base (--kl-coef), not both`)
  }
  if (settings.teacher !== undefined && settings.sft) return yield* settingsError("--teacher distills on the policy's own samples, which --sft does not draw: use one or the other")
  const klLoss = settings.klLossCoef ?? 0
  if (klLoss > 0 && (settings.sft || settings.dpo !== undefined || klCoefOf(settings) > 0 || settings.streamMinibatches !== undefined)) {
    const other = settings.sft ? "--sft" : settings.dpo !== undefined ? "--dpo" : settings.teacher !== undefined ? "--teacher" : (settings.klCoef ?? 0) > 0 ? `--kl-coef ${settings.klCoef}` : "--stream-minibatches"
    return yield* settingsError(
      `--kl-loss-coef ${klLoss} adds the KL to the base model to the RL loss; it goes with none of --sft, --dpo, --teacher, --kl-coef (the KL folded into the advantages) or --stream-minibatches, and this run has ${other}: drop one${settings.recipe === "grpo" ? " (--recipe grpo sets --kl-loss-coef 0.04; give --kl-loss-coef 0 to use another)" : ""}`,
    )
  }
  if (settings.dpo !== undefined && (settings.sft || settings.teacher !== undefined || (settings.klCoef ?? 0) > 0)) {
    return yield* settingsError(`--dpo trains on the env's preference pairs against the policy it starts from; it goes with none of ${settings.sft ? "--sft" : settings.teacher !== undefined ? "--teacher" : "--kl-coef"}: use one or the other`)
  }
  if (settings.sft && settings.dynamicSampling !== undefined) {
    return yield* settingsError("--dynamic-sampling drops groups whose rewards are all equal, but --sft trains on reference answers without rewards: use one or the other")
  }
})

/**
 * The loss aggregation in force: `constant` without a constant divides by samples per
 * step x `maxTokens` (Dr. GRPO's generation budget).
 * @since 0.1.0 @category training
 */
export const aggregationOf = (settings: RunSettings, maxTokens: number = settings.sampling.maxTokens): Aggregation => {
  const a = settings.lossAggregation ?? { kind: "token_mean" }
  if (a.kind !== "constant") return { kind: a.kind, ...(a.denominator !== undefined ? { denominator: a.denominator } : {}) }
  return { kind: "constant", constant: a.constant ?? (settings.sft ? settings.groups : settings.groups * settings.groupSize) * maxTokens }
}

/**
 * Each reward component's weight in the total, over the envs of `source` (in a mixture, a
 * component weighted in any env counts as weighted); empty when no env's reward is a
 * weighted sum. What `config.json` records as `rewardWeights`.
 * @since 0.1.0 @category running
 */
export const rewardWeightsOf = (source: Env.AnyEnv | Env.Mixture): Record<string, number> => {
  const weights: Record<string, number> = {}
  for (const [env] of Env.members(source)) {
    for (const [name, w] of Object.entries(Reward.weights(env.reward) ?? {})) {
      if (weights[name] === undefined || weights[name] === 0) weights[name] = w
    }
  }
  return weights
}

/**
 * The settings a run trains with and the ones `config.json` records.
 * - `resolved`: the loss aggregation given, resolved (Dr. GRPO's divisor, when not given,
 *   is samples per step x the most tokens a sample of any env may have);
 * - `inForce`: `resolved` with the sampling settings in force (a single env's own override
 *   the defaults) and each reward component's weight (in a mixture, a component weighted in
 *   any env counts as weighted).
 * @since 0.1.0 @category running
 */
export const inForce = (settings: RunSettings, source: Env.AnyEnv | Env.Mixture): { readonly resolved: RunSettings; readonly inForce: RunSettings } => {
  const members = Env.members(source)
  const weights = rewardWeightsOf(source)
  const maxTokens = Math.max(...members.map(([env]) => samplingOf(settings, env).maxTokens))
  const resolved: RunSettings = settings.lossAggregation === undefined ? settings : { ...settings, lossAggregation: aggregationOf(settings, maxTokens) }
  const single = members.length === 1 ? members[0]?.[0] : undefined
  const games = gamesOf(source)
  return {
    resolved,
    inForce: {
      ...(single !== undefined ? { ...resolved, sampling: samplingOf(resolved, single) } : resolved),
      ...(Object.keys(weights).length > 0 ? { rewardWeights: weights } : {}),
      ...(Object.keys(games).length > 0 ? { games } : {}),
    },
  }
}

/** Who plays a role, in words (`config.json`'s `games`). */
const playerText = (p: Player<unknown>): string =>
  p === "policy" ? "policy" : "frozen" in p ? `frozen ${p.frozen}${p.temperature !== undefined ? ` at temperature ${p.temperature}` : ""}` : "scripted"

/** The roles and players of each game env of `source`, by env name. */
const gamesOf = (source: Env.AnyEnv | Env.Mixture): Record<string, GameRecord> =>
  Object.fromEntries(
    Env.members(source).flatMap(([env]) => {
      const game = env.game as Game<unknown, unknown> | undefined
      if (game === undefined) return []
      const text = (players: Readonly<Record<string, Player<unknown>>>) => Object.fromEntries(game.roles.map((r) => [r, playerText(players[r]!)]))
      return [[env.name, { roles: [...game.roles], players: text(game.players), evalPlayers: text(game.evalPlayers) }]]
    }),
  )

/**
 * Everything `gyre run` takes as an object ({@link RunOptions}), and the run settings it
 * makes over gyre's defaults, the env's suggestions and a resumed run's config
 * ({@link settingsFrom}); a value that does not fit is named by the flag that set it.
 *
 * @since 0.1.0
 */
import * as Path from "node:path"
import { Effect, Schema } from "effect"
import type * as Advantage from "../vocabulary/Advantage.ts"
import type { LossFn } from "../contract/Contract.ts"
import * as Env from "../vocabulary/Env.ts"
import * as Runner from "../Runner.ts"
import * as Teacher from "./Teacher.ts"
import type { LoopsFlags } from "./Backend.ts"
import { templateArgsProblem } from "../tokenizers/TemplateArgs.ts"
import { describeIssues, flagOf } from "./SettingsFlags.ts"

export { describeIssues, FLAG_OF } from "./SettingsFlags.ts"

/**
 * Everything `gyre run` takes, as an object: each field is the flag of the same name
 * (`groupSize` is `--group-size`); an absent field takes the env's, the resumed run's,
 * or gyre's default.
 */
export interface RunOptions {
  /** an env in gyre's envs/ by name, a path to a module with a default Env export, or an Env (or mixture) itself */
  readonly env?: string | Env.AnyEnv | Env.Mixture | undefined
  /** RL steps to run (default 2000) */
  readonly steps?: number | undefined
  /** problems per step (default 8) */
  readonly groups?: number | undefined
  /** completions sampled per problem (default 8) */
  readonly groupSize?: number | undefined
  /** loss function (default ppo) */
  readonly loss?: LossFn | undefined
  /** loss settings, e.g. `{ clip_low_threshold: 0.8 }` */
  readonly lossConfig?: Readonly<Record<string, number | string>> | undefined
  /** advantage normalization (default group_std) */
  readonly advantage?: Advantage.Mode | undefined
  /** Adam learning rate */
  readonly lr?: number | undefined
  /** decoupled weight decay */
  readonly weightDecay?: number | undefined
  /** clip the gradient's global norm (0 = off) */
  readonly gradClip?: number | undefined
  /** most tokens per completion */
  readonly maxTokens?: number | undefined
  /** sampling temperature */
  readonly temperature?: number | undefined
  /** nucleus sampling threshold in (0, 1] */
  readonly topP?: number | undefined
  /** sample from the k most likely tokens (0 = off) */
  readonly topK?: number | undefined
  /** seed for problems, sampling and initialization */
  readonly seed?: number | undefined
  /** the env's difficulty knob */
  readonly difficulty?: number | undefined
  /** datums per forward_backward call (0 = all at once) */
  readonly microBatch?: number | undefined
  /** reward evaluations in flight */
  readonly rewardConcurrency?: number | undefined
  /** sample requests in flight */
  readonly sampleConcurrency?: number | undefined
  /** score the held-out set every N steps (0 = never) */
  readonly evalEvery?: number | undefined
  /** held-out problems per evaluation */
  readonly evalSize?: number | undefined
  /** sampling temperature for evaluation */
  readonly evalTemperature?: number | undefined
  /** save a checkpoint every N steps; the last step is always saved */
  readonly saveEvery?: number | undefined
  /** supervised fine-tuning on the env's reference answers */
  readonly sft?: boolean | undefined
  /** sample step k+1 while step k trains */
  readonly async?: boolean | undefined
  /** embedded: sampler and trainer in worker threads */
  readonly workers?: boolean | undefined
  /**
   * cores that play episodes (`--cores`): 1 (default) plays them on the main thread; N > 1
   * on N worker threads (envs, tools, rewards, tokenizing); `auto` on every core
   */
  readonly cores?: number | "auto" | undefined
  /** async: how many steps ahead rollouts are sampled (default 1) */
  readonly maxStepsOffPolicy?: number | undefined
  /** stop when more than this fraction of a step's samples is masked, 3 steps in a row (default 0.5; 1 = never) */
  readonly maxMasked?: number | undefined
  /** sync: train a step's groups in N minibatches as they are scored */
  readonly streamMinibatches?: number | undefined
  /** with streamMinibatches: one optimizer step per step (default) or per minibatch */
  readonly optimEvery?: "step" | "minibatch" | undefined
  /** async: most policy versions a group may lag (default: maxStepsOffPolicy) */
  readonly maxLag?: number | undefined
  /** async: what to do with groups older than maxLag */
  readonly stale?: "requeue" | "drop" | undefined
  /** run name; the run folder is `<out>/<name>` */
  readonly name?: string | undefined
  /** folder for run folders (default runs) */
  readonly out?: string | undefined
  /** a run folder to continue after its last checkpoint, with its saved settings */
  readonly resume?: string | undefined
  /** "embedded" (default) or the URL of a Tinker-protocol service; a resumed run's default is the one it trained on */
  readonly backend?: string | undefined
  /** embedded: folder of the base model (default: the one shipped with gyre); http: base model name */
  readonly model?: string | undefined
  /** LoRA rank */
  readonly loraRank?: number | undefined
  /** http: folder with tokenizer.json and tokenizer_config.json of the remote model */
  readonly tokenizer?: string | undefined
  /** `--backend loops`: the control plane, --keep-run, --loops-new-run, the ready timeout */
  readonly loops?: LoopsFlags | undefined
  /** write every sample of every Nth step to rollouts.jsonl (0 = never) */
  readonly logRolloutsEvery?: number | undefined
  /** run the hack watch on every Nth step's completions (0 = never) */
  readonly hackWatchEvery?: number | undefined
  /** learning-rate schedule after warmup (default constant) */
  readonly lrSchedule?: "constant" | "linear" | "cosine" | undefined
  /** steps of linear warmup up to lr (default 0) */
  readonly warmupSteps?: number | undefined
  /** the learning rate a linear or cosine schedule decays to (default 0) */
  readonly minLr?: number | undefined
  /** how per-token losses add up: token_mean (default), sequence_mean (GRPO), constant (Dr. GRPO) */
  readonly lossAggregation?: "token_mean" | "sequence_mean" | "constant" | undefined
  /** divisor for lossAggregation constant (default groups x groupSize x maxTokens) */
  readonly lossConstant?: number | undefined
  /** what token_mean and sequence_mean divide by: the samples that train (default) or every sample of the batch */
  readonly lossDenominator?: "trained" | "batch" | undefined
  /** DAPO dynamic sampling: drop no-signal groups and refill in at most N extra rounds per step */
  readonly dynamicSampling?: number | undefined
  /** KL penalty against the base model, folded into the advantages (0 = off) */
  readonly klCoef?: number | undefined
  /** KL to the base model as a k3 term of the loss (DeepSeekMath's GRPO; 0 = off) */
  readonly klLossCoef?: number | undefined
  /** a run folder, runs/<name>/step-N or a state file to start from (weights only, fresh optimizer) */
  readonly initFrom?: string | undefined
  /** a named recipe's settings (`run/Recipes.ts`): grpo, dr-grpo, dapo, gspo, cispo; flags given with it override them */
  readonly recipe?: Runner.RecipeName | undefined
  /** DAPO overlong shaping: the last fraction of maxTokens over which a sample's reward is lowered, down to -1 at maxTokens */
  readonly overlongBuffer?: number | undefined
  /** export the run's spans, logs and metrics to this OTLP/HTTP collector (e.g. http://127.0.0.1:4318) */
  readonly otlp?: string | undefined
  /** also write the run as TensorBoard events in `<run folder>/tensorboard` */
  readonly tensorboard?: boolean | undefined
  /** DPO on the env's preference pairs (`Env.make({ preference })`) against the policy the run starts from, instead of RL */
  readonly dpo?: boolean | undefined
  /** DPO's beta (default 0.1) */
  readonly dpoBeta?: number | undefined
  /** on-policy distillation: a teacher model (shipped name or folder) or run (folder, step-N, state file) that scores every sampled token */
  readonly teacher?: string | undefined
  /** the weight of the teacher's per-token reverse KL in the advantages (default 1) */
  readonly teacherCoef?: number | undefined
  /** the teacher's KL not centred on the step's mean, as tinker-cookbook's distillation recipe (`--teacher-uncentred`); default: centred */
  readonly teacherUncentred?: boolean | undefined
  /** extra variables of the model's chat template (`--template-arg enable_thinking=false`), over the env's `chat.templateArgs` */
  readonly templateArgs?: Readonly<Record<string, unknown>> | undefined
  /** print the header, a line per step and the closing line on stdout (the CLI does; default false: log only) */
  readonly print?: boolean | undefined
}

/** `{ key: value }` when the value is given, else `{}`: spread over the settings it overrides. */
const set = <K extends string, A>(key: K, value: A | undefined): { [P in K]?: A } =>
  (value !== undefined ? { [key]: value } : {}) as { [P in K]?: A }

/**
 * The settings options start from: a resumed run's, else gyre's defaults under the env's
 * suggestions (`Env.make({ defaults })`) under the recipe's settings (`--recipe`).
 */
const baseSettings = (p: RunOptions, source: Env.AnyEnv | Env.Mixture, saved: Runner.RunSettings | undefined) => {
  const out = p.out ?? "runs"
  const runnerDefaults = Runner.defaults(source.name, {
    ...(p.name !== undefined ? { name: p.name, outDir: Path.join(out, p.name) } : {}),
  })
  const recipe = p.recipe !== undefined ? { ...Runner.RECIPES[p.recipe].settings, recipe: p.recipe } : {}
  return saved ?? { ...runnerDefaults, ...(Env.isEnv(source) ? Runner.envDefaults(source, runnerDefaults) : {}), ...recipe }
}

type Base = ReturnType<typeof baseSettings>

/** `maxTokens`, `temperature`, `topP` and `topK` over a resumed run's sampling overrides. */
const samplingOverridesOf = (p: RunOptions, saved: Runner.RunSettings | undefined) => ({
  ...saved?.samplingOverrides,
  ...set("maxTokens", p.maxTokens),
  ...set("temperature", p.temperature),
  ...set("topP", p.topP),
  ...set("topK", p.topK),
})

/** The learning-rate schedule the options set over the base's; nothing when they set none of it. */
const lrScheduleOf = (p: RunOptions, base: Base) => {
  if (p.lrSchedule === undefined && p.warmupSteps === undefined && p.minLr === undefined) return {}
  const minLr = p.minLr ?? base.lrSchedule?.minLr
  return {
    lrSchedule: {
      kind: p.lrSchedule ?? base.lrSchedule?.kind ?? "constant",
      warmupSteps: p.warmupSteps ?? base.lrSchedule?.warmupSteps ?? 0,
      ...(minLr !== undefined ? { minLr } : {}),
    },
  }
}

/** The loss aggregation the options set over the base's; nothing when they set none of it. */
const lossAggregationOf = (p: RunOptions, base: Base) => {
  if (p.lossAggregation === undefined && p.lossConstant === undefined && p.lossDenominator === undefined) return {}
  // the denominator is a setting of its own: --loss-aggregation keeps a recipe's
  const denominator = p.lossDenominator ?? base.lossAggregation?.denominator
  return {
    lossAggregation: {
      kind: p.lossAggregation ?? base.lossAggregation?.kind ?? "token_mean",
      ...(p.lossConstant !== undefined ? { constant: p.lossConstant } : {}),
      ...(denominator !== undefined ? { denominator } : {}),
    },
  }
}

/** The settings before they are checked: the base, then the env's eval suggestions for a new run, then each option given. */
const candidateOf = (
  p: RunOptions,
  source: Env.AnyEnv | Env.Mixture,
  envSpec: string | undefined,
  saved: Runner.RunSettings | undefined,
  resumeDir: string | undefined,
) => {
  const base = baseSettings(p, source, saved)
  const name = base.name
  // the env's eval suggestions (a mixture's first member's) for a new run; a resumed run keeps its own
  const suggested = saved === undefined ? Env.members(source)[0]?.[0].eval : undefined
  return {
    ...base,
    name,
    outDir: resumeDir ?? Path.join(p.out ?? "runs", name),
    env: source.name,
    ...(envSpec !== undefined ? { envSpec } : {}),
    ...set("steps", p.steps),
    ...set("groups", p.groups),
    ...set("groupSize", p.groupSize),
    ...set("loss", p.loss),
    ...(p.lossConfig !== undefined
      ? { lossConfig: Object.fromEntries(Object.entries(p.lossConfig).map(([k, v]) => [k, Number(v)])) }
      : {}),
    ...set("advantage", p.advantage),
    adam: {
      ...base.adam,
      ...set("learningRate", p.lr),
      ...set("weightDecay", p.weightDecay),
      ...set("gradClipNorm", p.gradClip),
    },
    samplingOverrides: samplingOverridesOf(p, saved),
    ...(suggested?.size !== undefined ? { evalSize: suggested.size } : {}),
    ...(suggested?.temperature !== undefined ? { evalTemperature: suggested.temperature } : {}),
    ...set("seed", p.seed),
    ...set("difficulty", p.difficulty),
    ...set("microBatch", p.microBatch),
    ...set("rewardConcurrency", p.rewardConcurrency),
    ...set("sampleConcurrency", p.sampleConcurrency),
    ...set("evalEvery", p.evalEvery),
    ...set("evalSize", p.evalSize),
    ...set("evalTemperature", p.evalTemperature),
    ...set("saveEvery", p.saveEvery),
    ...set("sft", p.sft),
    ...(p.async === true ? { async: true } : {}),
    ...set("maxStepsOffPolicy", p.maxStepsOffPolicy),
    ...set("maxMasked", p.maxMasked),
    ...(p.streamMinibatches !== undefined ? { streamMinibatches: { count: p.streamMinibatches, optimEvery: p.optimEvery ?? "step" } } : {}),
    // a group sampled k steps ahead lags k versions: the default limit lets it train
    ...set("maxLag", p.maxLag ?? p.maxStepsOffPolicy),
    ...set("staleGroups", p.stale),
    ...set("logRolloutsEvery", p.logRolloutsEvery),
    ...set("hackWatchEvery", p.hackWatchEvery),
    ...lrScheduleOf(p, base),
    ...lossAggregationOf(p, base),
    ...(p.dynamicSampling !== undefined ? { dynamicSampling: { maxRounds: p.dynamicSampling } } : {}),
    ...(p.overlongBuffer !== undefined ? { overlong: { fraction: p.overlongBuffer } } : {}),
    ...(p.dpo === true || p.dpoBeta !== undefined ? { dpo: { beta: p.dpoBeta ?? base.dpo?.beta ?? 0.1 } } : {}),
    ...set("klCoef", p.klCoef),
    ...set("klLossCoef", p.klLossCoef),
    ...set("initFrom", p.initFrom),
    ...set("backend", p.backend),
  }
}

/** The teacher of `--teacher`, resolved; a resumed run keeps its own. */
const teacherOf = (p: RunOptions, saved: Runner.RunSettings | undefined) =>
  Effect.gen(function* () {
    const settingsError = (message: string) => new Runner.RunError({ reason: "Settings", message })
    if (saved !== undefined) {
      if (p.teacher !== undefined || p.teacherCoef !== undefined || p.teacherUncentred === true) return yield* settingsError("--teacher, --teacher-coef and --teacher-uncentred: a resumed run keeps the teacher it started with (config.json); start a new run for another")
      return saved.teacher
    }
    if (p.teacher === undefined) {
      if (p.teacherCoef !== undefined) return yield* settingsError(`--teacher-coef ${p.teacherCoef} weighs a teacher's KL: add --teacher <model or run>`)
      if (p.teacherUncentred === true) return yield* settingsError("--teacher-uncentred shapes a teacher's KL: add --teacher <model or run>")
      return undefined
    }
    const coef = p.teacherCoef ?? 1
    if (!(coef > 0) || !Number.isFinite(coef)) return yield* settingsError(`--teacher-coef must be a number above 0, got ${coef}`)
    const teacher = yield* Teacher.resolve(p.teacher, coef, "--teacher", p.backend ?? "embedded")
    return { ...teacher, centred: p.teacherUncentred !== true }
  })

/**
 * The chat-template arguments in force: a new run's env's (every member of a mixture's,
 * which must agree) or a resumed run's, under `--template-arg`; nothing when none is set.
 */
export const templateArgsOf = (p: Pick<RunOptions, "templateArgs">, source: Env.AnyEnv | Env.Mixture, saved: Runner.RunSettings | undefined) =>
  Effect.gen(function* () {
    const settingsError = (message: string) => new Runner.RunError({ reason: "Settings", message })
    const flagProblem = p.templateArgs === undefined ? undefined : templateArgsProblem("--template-arg", p.templateArgs)
    if (flagProblem !== undefined) return yield* settingsError(flagProblem)
    const fromEnv: Record<string, unknown> = {}
    const setBy: Record<string, string> = {}
    for (const [env] of saved === undefined ? Env.members(source) : []) {
      for (const [key, value] of Object.entries(env.chat?.templateArgs ?? {})) {
        // a flag that sets the argument settles the disagreement
        if (key in fromEnv && JSON.stringify(fromEnv[key]) !== JSON.stringify(value) && !(key in (p.templateArgs ?? {}))) {
          return yield* settingsError(
            `the envs of mixture ${source.name} disagree on chat template argument ${key}: ${setBy[key]} sets ${JSON.stringify(fromEnv[key])}, ${env.name} ${JSON.stringify(value)}; set it for the run with --template-arg ${key}=<value>`,
          )
        }
        fromEnv[key] = value
        setBy[key] = env.name
      }
    }
    // JSON values: the env's are checked by Env.make, the flag's above
    const args = { ...(saved?.templateArgs ?? fromEnv), ...p.templateArgs } as Schema.JsonObject
    return Object.keys(args).length > 0 ? { templateArgs: args } : {}
  })

/**
 * Settings from defaults, the env, a resumed run's config and the options, in that order;
 * fails naming each flag (or settings field) whose value does not fit.
 * @since 0.1.0 @category settings
 */
export const settingsFrom = (
  p: RunOptions,
  source: Env.AnyEnv | Env.Mixture,
  envSpec: string | undefined,
  saved: Runner.RunSettings | undefined,
  resumeDir: string | undefined,
) =>
  Effect.gen(function* () {
    if (p.optimEvery !== undefined && p.streamMinibatches === undefined) {
      return yield* new Runner.RunError({ reason: "Settings", message: `--optim-every ${p.optimEvery} says how streamed minibatches step the optimizer: add --stream-minibatches N` })
    }
    if (saved !== undefined && p.recipe !== undefined && p.recipe !== saved.recipe) {
      return yield* new Runner.RunError({
        reason: "Settings",
        message: `--recipe ${p.recipe}: a resumed run keeps the settings it started with (${saved.recipe !== undefined ? `recipe ${saved.recipe}` : "no recipe"}); start a new run for another recipe`,
      })
    }
    const teacher = yield* teacherOf(p, saved)
    const templateArgs = yield* templateArgsOf(p, source, saved)
    const candidate = { ...candidateOf(p, source, envSpec, saved, resumeDir), ...(teacher !== undefined ? { teacher } : {}), ...templateArgs }
    return yield* Schema.decodeUnknownEffect(Runner.RunSettings)(candidate).pipe(
      Effect.mapError((e) => new Runner.RunError({ reason: "Settings", message: `invalid settings: ${describeIssues(e.issue, candidate, flagOf)}` })),
    )
  })

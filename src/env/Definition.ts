/**
 * The env definition: what a user writes (`EnvSpec`), what `Env.make` checks and returns
 * (`Env`), the run settings an env may suggest, and the error every env operation fails
 * with. Separate from the modules that draw problems from an env (`Tasks.ts`,
 * `EvalSet.ts`, `Mixture.ts`), which all build on it.
 *
 * @since 0.1.0
 */
import { Layer, Schema } from "effect"
import type { Agent } from "../agent/Spec.ts"
import type { Game } from "../game/Spec.ts"
import type { SamplingParams } from "../contract/Contract.ts"
import { type Episode, isEpisode } from "./Episode.ts"
import { isReward, type Reward } from "../reward/Model.ts"
import type { Sampler } from "../services/Sampler.ts"
import type { Prompt, Tokenizer } from "../services/Tokenizer.ts"
import type { Source } from "./Sources.ts"
import { type TemplateArgs, templateArgsProblem } from "../tokenizers/TemplateArgs.ts"

// ===== Errors =====

/** A bad environment definition, row or generator. @since 0.1.0 @category errors */
export class EnvError extends Schema.TaggedError<EnvError>()("EnvError", {
  env: Schema.String,
  reason: Schema.Literals(["InvalidDefinition", "InvalidRow", "GeneratorFailed", "ProblemSpaceTooSmall", "NotFound", "SourceUnavailable"]),
  message: Schema.String,
}) {}

// ===== Env =====

/** Evaluation settings. @since 0.1.0 @category models */
export interface EvalSpec {
  /** fraction of the problem space held out from training (default 0.1) */
  readonly heldOut?: number
  /** problems in the eval set (default 200) */
  readonly size?: number
  /** sampling temperature for evaluation (default: the env's) */
  readonly temperature?: number
}

/** The fields an env definition and an env share. @since 0.1.0 @category models */
export interface EnvFields<P, R = never> {
  /** the env's name: the run folder's prefix and the label of its metrics */
  readonly name: string
  /** the Schema of one problem: rows and generated problems are checked against it */
  readonly problem: Schema.Codec<P, unknown>
  /** where problems come from: `Env.seeded`, `Env.rows`, `Env.jsonl`, ... (see docs/environments.md) */
  readonly source: Source<P>
  /** the prompt of a problem: a text, or chat messages */
  readonly prompt: (problem: P) => Prompt
  /** scores a rollout (`Reward.make`, `Reward.weighted`, `gyre/rewards`) */
  readonly reward: Reward<P, R>
  /** a reference completion, for SFT and for pretraining the embedded base model */
  readonly reference?: (problem: P) => string
  /** a preferred and a dispreferred completion of a problem, for `--dpo` */
  readonly preference?: (problem: P) => { readonly chosen: string; readonly rejected: string }
  /** sampling settings of the env's completions: `maxTokens`, `temperature`, `topP`, `topK`, `stop` (flags override them) */
  readonly sampling?: Partial<SamplingParams>
  /**
   * the answer a completion gives, for majority vote (`gyre eval`'s maj@k): completions
   * with the same answer count as one vote (default: the completion with whitespace
   * collapsed, trimmed and lower-cased)
   */
  readonly answer?: (completion: string, problem: P) => string
  /** default difficulty passed to the generator (default 1) */
  readonly difficulty?: number
  /** the held-out split and the eval set (`EvalSpec`) */
  readonly eval?: EvalSpec
  /**
   * a multi-turn episode (`Episode.make`, or `Tool.episode` for tools); without one the
   * env is single-turn: one completion, then the reward
   */
  readonly episode?: Episode<P, any, R>
  /**
   * an agent env's agent (made by `Agent.env`): the function that plays each episode
   * against the run's OpenAI-compatible endpoint, instead of an `episode`
   */
  readonly agent?: Agent<P>
  /** a game env's game (made by `Game.env`): roles played by the policy or scripted players, instead of an `episode` */
  readonly game?: Game<P, any>
  /**
   * the embedded base model folder this env is made for (e.g. a model pretrained on its
   * format); the embedded backend uses it unless `--model` says otherwise
   */
  readonly baseModel?: string
  /** run settings this env suggests instead of the runner's defaults; flags override them */
  readonly defaults?: RunDefaults
  /** how the model's chat template renders this env's prompts (models with one; see `ChatOptions`) */
  readonly chat?: ChatOptions
}

/** How the model's chat template renders an env's prompts (`Env.make({ chat })`). @since 0.1.0 @category models */
export interface ChatOptions {
  /**
   * extra variables of the chat template, as `apply_chat_template(..., **kwargs)` takes
   * them: `{ enable_thinking: false }` makes Qwen3 answer without thinking. Values are
   * JSON; `--template-arg key=value` overrides them, and config.json records them
   */
  readonly templateArgs?: TemplateArgs
}

/** Run settings an env may suggest (`Env.make({ defaults })`). @since 0.1.0 @category models */
export interface RunDefaults {
  /** RL steps (`--steps`; the runner's default 2000) */
  readonly steps?: number
  /** problems per step (`--groups`; default 8) */
  readonly groups?: number
  /** completions per problem (`--group-size`; default 8) */
  readonly groupSize?: number
  /** Adam's learning rate (`--lr`; default 1e-3) */
  readonly learningRate?: number
  /** steps between held-out evaluations (`--eval-every`; default 500; 0 = never) */
  readonly evalEvery?: number
  /** steps between checkpoints (`--save-every`; default 500) */
  readonly saveEvery?: number
}

/** The definition a user writes. @since 0.1.0 @category models */
export interface EnvSpec<P, R = never> extends EnvFields<P, R> {
  /**
   * the services the reward and the episode's tools require (a judge client, a sandbox, a
   * database), as a Layer the runner builds once per run and closes at its end (also on
   * Ctrl-C and on failure). It may use the run's own `Sampler` and `Tokenizer`.
   */
  readonly services?: Layer.Layer<R, unknown, RunServices>
}

/** What an env's `services` layer may use: the run's own sampler and tokenizer. @since 0.1.0 @category models */
export type RunServices = Sampler | Tokenizer

/** @since 0.1.0 @category models */
export interface Env<P, R = never> extends EnvFields<P, R> {
  readonly "~gyre/Env": "~gyre/Env"
  /** the layer that provides what the reward and tools require (the runner builds it once per run) */
  readonly services?: Layer.Layer<any, unknown, RunServices>
}

/** Any env, for code that does not care about the problem type. @since 0.1.0 @category models */
export type AnyEnv = Env<any, never>

/**
 * What `Env.make` reads: an env definition whose reward requires `RR`, whose episode
 * requires `RE` and whose `services` layer provides `ROut`.
 * @since 0.1.0 @category models
 */
export interface EnvInput<P, RR, RE, ROut> extends Omit<EnvFields<P>, "reward" | "episode"> {
  readonly reward: Reward<P, RR>
  readonly episode?: Episode<P, any, RE>
  readonly services?: Layer.Layer<ROut, unknown, RunServices>
}

/**
 * The type error of an env whose `services` do not provide everything its reward and
 * episode require: it names the services missing.
 * @since 0.1.0 @category models
 */
export interface ServicesNotProvided<Missing> {
  readonly "~gyre/Env.make: services must also provide": Missing
}

/** Nothing when `ROut` covers `R`; else a `services` field that names what is missing. @since 0.1.0 @category models */
export type CheckServices<R, ROut> = [Exclude<R, ROut>] extends [never] ? unknown
  : { readonly services: ServicesNotProvided<Exclude<R, ROut>> }

/**
 * Defines an environment. Checks the definition at once.
 *
 * The env requires what its reward and its episode (a `Tool.episode`'s tools) require;
 * `services` must provide all of it, or `Env.make` does not type-check, naming the
 * services missing (`ServicesNotProvided<Judge>`).
 *
 * @example
 * export default Env.make({
 *   name: "math", problem: Problem, source: Env.seeded(({ random }) => ...),
 *   prompt: (p) => `What is ${p.a} plus ${p.b}?`, reward: numericAnswer((p) => p.a + p.b),
 * })
 * @since 0.1.0 @category constructors
 */
export const make = <P, RR = never, RE = never, ROut = never>(
  spec: EnvInput<P, RR, RE, ROut> & NoInfer<CheckServices<RR | RE, ROut>>,
): Env<P> => makeEnv(spec as EnvSpec<P, unknown>)

const makeEnv = <P, R>(spec: EnvSpec<P, R>): Env<P> => {
  const fail = (what: string) => {
    throw new TypeError(`Env.make(${JSON.stringify(spec.name)}): ${what}`)
  }
  if (typeof spec.name !== "string" || !/^[A-Za-z0-9_.-]+$/.test(spec.name)) fail("name must be letters, digits, '_', '-' or '.'")
  if (!Schema.isSchema(spec.problem)) fail("problem must be a Schema")
  if (spec.source === undefined || !["Seeded", "Rows", "Table"].includes(spec.source._tag)) {
    fail("source must be Env.seeded(...), Env.rows([...]), Env.jsonl(path), Env.csv(path), Env.parquet(path) or Env.huggingface(repo)")
  }
  if (typeof spec.prompt !== "function") fail("prompt must be a function from a problem to text or chat messages")
  if (!isReward(spec.reward)) fail("reward must be a Reward (Reward.make, Reward.weighted, ...)")
  if (spec.episode !== undefined && !isEpisode(spec.episode)) fail("episode must be made by Episode.make or Tool.episode")
  if (spec.agent !== undefined && spec.episode !== undefined) fail("give an episode or an agent (Agent.env), not both")
  if (spec.agent !== undefined && typeof spec.agent.run !== "function") fail("agent must be made by Agent.env")
  if (spec.game !== undefined && (spec.episode !== undefined || spec.agent !== undefined)) fail("a game (Game.env) plays its own episodes: give no episode or agent with it")
  if (spec.preference !== undefined && typeof spec.preference !== "function") fail("preference must be a function from a problem to { chosen, rejected } completions")
  if (spec.answer !== undefined && typeof spec.answer !== "function") fail("answer must be a function from a completion and its problem to the answer it gives")
  const heldOut = spec.eval?.heldOut ?? 0.1
  if (!(heldOut >= 0 && heldOut < 1)) fail("eval.heldOut must be in [0, 1)")
  if (spec.services !== undefined && !Layer.isLayer(spec.services)) fail("services must be a Layer (Layer.effect, Layer.succeed, ...)")
  for (const [key, value] of Object.entries(spec.defaults ?? {})) {
    const ok = key === "learningRate" ? typeof value === "number" && value > 0 && Number.isFinite(value)
      : key === "evalEvery" || key === "saveEvery" ? Number.isInteger(value) && value >= 0
      : ["steps", "groups", "groupSize"].includes(key) ? Number.isInteger(value) && value >= 1
      : fail(`defaults.${key} is not a run setting; use steps, groups, groupSize, learningRate, evalEvery or saveEvery`)
    if (!ok) fail(`defaults.${key} must be ${key === "learningRate" ? "a positive number" : key.endsWith("Every") ? "an integer >= 0" : "an integer >= 1"}, got ${String(value)}`)
  }
  const argsProblem = spec.chat?.templateArgs === undefined ? undefined : templateArgsProblem("chat.templateArgs", spec.chat.templateArgs)
  if (argsProblem !== undefined) fail(argsProblem)
  // The requirements are met by `services`, which the runner provides: from outside, the env needs nothing.
  return { ...spec, "~gyre/Env": "~gyre/Env" } as unknown as Env<P>
}

/** @since 0.1.0 @category guards */
export const isEnv = (u: unknown): u is AnyEnv =>
  typeof u === "object" && u !== null && (u as { "~gyre/Env"?: unknown })["~gyre/Env"] === "~gyre/Env"

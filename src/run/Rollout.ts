/**
 * Playing a group's episodes: the first turn of all G episodes is one sample request
 * (one prompt, G samples); each episode then goes on by itself: the env's step sees the
 * turn, answers with an observation (appended as tokens, never trained) or ends it, and
 * the next turn is sampled from everything so far. A single-turn env is the episode of
 * one turn: the same path, ending after the first step.
 *
 * The token record is the truth: every token after the prompt is either sampled (with its
 * sampler log-prob) or observed.
 *
 * @since 0.1.0
 */
import { Context, Effect, Option } from "effect"
import { type BackendError, modelInputFromTokens, type SamplingParams } from "../contract/Contract.ts"
import type * as Datum from "../vocabulary/Datum.ts"
import * as Env from "../vocabulary/Env.ts"
import * as Episode from "../env/Episode.ts"
import { Sampler, type SamplerShape } from "../services/Sampler.ts"
import { Tokenizer, type TokenizerShape } from "../services/Tokenizer.ts"
import { RunError } from "./Settings.ts"

/** One sampled turn and the observation that followed it, if any. @since 0.1.0 @category models */
export interface TurnRecord extends Datum.TurnTokens {
  /** the turn's text, without the end-of-sequence token */
  readonly text: string
  readonly stopReason: "stop" | "length"
  observation?: string
  /** the whole message of the turn's tool or parse error (the observation may show it cut) */
  toolError?: string
  /** a tool's whole result, when the observation shows it cut */
  toolResult?: string
  /** an agent's turn whose request re-sent an earlier reply changed past recognizing: the text the policy was given from that reply on */
  rewritten?: string
}

/** One episode: its turns, why it ended, and what the env counted. @since 0.1.0 @category models */
export interface EpisodeRecord {
  readonly turns: Array<TurnRecord>
  stop: Episode.StopReason
  toolCalls: number
  toolErrors: number
  parseErrors: number
  /** the sum of the env's per-turn rewards */
  turnReward: number
  /** the oldest policy version any of its turns was sampled from */
  version: number
  /** the env's infrastructure failed (`EpisodeError` with `infra`): the episode is masked, never scored */
  infra?: { readonly reason: string; readonly source: string | undefined }
  /** an agent env's episode: what the agent returned (the completion the reward scores) */
  output?: string
  /** an agent env's episode: completions asked for, tokens re-tokenizing would have changed, replies re-sent changed past recognizing */
  agent?: { readonly requests: number; readonly diverged: number; readonly rewritten: number }
}

/** The model's context length, for the stop reason `context_overflow` (the runner provides it). @since 0.1.0 @category services */
export const ContextLength = Context.Reference<number>("gyre/run/ContextLength", { defaultValue: () => Number.MAX_SAFE_INTEGER })

const backendError = (step: number) => (e: BackendError) => new RunError({ reason: "Backend", step, message: `sample (${e.reason}): ${e.message}`, cause: e })

/** What playing one group's episodes reads: the env and its problem, the sampling, the limits and the services. */
interface Game {
  readonly env: Env.AnyEnv
  readonly task: Env.Task<unknown>
  readonly step: number
  readonly affinityKey: string
  /** the policy version the group's samples are pinned to */
  readonly version: number
  readonly promptTokens: ReadonlyArray<number>
  /** the sampling parameters, with the episode's turn stops */
  readonly params: SamplingParams
  readonly episode: Episode.Episode<unknown, unknown, never>
  readonly toolCalls: Episode.ToolCallFormat
  /** the model's context length */
  readonly context: number
  readonly tokenizer: TokenizerShape
  readonly sampler: SamplerShape
}

/** The most tokens the next turn may sample after `inputLength` tokens (prompt included). */
const budget = (game: Game, inputLength: number) =>
  Math.min(game.params.maxTokens, game.episode.limits.maxTokens - (inputLength - game.promptTokens.length), game.context - inputLength)

const turnOf = (
  game: Game,
  input: ReadonlyArray<number>,
  s: { readonly tokens: ReadonlyArray<number>; readonly logprobs: ReadonlyArray<number>; readonly stopReason: "stop" | "length" },
): TurnRecord => ({
  input,
  sampled: s.tokens,
  logprobs: s.logprobs,
  text: game.tokenizer.decode(s.tokens.length > 0 && s.tokens[s.tokens.length - 1] === game.tokenizer.eos ? s.tokens.slice(0, -1) : s.tokens),
  stopReason: s.stopReason,
})

/**
 * What playing one group needs, whatever plays it (an episode, an agent, a game): the env
 * and its problem, the sampling, how many samples, the group's affinity key, the policy
 * version its samples are pinned to, and the step (for errors).
 * @since 0.1.0 @category models
 */
export interface GroupOptions {
  readonly env: Env.AnyEnv
  readonly task: Env.Task<unknown>
  readonly sampling: SamplingParams
  readonly numSamples: number
  readonly affinityKey: string
  readonly version: number
  readonly step: number
}

/**
 * Plays `numSamples` episodes of one problem from `promptTokens`: their first turns in one
 * sample request, then each episode by itself within the episode's time limit.
 * @since 0.1.0 @category rollouts
 */
export const playGroup = Effect.fnUntraced(function* (options: GroupOptions & { readonly promptTokens: ReadonlyArray<number> }) {
  const tokenizer = yield* Tokenizer
  const episode = (options.env.episode ?? Episode.singleTurn) as Episode.Episode<unknown, unknown, never>
  const toolCalls: Episode.ToolCallFormat = tokenizer.toolCalls ?? "brackets"
  const turnStops = episode.stopFor?.(toolCalls) ?? episode.stop
  const stop = turnStops.length > 0 ? [...(options.sampling.stop ?? []), ...turnStops] : options.sampling.stop
  const game: Game = {
    ...options,
    params: { ...options.sampling, ...(stop !== undefined ? { stop } : {}) },
    episode,
    toolCalls,
    context: yield* ContextLength,
    tokenizer,
    sampler: yield* Sampler,
  }
  const P = game.promptTokens.length
  if (P >= game.context) {
    return yield* new RunError({ reason: "Env", step: game.step, message: `env ${game.env.name}, problem ${game.task.key}: the prompt has ${P} tokens, but the model's context is ${game.context}` })
  }
  const first = yield* game.sampler.sample(modelInputFromTokens(game.promptTokens), { ...game.params, maxTokens: Math.min(game.params.maxTokens, budget(game, P)) }, {
    numSamples: options.numSamples,
    affinityKey: game.affinityKey,
    minPolicyVersion: game.version,
  }).pipe(Effect.mapError(backendError(game.step)))
  const records = first.sequences.map((s): EpisodeRecord => ({
    turns: [turnOf(game, game.promptTokens, s)],
    stop: "completed",
    toolCalls: 0,
    toolErrors: 0,
    parseErrors: 0,
    turnReward: 0,
    version: first.policyVersion,
  }))
  yield* Effect.forEach(records, (record, i) =>
    playEpisode(game, record, i).pipe(
      Effect.scoped, // the episode's own resources (Episode.make's open) end with it
      Effect.timeoutOption(episode.limits.timeout),
      Effect.map((done) => {
        if (Option.isNone(done)) record.stop = "timeout"
      }),
    ), { concurrency: "unbounded", discard: true })
  return { episodes: records, version: Math.min(...records.map((r) => r.version)) }
})

/**
 * Goes on with episode `i` after its first turn: the env's step sees each turn and ends the
 * episode or answers with an observation, and the next turn is sampled from everything so
 * far, until the env ends it or a limit does. Updates `record` in place.
 */
const playEpisode = (game: Game, record: EpisodeRecord, i: number) =>
  playTurns(game, record, i).pipe(
    Effect.catch((e): Effect.Effect<void, RunError> => {
      if (e._tag !== "EpisodeError") return Effect.fail(e)
      if (e.infra !== true) return Effect.fail(envFailure(game, e))
      // the env's infrastructure failed, not the policy: the episode is masked and the run goes on
      return Effect.sync(() => {
        record.stop = "infra_failed"
        record.infra = { reason: e.message, source: e.source }
      })
    }),
  )

/** An env's failure that is not the infrastructure's: the run stops, naming the env, the problem and what failed. */
const envFailure = (game: Game, e: Episode.EpisodeError) =>
  new RunError({ reason: "Env", step: game.step, message: `env ${game.env.name}, problem ${game.task.key} ${JSON.stringify(game.task.problem)}: ${e.message}`, cause: e })

const playTurns = Effect.fnUntraced(function* (game: Game, record: EpisodeRecord, i: number) {
  const { env, task, step, tokenizer } = game
  let state = yield* Episode.start(game.episode, task.problem).pipe(
    Effect.mapError((e) => new Episode.EpisodeError({ ...e, message: `the episode could not start: ${e.message}` })),
  )
  let turn = record.turns.at(-1)
  if (turn === undefined) return yield* Effect.die(new Error(`episode ${i} has no first turn to go on from`))
  for (;;) {
    const next = yield* envStep(game, state, turn, record.turns.length - 1)
    state = next.state
    record.toolCalls += next.toolCalls ?? 0
    record.toolErrors += next.toolErrors ?? 0
    record.parseErrors += next.parseErrors ?? 0
    record.turnReward += next.reward ?? 0
    if (next.toolError !== undefined) turn.toolError = next.toolError
    if (next._tag === "Observe" && next.toolResult !== undefined) turn.toolResult = next.toolResult
    if (next._tag === "End") {
      record.stop = next.reason ?? "completed"
      return
    }
    if (record.turns.length >= game.episode.limits.maxTurns) {
      record.stop = "max_turns"
      return
    }
    const observed = yield* tokenizer.encode(next.observation).pipe(
      Effect.mapError((e) => new RunError({ reason: "Env", step, message: `env ${env.name}, problem ${task.key}: cannot encode the observation ${JSON.stringify(next.observation)}: ${e.message}`, cause: e })),
    )
    turn.observation = next.observation
    const input = [...turn.input, ...turn.sampled, ...observed]
    if (input.length >= game.context) {
      record.stop = "context_overflow"
      return
    }
    const room = budget(game, input.length)
    if (room < 1) {
      record.stop = "max_tokens"
      return
    }
    const seed = Env.hash32(`${game.params.seed ?? 0}/${i}/${record.turns.length}`)
    const out = yield* game.sampler.sample(modelInputFromTokens(input), { ...game.params, maxTokens: room, seed }, {
      numSamples: 1,
      affinityKey: game.affinityKey,
      minPolicyVersion: game.version,
    }).pipe(Effect.mapError(backendError(step)))
    const [sequence] = out.sequences
    if (sequence === undefined) {
      return yield* new RunError({ reason: "Backend", step, message: `env ${env.name}, problem ${task.key}: the sampler returned no sequence for turn ${record.turns.length + 1}` })
    }
    record.version = Math.min(record.version, out.policyVersion)
    turn = turnOf(game, input, sequence)
    record.turns.push(turn)
  }
})

/** The env's step on turn `index`; a throw in it (a defect) fails the run like its error does, naming the env, turn and problem. */
const envStep = (game: Game, state: unknown, turn: TurnRecord, index: number) =>
  game.episode.step(
    { state, index, text: turn.text, ended: turn.sampled[turn.sampled.length - 1] === game.tokenizer.eos, stopReason: turn.stopReason, toolCalls: game.toolCalls },
    game.task.problem,
  ).pipe(
    Effect.catchDefect((d) => Effect.fail(new Episode.EpisodeError({ message: d instanceof Error ? d.message : String(d) }))),
    // an infrastructure failure masks the episode (playEpisode); any other stops the run
    Effect.mapError((e) =>
      e.infra === true ? e : new RunError({
        reason: "Env",
        step: game.step,
        message: `env ${game.env.name}, turn ${index + 1} of problem ${game.task.key} ${JSON.stringify(game.task.problem)}: the env's step failed: ${e.message}`,
        cause: e,
      })
    ),
  )

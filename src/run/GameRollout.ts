/**
 * Playing a group's games: G games of one problem, concurrently. Each move goes to the
 * role the game names; a policy role's move is sampled from the role's view (a fresh
 * prompt per move, pinned to the group's version, with the group's affinity key) and
 * recorded as a turn; a frozen model's move is sampled from it and not trained; a scripted
 * role's move is computed. Every role the policy plays
 * becomes a sample of its own, role by role (all G games of the first trained role, then
 * the next), with the role's outcome.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { modelInputFromTokens } from "../contract/Contract.ts"
import * as Env from "../vocabulary/Env.ts"
import { type FrozenModel, FrozenPlayers } from "../game/Frozen.ts"
import type { Game } from "../game/Spec.ts"
import { Sampler } from "../services/Sampler.ts"
import { encodePrompt, Tokenizer } from "../services/Tokenizer.ts"
import { ContextLength, type EpisodeRecord, type GroupOptions } from "./Rollout.ts"
import { RunError } from "./Settings.ts"

/** @since 0.1.0 @category models */
export interface GameOptions extends GroupOptions {
  /** `eval` plays with the game's `evalPlayers` */
  readonly split: Env.Split
}

type AnyGame = Game<unknown, unknown>

const emptyRecord = (version: number): EpisodeRecord => ({ turns: [], stop: "completed", toolCalls: 0, toolErrors: 0, parseErrors: 0, turnReward: 0, version })

/** A user function of the game that throws stops the run, naming the env, the problem and the function. */
const guarded = <A>(options: GameOptions, what: string, f: () => A) =>
  Effect.try({
    try: f,
    catch: (e) => new RunError({ reason: "Env", step: options.step, message: `env ${options.env.name}, problem ${options.task.key}: the game's ${what} failed: ${e instanceof Error ? e.message : String(e)}` }),
  })

/** One policy move: the role's view encoded, one completion sampled (from the policy, or from a frozen model when given). */
const policyMove = Effect.fnUntraced(function* (options: GameOptions, view: string, seed: number, frozen?: FrozenModel, temperature?: number) {
  const tokenizer = yield* Tokenizer
  const input = yield* encodePrompt(tokenizer, view).pipe(Effect.mapError((e) => new RunError({ reason: "Env", step: options.step, message: `env ${options.env.name}: cannot encode the view ${JSON.stringify(view)}: ${e.message}` })))
  const context = yield* ContextLength
  if (input.length >= context) return yield* new RunError({ reason: "Env", step: options.step, message: `env ${options.env.name}: a view has ${input.length} tokens, but the model's context is ${context}` })
  const sampler = frozen?.sampler ?? (yield* Sampler)
  const params = { ...options.sampling, ...(temperature !== undefined ? { temperature } : {}), maxTokens: Math.min(options.sampling.maxTokens, context - input.length), seed }
  const out = yield* sampler.sample(modelInputFromTokens(input), params, {
    numSamples: 1,
    affinityKey: options.affinityKey,
    minPolicyVersion: frozen?.version ?? options.version,
  }).pipe(Effect.mapError((e) => new RunError({ reason: "Backend", step: options.step, message: `sample (${e.reason}): ${e.message}` })))
  const s = out.sequences[0]
  if (s === undefined) return yield* new RunError({ reason: "Backend", step: options.step, message: "the sampler returned no sequence" })
  const body = s.tokens.at(-1) === tokenizer.eos ? s.tokens.slice(0, -1) : s.tokens
  return { input, sampled: s.tokens, logprobs: s.logprobs, stopReason: s.stopReason, text: tokenizer.decode(body), version: out.policyVersion }
})

/** Game `i`: the moves until an outcome, an illegal move or `maxMoves`; each policy role's record and every role's outcome. */
const playGame = (game: AnyGame, options: GameOptions, i: number) =>
  Effect.gen(function* () {
    const players = options.split === "eval" ? game.evalPlayers : game.players
    const records = new Map(game.roles.filter((r) => players[r] === "policy").map((r) => [r, emptyRecord(options.version)]))
    const random = Env.random(`${options.sampling.seed ?? 0}/${i}/scripted`)
    let state = yield* guarded(options, "start", () => game.start(options.task.problem))
    for (let m = 0; m < game.maxMoves; m++) {
      const done = yield* guarded(options, "outcome", () => game.outcome(state))
      if (done !== undefined) return { records, outcomes: done }
      const role = yield* guarded(options, "toMove", () => game.toMove(state))
      const player = players[role]
      if (player === undefined) return yield* new RunError({ reason: "Env", step: options.step, message: `env ${options.env.name}: toMove named ${JSON.stringify(role)}, which is not a role (${game.roles.join(", ")})` })
      let text: string
      if (player === "policy") {
        const view = yield* guarded(options, "view", () => game.view(state, role))
        const turn = yield* policyMove(options, view, Env.hash32(`${options.sampling.seed ?? 0}/${i}/${m}`))
        const record = records.get(role)!
        record.turns.push(turn)
        record.version = Math.min(record.version, turn.version)
        text = turn.text
      } else if ("frozen" in player) {
        const model = (yield* FrozenPlayers).get(player.frozen)
        if (model === undefined) {
          return yield* new RunError({ reason: "Env", step: options.step, message: `env ${options.env.name}: role ${role} is played by the frozen model ${player.frozen}, which this run did not start (gyre run and runTraining start a game's frozen players)` })
        }
        const view = yield* guarded(options, "view", () => game.view(state, role))
        text = (yield* policyMove(options, view, Env.hash32(`${options.sampling.seed ?? 0}/${i}/${m}/frozen`), model, player.temperature)).text
      } else text = yield* guarded(options, "scripted player", () => player.scripted(state, role, random))
      // the other roles see the move after their own last turn
      for (const [other, record] of records) {
        const last = record.turns.at(-1)
        if (other !== role && last !== undefined) last.observation = `${last.observation ?? ""}${role}: ${text}\n`
      }
      const next = yield* guarded(options, "move", () => game.move(state, role, text))
      if ("illegal" in next) {
        const record = records.get(role)
        if (record !== undefined) {
          record.stop = "parse_error"
          record.parseErrors++
          const last = record.turns.at(-1)
          if (last !== undefined) last.toolError = next.illegal
        }
        return { records, outcomes: yield* guarded(options, "illegal", () => game.illegal(state, role)) }
      }
      state = next.state
    }
    const done = yield* guarded(options, "outcome", () => game.outcome(state))
    if (done !== undefined) return { records, outcomes: done }
    for (const record of records.values()) record.stop = "max_turns"
    return { records, outcomes: Object.fromEntries(game.roles.map((r) => [r, 0])) as Readonly<Record<string, number>> }
  })

/**
 * Plays `numSamples` games of one problem; the samples are the policy's roles, role by
 * role, each with its outcome.
 * @since 0.1.0 @category rollouts
 */
export const playGames = Effect.fnUntraced(function* (options: GameOptions) {
  const game = options.env.game as AnyGame | undefined
  if (game === undefined) return yield* Effect.die(new Error(`env ${options.env.name} has no game`))
  const games = yield* Effect.forEach(Array.from({ length: options.numSamples }, (_, i) => i), (i) => playGame(game, options, i), { concurrency: "unbounded" })
  const players = options.split === "eval" ? game.evalPlayers : game.players
  const trained = game.roles.filter((r) => players[r] === "policy")
  const samples = trained.flatMap((role) => games.map((g) => ({ role, episode: g.records.get(role)!, outcome: g.outcomes[role] ?? 0 })))
  return {
    episodes: samples.map((s) => s.episode),
    roles: samples.map((s) => s.role),
    outcomes: samples.map((s) => s.outcome),
    version: Math.min(options.version, ...samples.map((s) => s.episode.version)),
  }
})

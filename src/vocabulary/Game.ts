/**
 * Game envs: episodes with several actors. A turn-based game hands each move to a role;
 * a role is played by the policy being trained, by a frozen model (`Game.frozen`) or by a
 * scripted player. Each role the
 * policy plays is its own sample: its moves (each sampled from the role's view of the
 * game, a fresh prompt per move) are trained with the role's outcome, and advantages are
 * normalized per role within a problem's group of games, so the two sides of a zero-sum
 * self-play game do not cancel.
 *
 * - The env's reward sees `rollout.role` and `rollout.outcome` (the role's result);
 *   `Game.outcome` is the reward that scores the outcome itself.
 * - `evalPlayers` sets who plays in held-out evaluations: the policy against a fixed
 *   scripted opponent measures what self-play taught.
 * - An illegal move ends the game: by default -1 for the role that made it, 1 for the others.
 * - `maxMoves` moves without an outcome is a draw: every role 0.
 *
 * @example
 * export default Game.env({
 *   name: "nim", problem: Problem, source,
 *   roles: ["first", "second"],
 *   start: (p) => ({ stones: p.stones, next: "first" }),
 *   toMove: (s) => s.next,
 *   view: (s) => `Nim: ${s.stones} left, take 1-3:`,
 *   move: (s, role, text) => ...,
 *   outcome: (s) => (s.stones === 0 ? { [s.last]: 1, [other(s.last)]: -1 } : undefined),
 *   evalPlayers: { second: Game.scripted((s, _, random) => String(random.int(1, 3))) },
 * })
 * @since 0.1.0
 */
import type { Random } from "../util/Random.ts"
import { type EnvInput, type Env, make as makeEnv } from "../env/Definition.ts"
import type { Game, Player } from "../game/Spec.ts"
import * as Reward from "./Reward.ts"
import type { Prompt } from "../services/Tokenizer.ts"

export type { Game, MoveResult, Player } from "../game/Spec.ts"

/** The policy being trained plays this role. @since 0.1.0 @category constructors */
export const policy = "policy" as const

/**
 * A frozen player: its moves are sampled from a model that does not train (a model
 * shipped with gyre, a model folder, or a run's checkpoint: `runs/<name>`, `runs/<name>/step-N`),
 * started once for the run. Its tokenizer must be the run's. It samples as the policy
 * does (the env's temperature in training, the eval temperature in evaluation) unless
 * `temperature` says otherwise (0: its most likely move, e.g. an answerer at its most
 * reliable).
 * @since 0.1.0 @category constructors
 */
export const frozen = (model: string, options: { readonly temperature?: number } = {}): { readonly frozen: string; readonly temperature?: number } => {
  if (typeof model !== "string" || model.trim() === "") throw new TypeError("Game.frozen: name a model (a shipped name, a folder) or a run")
  const t = options.temperature
  if (t !== undefined && !(Number.isFinite(t) && t >= 0)) throw new TypeError(`Game.frozen(${JSON.stringify(model)}): temperature must be a number >= 0, got ${String(t)}`)
  return t === undefined ? { frozen: model } : { frozen: model, temperature: t }
}

/** A scripted player: its moves are computed from the state, never sampled or trained. @since 0.1.0 @category constructors */
export const scripted = <S>(move: (state: S, role: string, random: Random) => string): Player<S> => ({ scripted: move })

/** The reward of a game env: the role's outcome. @since 0.1.0 @category rewards */
export const outcome: Reward.Reward<unknown> = Reward.make("outcome", (r) => r.outcome ?? 0)

/** What `Game.env` reads. @since 0.1.0 @category models */
export type GameEnvInput<P, S, RR, ROut> =
  & Omit<EnvInput<P, RR, never, ROut>, "prompt" | "episode" | "reward">
  // the rules as the game holds them (`game/Spec.ts`); who plays, illegal moves and the move limit have defaults here
  & Pick<Game<P, S>, "roles" | "start" | "toMove" | "view" | "move" | "outcome">
  & Partial<Pick<Game<P, S>, "illegal" | "maxMoves" | "players" | "evalPlayers">>
  & {
  /** default `Game.outcome`: the role's result */
  readonly reward?: Reward.Reward<P, RR>
  /** shown in `rollouts.jsonl` (default: the start state's view for the first role) */
  readonly prompt?: (problem: P) => Prompt
}

/**
 * Defines a game env (see the module's comment). Checks the definition at once.
 * @since 0.1.0 @category constructors
 */
export const env = <P, S, RR = never, ROut = never>(spec: GameEnvInput<P, S, RR, ROut>): Env<P> => {
  const fail = (what: string): never => {
    throw new TypeError(`Game.env(${JSON.stringify(spec.name)}): ${what}`)
  }
  if (!Array.isArray(spec.roles) || spec.roles.length < 2 || new Set(spec.roles).size !== spec.roles.length) fail("roles must name two or more distinct roles")
  for (const f of ["start", "toMove", "view", "move", "outcome"] as const) if (typeof spec[f] !== "function") fail(`${f} must be a function`)
  const maxMoves = spec.maxMoves ?? 20
  if (!Number.isInteger(maxMoves) || maxMoves < 1) fail(`maxMoves must be a positive integer, got ${maxMoves}`)
  /** each role's player: the one given, else `base`'s */
  const playersOf = (given: Readonly<Record<string, Player<S>>> | undefined, what: string, base: (role: string) => Player<S>) => {
    for (const role of Object.keys(given ?? {})) if (!spec.roles.includes(role)) fail(`${what} names ${JSON.stringify(role)}, which is not a role (${spec.roles.join(", ")})`)
    const out = Object.fromEntries(spec.roles.map((r) => [r, given?.[r] ?? base(r)])) as Record<string, Player<S>>
    if (!Object.values(out).includes("policy")) fail(`${what} must leave at least one role to the policy`)
    return out
  }
  const players = playersOf(spec.players, "players", () => "policy")
  const evalPlayers = playersOf(spec.evalPlayers, "evalPlayers", (r) => players[r]!)
  const game: Game<P, S> = {
    roles: spec.roles,
    start: spec.start,
    toMove: spec.toMove,
    view: spec.view,
    move: spec.move,
    outcome: spec.outcome,
    illegal: spec.illegal ?? ((_, role) => Object.fromEntries(spec.roles.map((r) => [r, r === role ? -1 : 1]))),
    maxMoves,
    players,
    evalPlayers,
  }
  const { roles: _r, start, toMove, view, move: _m, outcome: _o, illegal: _i, maxMoves: _mm, players: _p, evalPlayers: _e, reward, prompt, ...rest } = spec
  return makeEnv({
    ...rest,
    prompt: prompt ?? ((p: P) => {
      const s = start(p)
      return view(s, toMove(s))
    }),
    reward: reward ?? outcome,
    game,
  } as never)
}

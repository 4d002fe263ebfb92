/**
 * What a game env holds (made by `Game.env`, read by the env definition and the runner):
 * the roles, the rules, and who plays each role in training and in evaluation.
 *
 * @since 0.1.0
 */
import type { Random } from "../util/Random.ts"

/**
 * Who plays a role: `"policy"` (the model being trained: its moves are sampled and
 * trained with the role's outcome), a frozen model (its moves sampled, never trained: a
 * model shipped with gyre, a model folder, or a run's checkpoint, as `--teacher` names
 * one; `temperature` its own, default the env's), or a scripted player (its moves
 * computed from the state, its role and a seeded random source).
 * @since 0.1.0 @category models
 */
export type Player<S> =
  | "policy"
  | { readonly frozen: string; readonly temperature?: number | undefined }
  | { readonly scripted: (state: S, role: string, random: Random) => string }

/** A move's result: the next state, or why the move is illegal. @since 0.1.0 @category models */
export type MoveResult<S> = { readonly state: S } | { readonly illegal: string }

/** The rules of a turn-based game and who plays it. @since 0.1.0 @category models */
export interface Game<P, S> {
  /** the roles' names, in the order they first move (e.g. ["first", "second"]) */
  readonly roles: ReadonlyArray<string>
  /** the state at the start of a game of a problem */
  readonly start: (problem: P) => S
  /** the role to move now */
  readonly toMove: (state: S) => string
  /** what the role to move sees: its prompt */
  readonly view: (state: S, role: string) => string
  /** the state after `role` writes `text` (the sampled move, without its end-of-sequence token) */
  readonly move: (state: S, role: string, text: string) => MoveResult<S>
  /** each role's outcome once the game is over (e.g. 1 for a win, -1 for a loss); undefined while it goes on */
  readonly outcome: (state: S) => Readonly<Record<string, number>> | undefined
  /** each role's outcome when `role` moves illegally (default: -1 for it, 1 for every other role) */
  readonly illegal: (state: S, role: string) => Readonly<Record<string, number>>
  /** moves before the game is called a draw (every role 0) */
  readonly maxMoves: number
  /** who plays each role in training (every role the policy unless said) */
  readonly players: Readonly<Record<string, Player<S>>>
  /** who plays each role in evaluation (default: as in training) */
  readonly evalPlayers: Readonly<Record<string, Player<S>>>
}

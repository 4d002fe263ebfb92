/**
 * The frozen models a run's games are played with (`Game.frozen`), started by the
 * application before the run (`app/Players.ts`) and read by the games' rollouts: each
 * model's sampler and the version it serves, by the name the game gave.
 *
 * @since 0.1.0
 */
import { Context } from "effect"
import type { SamplerShape } from "../services/Sampler.ts"

/** A frozen model's sampler and the policy version it serves. @since 0.1.0 @category models */
export interface FrozenModel {
  readonly sampler: SamplerShape
  readonly version: number
}

/** The frozen models of the run's games, by name (default: none started). @since 0.1.0 @category services */
export const FrozenPlayers = Context.Reference<ReadonlyMap<string, FrozenModel>>("gyre/game/FrozenPlayers", { defaultValue: () => new Map() })

/** The names of the frozen models `players` use. @since 0.1.0 @category combinators */
export const frozenNames = (players: Readonly<Record<string, unknown>>): Array<string> =>
  Object.values(players).flatMap((p) => (typeof p === "object" && p !== null && "frozen" in p && typeof p.frozen === "string" ? [p.frozen] : []))

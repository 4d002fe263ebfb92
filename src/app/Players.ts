/**
 * The frozen players of a run's games (`Game.frozen`): each model the games name, started
 * once for the run as a frozen model (`Teacher.frozen`: its own embedded trainer and
 * sampler, a run's adapter loaded), its tokenizer the run's.
 *
 * @since 0.1.0
 */
import { Effect, Layer } from "effect"
import * as Env from "../vocabulary/Env.ts"
import { type FrozenModel, FrozenPlayers, frozenNames } from "../game/Frozen.ts"
import * as Path from "node:path"
import { frozen, resolve } from "./Teacher.ts"

/** The models `source`'s games name as frozen players, in training or evaluation. */
const namesOf = (source: Env.AnyEnv | Env.Mixture): Array<string> => [
  ...new Set(Env.members(source).flatMap(([env]) => (env.game === undefined ? [] : [...frozenNames(env.game.players), ...frozenNames(env.game.evalPlayers)]))),
]

/** Whether any game of `source` has a frozen player. @since 0.1.0 @category predicates */
export const needed = (source: Env.AnyEnv | Env.Mixture): boolean => namesOf(source).length > 0

/**
 * Starts every frozen player of `source`'s games (each in a folder of `stateDir`).
 * @since 0.1.0 @category layers
 */
export const layer = (source: Env.AnyEnv | Env.Mixture, stateDir: string) =>
  Layer.effect(
    FrozenPlayers,
    Effect.gen(function* () {
      const models = new Map<string, FrozenModel>()
      for (const [i, name] of namesOf(source).entries()) {
        const spec = yield* resolve(name, 1, "Game.frozen")
        models.set(name, yield* frozen(spec, Path.join(stateDir, `frozen-${i}`), "Game.frozen"))
        yield* Effect.logInfo(`frozen player ${name}: ${spec.model}${spec.state !== undefined ? ` with ${spec.state}` : ""}`)
      }
      return models as ReadonlyMap<string, FrozenModel>
    }),
  )

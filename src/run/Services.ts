/**
 * The envs' services (judges, sandboxes, ...): their layers built once in the caller's
 * scope, with the run's own sampler and tokenizer. A run and `gyre eval` both use it.
 *
 * @since 0.1.0
 */
import { Context, Effect, Layer, type Scope } from "effect"
import * as Env from "../Env.ts"
import { Sampler } from "../Sampler.ts"
import { Tokenizer } from "../Tokenizer.ts"
import { RunError } from "./Settings.ts"

/** Builds the services layers of the envs of `source` in the current scope, with the run's own sampler and tokenizer. @since 0.1.0 @category constructors */
export const buildServices = Effect.fnUntraced(function* (source: Env.AnyEnv | Env.Mixture) {
  const withServices = Env.members(source).flatMap(([env]) => (env.services !== undefined ? [{ env, layer: env.services }] : []))
  const [first, ...rest] = withServices
  if (first === undefined) return Context.empty() as Context.Context<never>
  const sampler = yield* Sampler
  const tokenizer = yield* Tokenizer
  return yield* Layer.build(Layer.mergeAll(first.layer, ...rest.map((s) => s.layer))).pipe(
    Effect.provideService(Sampler, sampler),
    Effect.provideService(Tokenizer, tokenizer),
    Effect.mapError((e) =>
      new RunError({
        reason: "Env",
        message: `cannot start the services of env ${withServices.map((s) => s.env.name).join(", ")}: ${e instanceof Error ? e.message : JSON.stringify(e)}`,
      })
    ),
  ) as Effect.Effect<Context.Context<never>, RunError, Scope.Scope>
})

/**
 * The envs' services (judges, sandboxes, ...): their layers built once in the caller's
 * scope, with the run's own sampler and tokenizer. A run and `gyre eval` both use it.
 *
 * @since 0.1.0
 */
import { Context, Effect, Layer, type Scope } from "effect"
import * as AgentEndpoint from "../agent/Endpoint.ts"
import * as Env from "../vocabulary/Env.ts"
import { Sampler } from "../services/Sampler.ts"
import { Tokenizer } from "../services/Tokenizer.ts"
import { RunError } from "./Settings.ts"

/** Builds the services layers of the envs of `source` in the current scope, with the run's own sampler and tokenizer, and the agent endpoint when an env is an agent env. @since 0.1.0 @category constructors */
export const buildServices = Effect.fnUntraced(function* (source: Env.AnyEnv | Env.Mixture) {
  const envs = yield* envServices(source)
  // agent envs call the run's OpenAI-compatible endpoint: one for the run, closed with it
  if (!Env.members(source).some(([env]) => env.agent !== undefined)) return envs
  const endpoint = yield* AgentEndpoint.make().pipe(
    Effect.mapError((e) => new RunError({ reason: "Env", message: `cannot start the agent endpoint: ${e.message}` })),
  )
  return Context.add(envs, AgentEndpoint.Endpoint, endpoint)
})

/** The envs' own services layers, built. */
const envServices = Effect.fnUntraced(function* (source: Env.AnyEnv | Env.Mixture) {
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

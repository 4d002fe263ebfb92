/**
 * The envs' episodes checked at the start (`Episode`'s `check`), with the run's tool-call
 * format and the envs' services: what an episode cannot do (a toolset whose arguments its
 * call syntax cannot carry) stops the run or `gyre eval` before any sampling, with one
 * line naming the env, instead of failing at a turn of the first step.
 *
 * @since 0.1.0
 */
import { type Context, Effect } from "effect"
import * as Env from "../vocabulary/Env.ts"
import { Tokenizer } from "../services/Tokenizer.ts"
import { RunError } from "./Settings.ts"

/**
 * Runs each env's episode `check`, with `services` (the envs' own, built) and the first
 * training problem of its env. Fails with a `RunError` (reason `Env`) naming the env.
 * @since 0.1.0 @category running
 */
export const checkEpisodes = Effect.fn("Run.checkEpisodes")(function* (source: Env.AnyEnv | Env.Mixture, services: Context.Context<never>) {
  const format = (yield* Tokenizer).toolCalls ?? "brackets"
  for (const [env] of Env.members(source)) {
    const check = env.episode?.check
    if (check === undefined) continue
    const task = yield* Env.problemAt(env, { seed: 0, index: 0, split: "train" }).pipe(
      Effect.mapError((e) => new RunError({ reason: "Env", message: `env ${env.name}: no problem to check its episode with: ${e.message}`, cause: e })),
    )
    yield* Effect.scoped(check({ format, problem: task.problem })).pipe(
      Effect.provideContext(services),
      Effect.mapError((e) => new RunError({ reason: "Env", message: `env ${env.name}: ${e.message}`, cause: e })),
      // a throw in the env's code (a server spec that reads what it was not given) says what it threw
      Effect.catchDefect((d) => Effect.fail(new RunError({ reason: "Env", message: `env ${env.name}: ${d instanceof Error ? d.message : String(d)}`, cause: d }))),
    ) as Effect.Effect<void, RunError>
  }
})

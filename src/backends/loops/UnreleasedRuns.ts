/**
 * Loops runs that gyre could not deactivate while a command ran, so that the command
 * ends with an error instead of `done`: a run left up bills until someone stops it.
 *
 * A run is released while its scope closes, after training's own outcome is known, and
 * a release cannot fail the scope. So `Provision.ts` notes a run it could not deactivate
 * here (when the service is present), and `guard` fails the command once the backend is
 * closed, naming each run and the command that stops it (the last line the user sees).
 *
 * @since 0.1.0
 */
import { Cause, Context, Effect, Exit } from "effect"
import { BackendError } from "../../contract/Contract.ts"

/** A run left up: its id, why its deactivation failed, and the command that stops it. @since 0.1.0 @category models */
export interface Unreleased {
  readonly runId: string
  readonly why: string
  readonly stop: string
}

/** @since 0.1.0 @category models */
export interface UnreleasedRunsShape {
  readonly note: (run: Unreleased) => Effect.Effect<void>
}

/**
 * Where the release of a Loops run notes a run it could not deactivate.
 * @since 0.1.0 @category services
 */
export class UnreleasedRuns extends Context.Service<UnreleasedRuns, UnreleasedRunsShape>()("gyre/loops/UnreleasedRuns") {}

/** The error that ends a command whose runs may still bill: one line per run, each with the command that stops it. @since 0.1.0 @category errors */
export const billingError = (runs: ReadonlyArray<Unreleased>, before?: string): BackendError =>
  new BackendError({
    reason: "Unavailable",
    operation: "loops deactivate",
    message: [
      ...(before !== undefined ? [before] : []),
      ...runs.map((r) => `Loops run ${r.runId} could not be deactivated (${r.why}): it may still be billing. Stop it with: ${r.stop}`),
    ].join("\n"),
  })

const messageOf = (error: unknown) => (error instanceof Error ? error.message : typeof error === "string" ? error : JSON.stringify(error))

/**
 * Runs `effect` (which builds and closes a Loops backend) and fails after it when a run
 * could not be deactivated: with the billing error after a success, or with the
 * effect's own failure followed by it. An interruption or a defect is left as it is (the
 * release has logged the run and its command already).
 *
 * @example
 * ```ts
 * UnreleasedRuns.guard(Runner.run(settings, env, { resume: false }).pipe(Effect.provide(Loops.layer(options))))
 * // => fails with "Loops run r1 could not be deactivated (...): it may still be billing. Stop it with: gyre loops deactivate r1"
 * ```
 * @since 0.1.0 @category combinators
 */
export const guard = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E | BackendError, Exclude<R, UnreleasedRuns>> =>
  Effect.gen(function* () {
    const noted: Array<Unreleased> = []
    const service = UnreleasedRuns.of({ note: (run) => Effect.sync(() => void noted.push(run)) })
    const exit = yield* Effect.exit(Effect.provideService(effect, UnreleasedRuns, service))
    if (noted.length === 0) return yield* exit
    if (Exit.isSuccess(exit)) return yield* billingError(noted)
    const failure = Cause.findErrorOption(exit.cause)
    if (failure._tag === "None") return yield* exit
    return yield* billingError(noted, messageOf(failure.value))
  })

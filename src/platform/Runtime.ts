/**
 * Running a program as the Node process's main: SIGINT and SIGTERM interrupt it (so its
 * finalizers run, e.g. the runner's checkpoint on Ctrl-C), its exit sets the exit code
 * (0 on success, 130 when interrupted, 1 or the error's own code on failure), and a
 * failure is written once to stderr as `error: <message>`, the format of every gyre
 * command's errors (a defect, a bug, adds its stack).
 *
 * @since 0.1.0
 */
import { Cause, Effect, Runtime } from "effect"

/** What a failed program writes to stderr: `error: <message>`, with the stack of a defect. @since 0.1.0 @category running */
export const errorText = (cause: Cause.Cause<unknown>): string => {
  const error = Cause.squash(cause)
  if (Cause.hasFails(cause)) {
    const message = error instanceof Error ? error.message : typeof error === "string" ? error : JSON.stringify(error)
    return `error: ${message}`
  }
  return `error: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`
}

/** Whether nothing is left to write: an interruption, or an error already shown (the CLI's answer to a bad command line). */
const reported = (cause: Cause.Cause<unknown>): boolean => Cause.hasInterruptsOnly(cause) || !Runtime.getErrorReported(Cause.squash(cause))

/** The program runner: signals interrupt it, its exit sets the exit code. */
const run = Runtime.makeRunMain(({ fiber, teardown }) => {
  let signalled = false
  const onSignal = () => {
    signalled = true
    fiber.interruptUnsafe(fiber.id)
  }
  process.on("SIGINT", onSignal)
  process.on("SIGTERM", onSignal)
  fiber.addObserver((exit) => {
    process.off("SIGINT", onSignal)
    process.off("SIGTERM", onSignal)
    teardown(exit, (code) => {
      if (signalled || code !== 0) process.exit(code)
    })
  })
})

/**
 * Runs `effect` as the program. The process exits once the effect ends after a signal or
 * with a non-zero code; after a success it ends when nothing else keeps it alive.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { runMain } from "./src/platform/index.ts"
 * runMain(Effect.log("hello"))
 * ```
 * @since 0.1.0 @category running
 */
export const runMain = <A, E>(effect: Effect.Effect<A, E>): void =>
  run(
    effect.pipe(Effect.tapCause((cause) => reported(cause) ? Effect.void : Effect.sync(() => process.stderr.write(`${errorText(cause)}\n`)))),
    { disableErrorReporting: true },
  )

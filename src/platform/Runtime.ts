/**
 * Running a program as the Node process's main: SIGINT and SIGTERM interrupt it (so its
 * finalizers run, e.g. the runner's checkpoint on Ctrl-C), its exit sets the exit code
 * (0 on success, 130 when interrupted, 1 or the error's own code on failure), and a
 * failure is logged once.
 *
 * @since 0.1.0
 */
import { Runtime } from "effect"

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
export const runMain = Runtime.makeRunMain(({ fiber, teardown }) => {
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

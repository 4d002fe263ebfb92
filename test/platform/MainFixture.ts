/**
 * A test fixture: a program run with gyre's `runMain`, started as its own process by
 * Runtime.test.ts. `wait`: prints "ready" and waits until interrupted, printing
 * "finalized" from its finalizer; `fail`: fails with "boom"; `ok`: succeeds.
 */
import { Effect } from "effect"
import { runMain } from "../../src/platform/index.ts"

const mode = process.argv[2]
const say = (text: string) => Effect.sync(() => process.stdout.write(`${text}\n`))

const program =
  mode === "wait"
    ? Effect.andThen(say("ready"), Effect.never).pipe(Effect.ensuring(say("finalized")))
    : mode === "fail"
      ? Effect.fail(new Error("boom"))
      : say("done")

runMain(program)

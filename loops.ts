/**
 * `npx tsx loops runs | deactivate <run_id> | checkpoints <run_id>`: Loops runs and their checkpoints.
 */
import { Effect } from "effect"
import { Command } from "effect/cli"
import { loopsCommand } from "./src/cli/loops.ts"
import { version } from "./src/Paths.ts"
import { runMain, Services } from "./src/platform/index.ts"

loopsCommand.pipe(Command.run({ version }), Effect.provide(Services.layer), runMain)

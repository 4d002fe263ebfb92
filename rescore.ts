/**
 * `npx tsx rescore runs/<name> [env or reward module]`: scores a run's stored rollouts
 * again with a changed reward, without sampling.
 */
import { Effect } from "effect"
import { Command } from "effect/cli"
import { version } from "./src/Paths.ts"
import { rescoreCommand } from "./src/cli/rescore.ts"
import { runMain, Services } from "./src/platform/index.ts"

rescoreCommand.pipe(Command.run({ version }), Effect.provide(Services.layer), runMain)

/**
 * `npx tsx check <env> [--samples N] [--split train|eval|all]`: every problem of the split
 * through its rewards' checks (a gold `mathAnswer` cannot read, ...), before training.
 */
import { Effect } from "effect"
import { Command } from "effect/cli"
import { version } from "./src/Paths.ts"
import { checkCommand } from "./src/cli/check.ts"
import { runMain, Services } from "./src/platform/index.ts"

checkCommand.pipe(Command.run({ version }), Effect.provide(Services.layer), runMain)

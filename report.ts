/**
 * `npx tsx report runs/<name>`: (re)writes runs/<name>/report.html.
 */
import { Effect } from "effect"
import { Command } from "effect/cli"
import { version } from "./src/Paths.ts"
import { reportCommand } from "./src/cli/report.ts"
import { runMain, Services } from "./src/platform/index.ts"

reportCommand.pipe(Command.run({ version }), Effect.provide(Services.layer), runMain)

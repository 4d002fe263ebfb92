/**
 * `npx tsx report runs/<name>`: (re)writes runs/<name>/report.html.
 */
import { NodeRuntime, NodeServices } from "@effect/platform-node"
import { Effect } from "effect"
import { Command } from "effect/cli"
import { version } from "./src/cli/paths.ts"
import { reportCommand } from "./src/cli/report.ts"

reportCommand.pipe(Command.run({ version }), Effect.provide(NodeServices.layer), NodeRuntime.runMain)

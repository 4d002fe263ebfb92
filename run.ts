/**
 * `npx tsx run <env> [flags]`; `npx tsx run --help` lists every flag.
 */
import { Effect } from "effect"
import { Command } from "effect/cli"
import { cliPresenter, runCommand } from "./src/cli/run.ts"
import { runMain, Services } from "./src/platform/index.ts"

runCommand.pipe(
  Command.run({ version: "0.1.0" }),
  Effect.provide(cliPresenter),
  Effect.provide(Services.layer),
  runMain,
)

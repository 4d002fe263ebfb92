/**
 * `npx tsx run <env> [flags]`; `npx tsx run --help` lists every flag.
 */
import { NodeRuntime, NodeServices } from "@effect/platform-node"
import { Effect } from "effect"
import { Command } from "effect/cli"
import { cliPresenter, runCommand } from "./src/cli/run.ts"

runCommand.pipe(
  Command.run({ version: "0.1.0" }),
  Effect.provide(cliPresenter),
  Effect.provide(NodeServices.layer),
  NodeRuntime.runMain,
)

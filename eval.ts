/**
 * `npx tsx eval <env> [--from runs/<name>[/step-N]] [flags]`; `npx tsx eval --help` lists every flag.
 */
import { NodeRuntime, NodeServices } from "@effect/platform-node"
import { Effect } from "effect"
import { Command } from "effect/cli"
import { evalCommand } from "./src/cli/eval.ts"
import { version } from "./src/cli/paths.ts"
import { cliPresenter } from "./src/cli/run.ts"

evalCommand.pipe(
  Command.run({ version }),
  Effect.provide(cliPresenter),
  Effect.provide(NodeServices.layer),
  NodeRuntime.runMain,
)

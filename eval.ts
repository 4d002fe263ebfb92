/**
 * `npx tsx eval <env> [--from runs/<name>[/step-N]] [flags]`; `npx tsx eval --help` lists every flag.
 */
import { Effect } from "effect"
import { Command } from "effect/cli"
import { evalCommand } from "./src/cli/eval.ts"
import { version } from "./src/Paths.ts"
import { cliPresenter } from "./src/cli/run.ts"
import { runMain, Services } from "./src/platform/index.ts"

evalCommand.pipe(
  Command.run({ version }),
  Effect.provide(cliPresenter),
  Effect.provide(Services.layer),
  runMain,
)

#!/usr/bin/env node
/**
 * The `gyre` command: `gyre run`, `gyre eval`, `gyre serve`, `gyre report`, `gyre export`, `gyre rescore`, `gyre loops`, `gyre init`;
 * `gyre --help` and `gyre <command> --help` list every flag.
 */
import { Effect } from "effect"
import { Command } from "effect/cli"
import { version } from "../Paths.ts"
import { gyreCommand } from "./commands.ts"
import { cliPresenter } from "./run.ts"
import { runMain, Services } from "../platform/index.ts"

export { gyreCommand }

gyreCommand.pipe(
  Command.run({ version }),
  Effect.provide(cliPresenter),
  Effect.provide(Services.layer),
  runMain,
)

#!/usr/bin/env node
/**
 * The `gyre` command: `gyre run`, `gyre eval`, `gyre serve`, `gyre report`, `gyre export`, `gyre rescore`, `gyre loops`;
 * `gyre --help` and `gyre <command> --help` list every flag.
 */
import { Effect } from "effect"
import { Command } from "effect/cli"
import { exportCommand } from "./export.ts"
import { evalCommand } from "./eval.ts"
import { loopsCommand } from "./loops.ts"
import { version } from "../Paths.ts"
import { reportCommand } from "./report.ts"
import { rescoreCommand } from "./rescore.ts"
import { cliPresenter, runCommand } from "./run.ts"
import { serveCommand } from "./serve.ts"
import { runMain, Services } from "../platform/index.ts"

/** The `gyre` command and its subcommands. */
export const gyreCommand = Command.make("gyre").pipe(
  Command.withDescription(
    "Reinforcement learning for language models: train (run), score (eval), serve the embedded model (serve), render a run (report), export a LoRA adapter (export), score a run's rollouts again with a changed reward (rescore), Loops runs and checkpoints (loops).",
  ),
  Command.withSubcommands([runCommand, evalCommand, serveCommand, reportCommand, exportCommand, rescoreCommand, loopsCommand]),
)

gyreCommand.pipe(
  Command.run({ version }),
  Effect.provide(cliPresenter),
  Effect.provide(Services.layer),
  runMain,
)

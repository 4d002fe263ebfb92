/**
 * The `gyre` command tree, without running it: `main.ts` runs it, and the reference page
 * of every command's flags (scripts/reference-docs.ts) is generated from it.
 */
import { Command } from "effect/cli"
import { checkCommand } from "./check.ts"
import { exportCommand } from "./export.ts"
import { evalCommand } from "./eval.ts"
import { initCommand } from "./init.ts"
import { loopsCommand } from "./loops.ts"
import { reportCommand } from "./report.ts"
import { rescoreCommand } from "./rescore.ts"
import { runCommand } from "./run.ts"
import { serveCommand } from "./serve.ts"

/** The `gyre` command and its subcommands. */
export const gyreCommand = Command.make("gyre").pipe(
  Command.withDescription(
    "Reinforcement learning for language models: train (run), score (eval), serve the embedded model (serve), render a run (report), export a LoRA adapter (export), score a run's rollouts again with a changed reward (rescore), Loops runs and checkpoints (loops), scaffold an env and its test (init), check an env's problems before training (check).",
  ),
  Command.withSubcommands([runCommand, evalCommand, serveCommand, reportCommand, exportCommand, rescoreCommand, loopsCommand, initCommand, checkCommand]),
)

/**
 * `npx tsx export runs/<name> [--step N] --out DIR`: the run's LoRA adapter in PEFT layout.
 */
import { Effect } from "effect"
import { Command } from "effect/cli"
import { version } from "./src/Paths.ts"
import { exportCommand } from "./src/cli/export.ts"
import { runMain, Services } from "./src/platform/index.ts"

exportCommand.pipe(Command.run({ version }), Effect.provide(Services.layer), runMain)

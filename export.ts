/**
 * `npx tsx export runs/<name> [--step N] --out DIR`: the run's LoRA adapter in PEFT layout.
 */
import { NodeRuntime, NodeServices } from "@effect/platform-node"
import { Effect } from "effect"
import { Command } from "effect/cli"
import { version } from "./src/cli/paths.ts"
import { exportCommand } from "./src/Export.ts"

exportCommand.pipe(Command.run({ version }), Effect.provide(NodeServices.layer), NodeRuntime.runMain)

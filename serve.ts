/**
 * `npx tsx serve [--port N] [--replicas N] [--help]`: the embedded trainer and
 * sampler behind the Tinker wire protocol.
 */
import { Effect } from "effect"
import { Command } from "effect/cli"
import { version } from "./src/Paths.ts"
import { serveCommand } from "./src/cli/serve.ts"
import { runMain, Services } from "./src/platform/index.ts"

serveCommand.pipe(Command.run({ version }), Effect.provide(Services.layer), runMain)

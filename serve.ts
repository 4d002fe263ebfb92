/**
 * `npx tsx serve [--port N] [--replicas N] [--help]`: the embedded trainer and
 * sampler behind the Tinker wire protocol.
 */
import { NodeRuntime, NodeServices } from "@effect/platform-node"
import { Effect } from "effect"
import { Command } from "effect/cli"
import { serveCommand } from "./src/backends/http/Serve.ts"

serveCommand.pipe(Command.run({ version: "0.1.0" }), Effect.provide(NodeServices.layer), NodeRuntime.runMain)

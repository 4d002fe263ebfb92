/**
 * `npx tsx report runs/<name>`: (re)writes runs/<name>/report.html.
 */
import { NodeRuntime, NodeServices } from "@effect/platform-node"
import { Console, Effect } from "effect"
import { Argument, Command } from "effect/cli"
import * as Report from "./src/Report.ts"

const report = Command.make("report", { dir: Argument.String("run-folder").pipe(Argument.withDescription("a run folder, e.g. runs/math-2026-11-29T12-00-00")) }, ({ dir }) =>
  Report.write(dir).pipe(Effect.flatMap((path) => Console.log(`wrote ${path}`)))).pipe(
    Command.withDescription("Render a run folder's metrics and rollouts as one self-contained HTML page"),
  )

report.pipe(Command.run({ version: "0.1.0" }), Effect.provide(NodeServices.layer), NodeRuntime.runMain)

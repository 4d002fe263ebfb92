/**
 * `npx tsx report runs/<name>`: (re)writes runs/<name>/report.html.
 */
import * as Fs from "node:fs"
import * as Path from "node:path"
import { NodeRuntime, NodeServices } from "@effect/platform-node"
import { Console, Effect } from "effect"
import { Argument, Command } from "effect/cli"
import * as Report from "./src/Report.ts"
import { RunLogError } from "./src/RunLog.ts"

const report = Command.make("report", { dir: Argument.String("run-folder").pipe(Argument.withDescription("a run folder, e.g. runs/math-2026-11-29T12-00-00")) }, ({ dir }) =>
  Effect.gen(function* () {
    if (!Fs.existsSync(Path.join(dir, "config.json")) && !Fs.existsSync(Path.join(dir, "metrics.jsonl"))) {
      return yield* new RunLogError({ path: dir, message: "not a run folder (no config.json or metrics.jsonl); give a folder a run wrote, e.g. runs/math-2026-11-29T12-00-00" })
    }
    return yield* Report.writeOrFail(dir)
  }).pipe(
    Effect.flatMap((path) => Console.log(`wrote ${path}`)),
    Effect.catch((e) =>
      Console.error(`error: ${e.path}: ${e.message}`).pipe(Effect.andThen(Effect.sync(() => {
        process.exitCode = 1
      })))
    ),
  )).pipe(
    Command.withDescription("Render a run folder's metrics and rollouts as one self-contained HTML page"),
  )

report.pipe(Command.run({ version: "0.1.0" }), Effect.provide(NodeServices.layer), NodeRuntime.runMain)

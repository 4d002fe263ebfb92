/**
 * `gyre report runs/<name>`: (re)writes the run folder's report.html.
 */
import { Console, Effect } from "effect"
import { Argument, Command } from "effect/cli"
import * as Report from "../app/Report.ts"
import * as RunFolder from "../folder/RunFolder.ts"
import * as PlatformFs from "../platform/FileSystem.ts"

/** The `report` command. */
export const reportCommand = Command.make("report", { dir: Argument.String("run-folder").pipe(Argument.withDescription("a run folder, e.g. runs/math-2026-11-29T12-00-00")) }, ({ dir }) =>
  Effect.gen(function* () {
    const files = RunFolder.paths(dir)
    if (!(yield* PlatformFs.exists(files.config)) && !(yield* PlatformFs.exists(files.metrics))) {
      return yield* new RunFolder.RunFolderError({
        reason: "Missing",
        path: dir,
        message: `${dir}: not a run folder (no config.json or metrics.jsonl); give a folder a run wrote, e.g. runs/math-2026-11-29T12-00-00`,
      })
    }
    return yield* Report.writeOrFail(dir)
  }).pipe(
    Effect.flatMap((path) => Console.log(`wrote ${path}`)),
    Effect.catch((e) =>
      Console.error(`error: ${e.message}`).pipe(Effect.andThen(Effect.sync(() => {
        process.exitCode = 1
      })))
    ),
  )).pipe(
    Command.withDescription("Render a run folder's metrics and rollouts as one self-contained HTML page"),
  )

/**
 * Where a run starts: a fresh run folder, or a resumed one after its last checkpoint.
 *
 * @since 0.1.0
 */
import * as Fs from "node:fs"
import * as Path from "node:path"
import { Effect } from "effect"
import * as RunLog from "../RunLog.ts"
import { Trainer } from "../Trainer.ts"
import { fail, RunError, type RunSettings } from "./Settings.ts"

/** Where a run starts: fresh, or after its last complete checkpoint. @since 0.1.0 @category running */
export const prepare = Effect.fnUntraced(function* (settings: RunSettings, resume: boolean) {
  const trainer = yield* Trainer
  const files = RunLog.paths(settings.outDir)
  let start = 0
  if (!resume && Fs.existsSync(files.config)) {
    return yield* new RunError({
      reason: "RunFolder",
      message: `run folder ${settings.outDir} already holds a run: continue it with --resume ${settings.outDir}, or pick another --name`,
    })
  }
  if (resume) {
    // Rewriting drops a line torn by a crash, so rows appended after it stay readable.
    const checkpoints = yield* RunLog.filterJsonl(files.checkpoints, () => true).pipe(Effect.mapError(fail("RunFolder", undefined)))
    const last = checkpoints[checkpoints.length - 1]
    if (last !== undefined) {
      // A run folder that was moved still finds its state files.
      const recorded = String(last["path"])
      const moved = Path.join(files.state, Path.basename(recorded))
      const path = !recorded.includes("://") && !Fs.existsSync(recorded) && Fs.existsSync(moved) ? moved : recorded
      yield* trainer.loadState(path, { withOptimizer: true }).pipe(
        Effect.mapError((e) => new RunError({ reason: "Resume", message: `cannot load checkpoint ${path}: ${e.message}` })),
      )
      start = Number(last["step"])
      yield* Effect.logInfo(`resuming ${settings.outDir} after step ${start} from ${path}`)
    } else {
      yield* Effect.logInfo(`no checkpoint in ${settings.outDir}: starting from step 1`)
    }
    // Drop rows of steps after the checkpoint: they are redone with the same data and seeds.
    for (const file of [files.metrics, files.rollouts]) {
      // With no checkpoint the run starts over, base evaluation (step 0) included.
      yield* RunLog.filterJsonl(file, (row) => start > 0 && Number(row["step"]) <= start).pipe(Effect.mapError(fail("RunFolder", undefined)))
    }
  }
  yield* RunLog.writeAtomic(files.config, JSON.stringify(settings, null, 2) + "\n").pipe(Effect.mapError(fail("RunFolder", undefined)))
  const published = yield* trainer.saveWeightsForSampler(`step-${start}`).pipe(
    Effect.mapError((e) => new RunError({ reason: "Backend", message: `save_weights_for_sampler (${e.reason}): ${e.message}` })),
  )
  return { start, version: published.version }
})


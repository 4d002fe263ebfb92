/**
 * Where a run starts: a fresh run folder, or a resumed one after its newest checkpoint
 * that loads.
 *
 * @since 0.1.0
 */
import * as Fs from "node:fs"
import * as Path from "node:path"
import { Effect } from "effect"
import type { BackendError } from "../Contract.ts"
import * as RunLog from "../RunLog.ts"
import { Trainer } from "../Trainer.ts"
import { fail, RunError, type RunSettings } from "./Settings.ts"

type Files = ReturnType<typeof RunLog.paths>

/** Failures that say a checkpoint itself is bad (missing, truncated, corrupt, refused), so an older one may do. */
const badCheckpoint = (e: BackendError) => e.reason === "InvalidInput" || e.reason === "Rejected"

/**
 * Whether a run folder holds work worth keeping: a finished step (a `metrics.jsonl` row
 * after step 0) or a checkpoint. A folder left by a run that failed at startup holds
 * neither, only its `config.json` and perhaps the base evaluation (step 0).
 */
const holdsWork = (files: Files) =>
  Effect.gen(function* () {
    const checkpoints = yield* RunLog.readJsonl(files.checkpoints)
    if (checkpoints.length > 0) return true
    const metrics = yield* RunLog.readJsonl(files.metrics)
    return metrics.some((row) => Number(row["step"]) > 0)
  })

/** Deletes temp files left by writes that a kill interrupted, in the run folder and its state folder. */
const removeTempFiles = (files: Files) =>
  Effect.gen(function* () {
    const removed = yield* RunLog.removeTempFiles([files.dir, files.state])
    if (removed.length > 0) yield* Effect.logDebug(`removed ${removed.length} temp file(s) left by an interrupted write: ${removed.join(", ")}`)
  })

/**
 * Loads the newest checkpoint that loads, newest first. A checkpoint whose file is
 * missing or does not decode (a power loss can leave its row on disk without its bytes)
 * is skipped with a warning naming the file and why; a transport failure stops the resume.
 * Returns the step loaded (0 when the folder has no checkpoint).
 */
const loadNewest = (files: Files, settings: RunSettings) =>
  Effect.gen(function* () {
    const trainer = yield* Trainer
    // Rewriting drops a line torn by a crash, so rows appended after it stay readable.
    const checkpoints = yield* RunLog.filterJsonl(files.checkpoints, () => true)
    if (checkpoints.length === 0) {
      yield* Effect.logInfo(`no checkpoint in ${settings.outDir}: starting from step 1`)
      return 0
    }
    const skipped: Array<string> = []
    for (let i = checkpoints.length - 1; i >= 0; i--) {
      const row = checkpoints[i]!
      // A run folder that was moved still finds its state files.
      const recorded = String(row["path"])
      const moved = Path.join(files.state, Path.basename(recorded))
      const path = !recorded.includes("://") && !Fs.existsSync(recorded) && Fs.existsSync(moved) ? moved : recorded
      const step = Number(row["step"])
      const loaded = yield* trainer.loadState(path, { withOptimizer: true }).pipe(
        Effect.as(undefined),
        Effect.catchIf(badCheckpoint, (e) => Effect.succeed(e.message)),
        Effect.mapError((e) => new RunError({ reason: "Resume", message: `cannot load checkpoint ${path} (${e.reason}): ${e.message}` })),
      )
      if (loaded === undefined) {
        yield* Effect.logInfo(`resuming ${settings.outDir} after step ${step} from ${path}`)
        // Rows of the skipped checkpoints go: those steps are redone and saved again.
        if (i < checkpoints.length - 1) yield* RunLog.filterJsonl(files.checkpoints, (r) => Number(r["step"]) <= step)
        return step
      }
      skipped.push(`${path}: ${loaded}`)
      yield* Effect.logWarning(`checkpoint step ${step} cannot be loaded, ${path}: ${loaded}; ${i > 0 ? "trying the one before it" : "no older checkpoint"}`)
    }
    return yield* new RunError({
      reason: "Resume",
      message: `no checkpoint in ${files.checkpoints} loads (${skipped.join("; ")}): start a new run with another --name, ` +
        `or delete ${files.checkpoints} to run this one again from step 1`,
    })
  })

/** Where a run starts: fresh, or after its newest complete checkpoint. @since 0.1.0 @category running */
export const prepare = Effect.fnUntraced(function* (settings: RunSettings, resume: boolean) {
  const trainer = yield* Trainer
  const files = RunLog.paths(settings.outDir)
  let start = 0
  if (!resume && Fs.existsSync(files.config)) {
    if (yield* holdsWork(files).pipe(Effect.mapError(fail("RunFolder", undefined)))) {
      return yield* new RunError({
        reason: "RunFolder",
        message: `run folder ${settings.outDir} already holds a run: continue it with --resume ${settings.outDir}, or pick another --name`,
      })
    }
    // A run that failed at startup left only its config (and maybe the base evaluation): start over in its folder.
    yield* Effect.logInfo(`run folder ${settings.outDir} holds no finished step and no checkpoint (a run that stopped at startup): starting over in it`)
    yield* Effect.try({
      try: () => {
        for (const file of [files.metrics, files.rollouts, files.checkpoints, files.report]) Fs.rmSync(file, { force: true })
      },
      catch: (e) => new RunError({ reason: "RunFolder", message: `cannot clear ${settings.outDir} for a new run: ${(e as Error).message}` }),
    })
  }
  yield* removeTempFiles(files).pipe(Effect.mapError(fail("RunFolder", undefined)))
  if (resume) {
    start = yield* loadNewest(files, settings).pipe(Effect.mapError((e) => e instanceof RunError ? e : fail("RunFolder", undefined)(e)))
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

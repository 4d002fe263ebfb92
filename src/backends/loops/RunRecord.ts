/**
 * `loops.json` in a run folder: the control plane a run folder trained on and the Loops
 * runs it provisioned. A run is written here as soon as it is created, before anything
 * else happens on it, and marked deactivated (`deactivatedAt`) once gyre has
 * deactivated it. A run with no `deactivatedAt` is live as far as gyre knows: a crash,
 * a failed deactivation, or `--keep-run` left it up, and the next start in the folder
 * reports it.
 *
 * @since 0.1.0
 */
import * as Path from "node:path"
import { Effect, Result, Schema } from "effect"
import { decode } from "../../util/Decode.ts"
import * as RunLog from "../../folder/RunLog.ts"
import * as Files from "../../platform/FileSystem.ts"
import { LoopsError } from "./Errors.ts"

/** The record's file name in a run folder. @since 0.1.0 @category constants */
export const FILE = "loops.json"

/** One provisioned run. @since 0.1.0 @category models */
export const RecordedRun = Schema.Struct({
  id: Schema.String,
  sessionId: Schema.String,
  baseModel: Schema.String,
  createdAt: Schema.String,
  /** when gyre deactivated it; null while it may be up */
  deactivatedAt: Schema.NullOr(Schema.String),
  /** left up on purpose (`--keep-run`) */
  kept: Schema.optional(Schema.Boolean),
  /** the protocol its data plane was found to speak (`DataPlane.probe`) */
  dataPlane: Schema.optional(Schema.Literals(["loops", "tinker"])),
})
export type RecordedRun = typeof RecordedRun.Type

/** @since 0.1.0 @category models */
export const RunRecord = Schema.Struct({
  /** the control plane's URL */
  controlPlane: Schema.String,
  runs: Schema.Array(RecordedRun),
})
export type RunRecord = typeof RunRecord.Type

const failure = (file: string, message: string) => new LoopsError({ reason: "Config", route: file, message })

/** The record of `runDir`; none when the folder has no `loops.json`. @since 0.1.0 @category io */
export const read = Effect.fn("Loops.RunRecord.read")(function* (runDir: string) {
  const fs = yield* Files.current
  const file = Path.join(runDir, FILE)
  if (!(yield* Files.exists(file))) return undefined
  const text = yield* fs.readFileString(file).pipe(Effect.mapError((e) => failure(file, `cannot read ${file}: ${Files.messageOf(e)}`)))
  const json = yield* Effect.try({ try: () => JSON.parse(text) as unknown, catch: (e) => failure(file, `${file} is not JSON: ${(e as Error).message}`) })
  const r = decode(RunRecord)(json)
  if (Result.isFailure(r)) return yield* failure(file, `${file} is not a Loops run record: ${r.failure}`)
  return r.success
})

/** The runs of a record that gyre has not deactivated. @since 0.1.0 @category combinators */
export const live = (record: RunRecord | undefined): ReadonlyArray<RecordedRun> => (record?.runs ?? []).filter((r) => r.deactivatedAt === null)

const write = (runDir: string, record: RunRecord) =>
  Effect.gen(function* () {
    const fs = yield* Files.current
    yield* fs.makeDirectory(runDir, { recursive: true }).pipe(Effect.mapError((e) => failure(runDir, `cannot create ${runDir}: ${Files.messageOf(e)}`)))
    yield* RunLog.writeAtomic(Path.join(runDir, FILE), JSON.stringify(record, null, 2) + "\n").pipe(Effect.mapError((e) => failure(e.path, e.message)))
  })

/** Adds a run (or replaces the entry of the same id). @since 0.1.0 @category io */
export const add = Effect.fn("Loops.RunRecord.add")(function* (runDir: string, controlPlane: string, run: RecordedRun) {
  const record = yield* read(runDir)
  const runs = (record?.runs ?? []).filter((r) => r.id !== run.id)
  yield* write(runDir, { controlPlane, runs: [...runs, run] })
})

/** Updates the entry of run `id`, if the record has it. @since 0.1.0 @category io */
export const update = Effect.fn("Loops.RunRecord.update")(function* (runDir: string, id: string, change: (run: RecordedRun) => RecordedRun) {
  const record = yield* read(runDir)
  if (record === undefined || !record.runs.some((r) => r.id === id)) return
  yield* write(runDir, { ...record, runs: record.runs.map((r) => (r.id === id ? change(r) : r)) })
})

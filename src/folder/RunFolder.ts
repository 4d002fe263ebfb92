/**
 * The run folder `runs/<name>/` as data: the readers and writers of its files, which
 * decode and encode with the Schemas of `RunFolderSchemas.ts` (re-exported here):
 * `config.json` ({@link Config}, {@link ConfigHints}), `checkpoints.jsonl`
 * ({@link CheckpointRow}), `metrics.jsonl` ({@link MetricsRow}), `rollouts.jsonl`
 * ({@link RolloutRow}), `eval.jsonl` ({@link EvalRow}) and `divergence.jsonl`
 * ({@link DivergenceRow}).
 *
 * A row that does not decode fails with a {@link RunFolderError} naming the file, the line
 * and the field. Folders written by earlier versions read the same (their rows fit these
 * Schemas; an older `config.json`'s snake_case `adam` keys are read as camelCase). The
 * durable writes themselves are `RunLog.ts`'s.
 *
 * @since 0.1.0
 */
import * as Path from "node:path"
import { Effect, Schema, SchemaIssue } from "effect"
import * as PlatformFs from "../platform/FileSystem.ts"
import * as RunLog from "./RunLog.ts"
import { CheckpointRow, Config, ConfigHints, DivergenceRow, EvalRow, MetricsRow, RolloutRow } from "./RunFolderSchemas.ts"

export {
  CheckpointRow,
  Config,
  ConfigHints,
  DivergenceRow,
  DivergentTokenRow,
  EvalRow,
  Message,
  MetricsRow,
  RolloutRow,
  sampleFields,
  TrainerRecord,
  TurnRow,
} from "./RunFolderSchemas.ts"

// ===== Errors =====

/**
 * A run folder's file could not be read or written (`Io`), is not there (`Missing`), or
 * holds a row that does not decode (`Decode`: the line and field are named).
 * @since 0.1.0 @category errors
 */
export class RunFolderError extends Schema.TaggedError<RunFolderError>()("RunFolderError", {
  reason: Schema.Literals(["Io", "Missing", "Decode"]),
  path: Schema.String,
  line: Schema.optional(Schema.Int),
  field: Schema.optional(Schema.String),
  message: Schema.String,
}) {}

// ===== Paths =====

/** Where the files of a run folder are. @since 0.1.0 @category models */
export const paths = RunLog.paths

/** The files of a run folder. @since 0.1.0 @category models */
export type Files = ReturnType<typeof paths>

// ===== Decoding =====

/** The first issue of a Schema failure: its field (dotted path) and message. */
const firstIssue = (issue: SchemaIssue.Issue, value: unknown): { readonly field: string | undefined; readonly text: string } => {
  const [first] = SchemaIssue.makeFormatterStandardSchemaV1()(issue).issues
  if (first === undefined) return { field: undefined, text: "does not decode" }
  const path = (first.path ?? []).map((k) => String(typeof k === "object" && k !== null ? k.key : k))
  const given = path.reduce<unknown>((v, k) => (typeof v === "object" && v !== null ? (v as Record<string, unknown>)[k] : undefined), value)
  const what = first.message.startsWith("Expected ") ? `must be ${first.message.slice("Expected ".length)}` : first.message
  const got = given !== undefined && !/, got /.test(what) ? `, got ${JSON.stringify(given)}` : ""
  return { field: path.length > 0 ? path.join(".") : undefined, text: `${what}${got}` }
}

/** Decodes one value of `path` (at `line`, when known) with `schema`; a failure names the file, line and field. */
const decodeAt = <S extends Schema.Decoder<unknown>>(schema: S, path: string, line: number | undefined) => {
  const run = Schema.decodeUnknownEffect(schema)
  return (value: unknown): Effect.Effect<S["Type"], RunFolderError> =>
    run(value).pipe(Effect.mapError((e) => {
      const { field, text } = firstIssue(e.issue, value)
      const where = line !== undefined ? `${path} line ${line}` : path
      return new RunFolderError({
        reason: "Decode",
        path,
        ...(line !== undefined ? { line } : {}),
        ...(field !== undefined ? { field } : {}),
        message: `${where}: ${field !== undefined ? `field ${field} ` : ""}${text}`,
      })
    }))
}

const ioError = (e: RunLog.RunLogError) => new RunFolderError({ reason: "Io", path: e.path, message: `${e.path}: ${e.message}` })

/**
 * The rows of a JSONL file of the run folder, decoded with `schema` (a missing file has
 * none; a line torn by a crash is skipped). With `tailBytes`, only the rows of its last
 * `tailBytes` bytes.
 * @since 0.1.0 @category io
 */
export const readRows = <S extends Schema.Decoder<unknown>>(schema: S, path: string, options: { readonly tailBytes?: number } = {}) =>
  RunLog.readJsonlLines(path, options).pipe(
    Effect.mapError(ioError),
    Effect.flatMap((lines) => Effect.forEach(lines, ({ line, value }) => decodeAt(schema, path, line)(value))),
  )

/**
 * Lines of a JSONL file of the run folder as `RunLog.readJsonlLines` read them, decoded
 * with `schema`, each row with its line number; a failure names the file, line and field.
 * @since 0.1.0 @category io
 */
export const decodeLines = <S extends Schema.Decoder<unknown>>(schema: S, path: string, lines: ReadonlyArray<RunLog.JsonlLine>) =>
  Effect.forEach(lines, ({ line, value }) => decodeAt(schema, path, line)(value).pipe(Effect.map((row) => ({ line, row }))))

/** The rows of `checkpoints.jsonl`, oldest first. @since 0.1.0 @category io */
export const readCheckpoints = Effect.fn("RunFolder.readCheckpoints")(function* (files: Files) {
  return yield* readRows(CheckpointRow, files.checkpoints)
})

/** The rows of `metrics.jsonl`, in order. @since 0.1.0 @category io */
export const readMetrics = Effect.fn("RunFolder.readMetrics")(function* (files: Files) {
  return yield* readRows(MetricsRow, files.metrics)
})

/** The rows of `rollouts.jsonl` (with `tailBytes`, the last ones only). @since 0.1.0 @category io */
export const readRollouts = Effect.fn("RunFolder.readRollouts")(function* (files: Files, options: { readonly tailBytes?: number } = {}) {
  return yield* readRows(RolloutRow, files.rollouts, options)
})

/** The rows of `divergence.jsonl` (with `tailBytes`, the last ones only). @since 0.1.0 @category io */
export const readDivergence = Effect.fn("RunFolder.readDivergence")(function* (files: Files, options: { readonly tailBytes?: number } = {}) {
  return yield* readRows(DivergenceRow, files.divergence, options)
})

/**
 * Keeps only the rows of a JSONL file of the run folder whose `step` is at most `last`
 * (none with `last` 0), rewriting it atomically: what a resume after step `last` keeps.
 * Every row must decode as a `{ step }` row.
 * @since 0.1.0 @category io
 */
export const keepThrough = Effect.fn("RunFolder.keepThrough")(function* (path: string, last: number) {
  const lines = yield* RunLog.readJsonlLines(path).pipe(Effect.mapError(ioError))
  const rows = yield* Effect.forEach(lines, ({ line, value }) => decodeAt(Stepped, path, line)(value).pipe(Effect.map(({ step }) => ({ step, value }))))
  if (!(yield* PlatformFs.exists(path))) return
  const kept = rows.filter((r) => last > 0 && r.step <= last)
  yield* RunLog.writeAtomic(path, kept.map((r) => JSON.stringify(r.value) + "\n").join("")).pipe(Effect.mapError(ioError))
})

/** Any row of a step-keyed JSONL file (metrics, rollouts, checkpoints, divergence). */
const Stepped = Schema.Struct({ step: Schema.Int })

// ===== config.json =====

/** Keys of `adam` a config.json written before AdamParams was camelCase has, and their names now. */
const OLD_ADAM_KEYS: ReadonlyArray<readonly [string, string]> = [
  ["learning_rate", "learningRate"],
  ["weight_decay", "weightDecay"],
  ["grad_clip_norm", "gradClipNorm"],
]

/**
 * A config.json as this version reads it: an older run's snake_case `adam` keys
 * (`learning_rate`, `weight_decay`, `grad_clip_norm`) become camelCase; a key already in
 * camelCase wins over its old name.
 * @since 0.1.0 @category io
 */
export const upgradeConfig = (json: unknown): unknown => {
  if (typeof json !== "object" || json === null || !("adam" in json)) return json
  const adam = (json as { adam: unknown }).adam
  if (typeof adam !== "object" || adam === null || Array.isArray(adam)) return json
  const renamed: Record<string, unknown> = { ...adam }
  for (const [old, now] of OLD_ADAM_KEYS) {
    if (!(old in renamed)) continue
    if (!(now in renamed)) renamed[now] = renamed[old]
    delete renamed[old]
  }
  return { ...json, adam: renamed }
}

/** `config.json` of `files` as JSON (older keys upgraded); fails `Missing` when there is none. */
const readConfigJson = (files: Files) =>
  Effect.gen(function* () {
    const file = files.config
    if (!(yield* PlatformFs.exists(file))) return yield* new RunFolderError({ reason: "Missing", path: file, message: `${file} not found` })
    const text = yield* Effect.flatMap(PlatformFs.current, (fs) => fs.readFileString(file)).pipe(
      Effect.mapError((e) => new RunFolderError({ reason: "Io", path: file, message: `${file}: ${PlatformFs.messageOf(e)}` })),
    )
    return yield* Effect.try({
      try: () => upgradeConfig(JSON.parse(text)),
      catch: (e) => new RunFolderError({ reason: "Decode", path: file, message: `${file} is not valid JSON: ${(e as Error).message}` }),
    })
  })

/**
 * A run folder's `config.json`, decoded: what `--resume` and `gyre eval --from` read.
 * Fails `Missing` when there is none, `Decode` naming the field that does not fit.
 * @since 0.1.0 @category io
 */
export const readConfig = Effect.fn("RunFolder.readConfig")(function* (files: Files) {
  const json = yield* readConfigJson(files)
  return yield* decodeAt(Config, files.config, undefined)(json).pipe(
    Effect.mapError((e) => new RunFolderError({ ...e, message: `${files.config} is not a run's config: ${e.message.slice(files.config.length + 2)}` })),
  )
})

/**
 * The fields of a run folder's `config.json` that export and the report use
 * ({@link ConfigHints}) and the whole of it as JSON; both undefined when it is missing.
 * @since 0.1.0 @category io
 */
export const readConfigHints = Effect.fn("RunFolder.readConfigHints")(function* (files: Files) {
  if (!(yield* PlatformFs.exists(files.config))) return { hints: undefined, json: undefined }
  const json = yield* readConfigJson(files)
  const hints = yield* decodeAt(ConfigHints, files.config, undefined)(json)
  return { hints, json: json as Readonly<Record<string, unknown>> }
})

/** Writes `config.json` atomically, its keys in the order `config` has them. @since 0.1.0 @category io */
export const writeConfig = Effect.fn("RunFolder.writeConfig")(function* (files: Files, config: Config) {
  const encoded: Record<string, unknown> = yield* Schema.encodeEffect(Config)(config).pipe(Effect.mapError((e) => encodeError(files.config, e.issue, config)))
  const ordered = Object.fromEntries(Object.keys(config).filter((k) => k in encoded).map((k) => [k, encoded[k]]))
  yield* RunLog.writeAtomic(files.config, JSON.stringify(ordered, null, 2) + "\n").pipe(Effect.mapError(ioError))
})

// ===== Writing rows =====

const encodeError = (path: string, issue: SchemaIssue.Issue, value: unknown) => {
  const { field, text } = firstIssue(issue, value)
  return new RunFolderError({
    reason: "Decode",
    path,
    ...(field !== undefined ? { field } : {}),
    message: `a row for ${path} does not fit its Schema: ${field !== undefined ? `field ${field} ` : ""}${text}`,
  })
}

/**
 * Appends rows to a JSONL file of the run folder, encoded with `schema`, in one durable
 * write (`RunLog.appendJsonl`).
 * @since 0.1.0 @category io
 */
export const appendRows = <S extends Schema.Codec<unknown, unknown>>(schema: S, path: string, rows: ReadonlyArray<S["Type"]>) =>
  Effect.forEach(rows, (row) => Schema.encodeEffect(schema)(row).pipe(Effect.mapError((e) => encodeError(path, e.issue, row)))).pipe(
    Effect.flatMap((encoded) => RunLog.appendJsonl(path, encoded).pipe(Effect.mapError(ioError))),
  )

/** Appends a step's metrics row. @since 0.1.0 @category io */
export const appendMetrics = Effect.fn("RunFolder.appendMetrics")(function* (files: Files, row: MetricsRow) {
  yield* appendRows(MetricsRow, files.metrics, [row])
})

/** Appends a step's logged samples. @since 0.1.0 @category io */
export const appendRollouts = Effect.fn("RunFolder.appendRollouts")(function* (files: Files, rows: ReadonlyArray<RolloutRow>) {
  yield* appendRows(RolloutRow, files.rollouts, rows)
})

/** Records a saved checkpoint (after its state exists). @since 0.1.0 @category io */
export const appendCheckpoint = Effect.fn("RunFolder.appendCheckpoint")(function* (files: Files, row: CheckpointRow) {
  yield* appendRows(CheckpointRow, files.checkpoints, [row])
})

/** Appends a step's divergence row. @since 0.1.0 @category io */
export const appendDivergence = Effect.fn("RunFolder.appendDivergence")(function* (files: Files, row: DivergenceRow) {
  yield* appendRows(DivergenceRow, files.divergence, [row])
})

/** Writes `eval.jsonl` at `path` atomically, one row per sample. @since 0.1.0 @category io */
export const writeEval = Effect.fn("RunFolder.writeEval")(function* (path: string, rows: ReadonlyArray<EvalRow>) {
  const encoded = yield* Effect.forEach(rows, (row) => Schema.encodeEffect(EvalRow)(row).pipe(Effect.mapError((e) => encodeError(path, e.issue, row))))
  yield* RunLog.writeAtomic(path, encoded.map((r) => JSON.stringify(r)).join("\n") + (encoded.length > 0 ? "\n" : "")).pipe(Effect.mapError(ioError))
})

// ===== Reading a folder =====

/**
 * The state file of a checkpoint row: the path recorded, else (a run folder that was
 * moved) the file of the same name in the folder's `state/`. Remote paths are kept.
 * @since 0.1.0 @category io
 */
export const statePath = Effect.fn("RunFolder.statePath")(function* (files: Files, row: CheckpointRow) {
  const recorded = row.path
  const moved = Path.join(files.state, Path.basename(recorded))
  if (recorded.includes("://") || (yield* PlatformFs.exists(recorded))) return recorded
  return (yield* PlatformFs.exists(moved)) ? moved : recorded
})

/**
 * Whether a run folder holds work worth keeping: a checkpoint, or a finished step (a
 * `metrics.jsonl` row after step 0). A folder left by a run that failed at startup holds
 * neither, only its `config.json` and perhaps the base evaluation (step 0).
 * @since 0.1.0 @category io
 */
export const holdsWork = Effect.fn("RunFolder.holdsWork")(function* (files: Files) {
  if ((yield* readCheckpoints(files)).length > 0) return true
  return (yield* readMetrics(files)).some((row) => row.step > 0)
})

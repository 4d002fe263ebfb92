/**
 * The run folder `runs/<name>/`: `config.json`, `metrics.jsonl`, `rollouts.jsonl`,
 * `checkpoints.jsonl`. Whole files are written atomically and durably (a temp file that
 * is synced to disk, renamed into place, then the folder synced), so after a crash or a
 * power loss a file is either the old one or the new one, whole. JSONL files are appended
 * one complete line at a time and synced before the append returns; a torn last line left
 * by a crash is dropped on resume.
 *
 * Files are read and written through the `FileSystem` service (`platform/FileSystem.ts`);
 * the writes that must be synced to disk use `node:fs/promises` file handles, which that
 * service does not provide.
 *
 * @since 0.1.0
 */
import * as Fs from "node:fs"
import * as FsP from "node:fs/promises"
import * as Path from "node:path"
import { Effect, type FileSystem, PlatformError, Schema } from "effect"
import * as Files from "../platform/FileSystem.ts"

/** A run folder could not be read or written. @since 0.1.0 @category errors */
export class RunLogError extends Schema.TaggedError<RunLogError>()("RunLogError", {
  path: Schema.String,
  message: Schema.String,
}) {}

const failed = (path: string) => (e: PlatformError.PlatformError) => new RunLogError({ path, message: Files.messageOf(e) })

/**
 * Work on an open file handle, which stays on `node:fs/promises`: fsync needs one, and
 * gyre's FileSystem service has none (its `open` fails). Fails as the service does.
 */
const handle = (method: string, path: string, f: () => Promise<void>) => Effect.tryPromise({ try: f, catch: systemError(method, path) })

/** A failure of `node:fs` itself, as the service would report it. */
const systemError = (method: string, path: string) => (cause: unknown) => PlatformError.systemError({ _tag: "Unknown", module: "FileSystem", method, pathOrDescriptor: path, cause })

/**
 * Syncs a folder, so that a rename or a new file in it survives a power loss. Windows
 * cannot open a folder for syncing; there this is a no-op.
 */
const syncDir = (dir: string) =>
  handle("sync", dir, async () => {
    if (process.platform === "win32") return
    const fh = await FsP.open(dir, "r")
    try {
      await fh.sync()
    } finally {
      await fh.close()
    }
  })

/** Writes `data` to `path` (`flag` "w" replaces it, "a" appends) and syncs the file before returning. */
const writeSynced = (path: string, data: string | Uint8Array, flag: "w" | "a") =>
  handle("writeFile", path, async () => {
    const fh = await FsP.open(path, flag)
    try {
      await fh.writeFile(data)
      await fh.sync()
    } finally {
      await fh.close()
    }
  })

/** Creates `dir` (and parents); when it created any, syncs the folder that holds the first new one. */
const ensureDir = (fs: FileSystem.FileSystem, dir: string) =>
  Effect.gen(function* () {
    if (yield* Files.exists(dir)) return
    let first = dir
    while (Path.dirname(first) !== first && !(yield* Files.exists(Path.dirname(first)))) first = Path.dirname(first)
    yield* fs.makeDirectory(dir, { recursive: true })
    yield* syncDir(Path.dirname(first))
  })

/**
 * The suffix of the temp files `writeAtomic` writes beside their target:
 * `<file>.<pid>.<random>.tmp`. A kill during a write can leave one behind;
 * {@link removeTempFiles} deletes them.
 * @since 0.1.0 @category io
 */
export const TEMP_FILE = /\.\d+\.[a-z0-9]+\.tmp$/

/**
 * Writes a file atomically and durably: a temp file in the same folder, synced, renamed
 * over `path`, then the folder synced. Readers see the old file or the new one, never
 * part of one, also after a power loss.
 * @since 0.1.0 @category io
 */
export const writeAtomic = (path: string, data: string | Uint8Array): Effect.Effect<void, RunLogError> =>
  Effect.gen(function* () {
    const fs = yield* Files.current
    const dir = Path.dirname(path)
    yield* ensureDir(fs, dir)
    const tmp = `${path}.${process.pid}.${Math.random().toString(36).slice(2)}.tmp`
    yield* writeSynced(tmp, data, "w").pipe(
      Effect.andThen(fs.rename(tmp, path)),
      Effect.catch((e) => fs.remove(tmp, { force: true }).pipe(Effect.andThen(Effect.fail(e)))),
    )
    yield* syncDir(dir)
  }).pipe(Effect.mapError(failed(path)))

/**
 * Deletes the temp files that `writeAtomic` leaves when a process is killed mid-write,
 * in each of `dirs` (missing folders are skipped). Returns the paths it deleted.
 * @since 0.1.0 @category io
 */
export const removeTempFiles = (dirs: ReadonlyArray<string>): Effect.Effect<Array<string>, RunLogError> =>
  Effect.forEach(dirs, (dir) =>
    Effect.gen(function* () {
      const fs = yield* Files.current
      // a missing folder (NotFound), or a file where the folder would be (BadResource: ENOTDIR), has no temp files
      const names = yield* fs.readDirectory(dir).pipe(
        Effect.catchIf((e) => e.reason._tag === "NotFound" || e.reason._tag === "BadResource", () => Effect.succeed([] as Array<string>)),
      )
      const removed = names.filter((n) => TEMP_FILE.test(n)).map((n) => Path.join(dir, n))
      for (const file of removed) yield* fs.remove(file, { force: true })
      return removed
    }).pipe(Effect.mapError(failed(dir)))).pipe(Effect.map((lists) => lists.flat()))

/**
 * Appends JSON rows, one line each, in one write, and syncs the file before returning,
 * so a row written after a state file (a checkpoint row) never reaches the disk first.
 * @since 0.1.0 @category io
 */
export const appendJsonl = (path: string, rows: ReadonlyArray<unknown>): Effect.Effect<void, RunLogError> =>
  rows.length === 0
    ? Effect.void
    : Effect.gen(function* () {
      const fs = yield* Files.current
      const dir = Path.dirname(path)
      yield* ensureDir(fs, dir)
      const created = !(yield* Files.exists(path))
      yield* writeSynced(path, rows.map((r) => JSON.stringify(r)).join("\n") + "\n", "a")
      if (created) yield* syncDir(dir)
    }).pipe(Effect.mapError(failed(path)))

/**
 * A JSON row of a JSONL file and where it is: its 1-based line number, or undefined when
 * only the file's tail was read (the lines before it were not counted).
 * @since 0.1.0 @category models
 */
export interface JsonlLine {
  readonly line: number | undefined
  readonly value: unknown
}

/**
 * Reads a JSONL file's complete rows with their line numbers, skipping lines that are not
 * JSON (a line torn by a crash, or one a later append was glued to). A missing file has
 * no rows. With `tailBytes`, reads only the rows in the file's last `tailBytes` bytes
 * (rollout logs grow large), without line numbers.
 * @since 0.1.0 @category io
 */
export const readJsonlLines = (path: string, options: { readonly tailBytes?: number } = {}): Effect.Effect<Array<JsonlLine>, RunLogError> =>
  Effect.gen(function* () {
    const fs = yield* Files.current
    if (!(yield* Files.exists(path))) return []
    const size = options.tailBytes === undefined ? 0 : Number((yield* fs.stat(path)).size)
    const from = options.tailBytes === undefined ? 0 : Math.max(0, size - options.tailBytes)
    const text = from === 0 ? yield* Files.readText(path) : yield* readTail(path, from, size)
    return parseLines(text, from)
  }).pipe(Effect.mapError(failed(path)))

/**
 * The text of `path` from byte `from` to `to`. Sync: the FileSystem service reads whole
 * files only (no open handles), and reading the whole file is far slower; measured on a
 * 50 MiB rollouts.jsonl (Node 20, 2 cores, 10 runs each): the whole file through the
 * service and decoded took a median 138-170 ms (min 89 ms), its last 1 MiB (the
 * report's tail) with openSync/readSync a median 1.3 ms.
 */
const readTail = (path: string, from: number, to: number) =>
  Effect.try({
    try: () => {
      const buf = Buffer.alloc(to - from)
      const fd = Fs.openSync(path, "r")
      try {
        Fs.readSync(fd, buf, 0, buf.length, from)
      } finally {
        Fs.closeSync(fd)
      }
      return buf.toString("utf8")
    },
    catch: systemError("readTail", path),
  })

/** The rows of JSONL text read from byte `from` (numbered when it is the whole file). */
const parseLines = (text: string, from: number): Array<JsonlLine> => {
  const lines = text.split("\n")
  if (from > 0) lines.shift() // starts mid-line
  // The part after the last newline is either empty or a torn line.
  const complete = lines.slice(0, -1)
  const rows: Array<JsonlLine> = []
  for (const [i, line] of complete.entries()) {
    if (line.trim() === "") continue
    try {
      rows.push({ line: from === 0 ? i + 1 : undefined, value: JSON.parse(line) })
    } catch {
      continue
    }
  }
  return rows
}

/**
 * Reads a JSONL file's complete rows, as {@link readJsonlLines} does, without their line
 * numbers. `filterJsonl` rewrites the file clean.
 * @since 0.1.0 @category io
 */
export const readJsonl = (path: string, options: { readonly tailBytes?: number } = {}) =>
  readJsonlLines(path, options).pipe(Effect.map((rows) => rows.map((r) => r.value as Record<string, unknown>)))

/**
 * Keeps only the rows whose `step` passes `keep`, rewriting the file atomically.
 * @since 0.1.0 @category io
 */
export const filterJsonl = (path: string, keep: (row: Record<string, unknown>) => boolean) =>
  Effect.gen(function* () {
    const rows = yield* readJsonl(path)
    if (!(yield* Files.exists(path))) return rows
    const kept = rows.filter(keep)
    yield* writeAtomic(path, kept.map((r) => JSON.stringify(r) + "\n").join(""))
    return kept
  })

/** Paths inside a run folder. @since 0.1.0 @category models */
export const paths = (dir: string) => ({
  dir,
  config: Path.join(dir, "config.json"),
  metrics: Path.join(dir, "metrics.jsonl"),
  rollouts: Path.join(dir, "rollouts.jsonl"),
  checkpoints: Path.join(dir, "checkpoints.jsonl"),
  state: Path.join(dir, "state"),
  report: Path.join(dir, "report.html"),
  divergence: Path.join(dir, "divergence.jsonl"),
})

/**
 * The run folder `runs/<name>/`: `config.json`, `metrics.jsonl`, `rollouts.jsonl`,
 * `checkpoints.jsonl`. Whole files are written atomically and durably (a temp file that
 * is synced to disk, renamed into place, then the folder synced), so after a crash or a
 * power loss a file is either the old one or the new one, whole. JSONL files are appended
 * one complete line at a time and synced before the append returns; a torn last line left
 * by a crash is dropped on resume.
 *
 * @since 0.1.0
 */
import * as Fs from "node:fs"
import * as FsP from "node:fs/promises"
import * as Path from "node:path"
import { Effect, Schema } from "effect"

/** A run folder could not be read or written. @since 0.1.0 @category errors */
export class RunLogError extends Schema.TaggedError<RunLogError>()("RunLogError", {
  path: Schema.String,
  message: Schema.String,
}) {}

const io = <A>(path: string, f: () => A) =>
  Effect.try({ try: f, catch: (e) => new RunLogError({ path, message: (e as Error).message }) })

const ioAsync = <A>(path: string, f: () => Promise<A>) =>
  Effect.tryPromise({ try: f, catch: (e) => new RunLogError({ path, message: (e as Error).message }) })

/**
 * Syncs a folder, so that a rename or a new file in it survives a power loss. Windows
 * cannot open a folder for syncing; there this is a no-op.
 */
const syncDir = async (dir: string) => {
  if (process.platform === "win32") return
  const fh = await FsP.open(dir, "r")
  try {
    await fh.sync()
  } finally {
    await fh.close()
  }
}

/** Creates `dir` (and parents); when it created any, syncs the folder that holds the first new one. */
const ensureDir = async (dir: string) => {
  const created = await FsP.mkdir(dir, { recursive: true })
  if (created !== undefined) await syncDir(Path.dirname(created))
}

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
export const writeAtomic = (path: string, data: string | Uint8Array) =>
  ioAsync(path, async () => {
    const dir = Path.dirname(path)
    await ensureDir(dir)
    const tmp = `${path}.${process.pid}.${Math.random().toString(36).slice(2)}.tmp`
    try {
      const fh = await FsP.open(tmp, "w")
      try {
        await fh.writeFile(data)
        await fh.sync()
      } finally {
        await fh.close()
      }
      await FsP.rename(tmp, path)
    } catch (e) {
      await FsP.rm(tmp, { force: true })
      throw e
    }
    await syncDir(dir)
  })

/**
 * Deletes the temp files that `writeAtomic` leaves when a process is killed mid-write,
 * in each of `dirs` (missing folders are skipped). Returns the paths it deleted.
 * @since 0.1.0 @category io
 */
export const removeTempFiles = (dirs: ReadonlyArray<string>) =>
  Effect.forEach(dirs, (dir) =>
    ioAsync(dir, async () => {
      const names = await FsP.readdir(dir).catch((e: NodeJS.ErrnoException) => {
        if (e.code === "ENOENT" || e.code === "ENOTDIR") return [] as Array<string>
        throw e
      })
      const removed = names.filter((n) => TEMP_FILE.test(n)).map((n) => Path.join(dir, n))
      for (const file of removed) await FsP.rm(file, { force: true })
      return removed
    })).pipe(Effect.map((lists) => lists.flat()))

/**
 * Appends JSON rows, one line each, in one write, and syncs the file before returning,
 * so a row written after a state file (a checkpoint row) never reaches the disk first.
 * @since 0.1.0 @category io
 */
export const appendJsonl = (path: string, rows: ReadonlyArray<unknown>) =>
  rows.length === 0
    ? Effect.void
    : ioAsync(path, async () => {
      const dir = Path.dirname(path)
      await ensureDir(dir)
      const created = !Fs.existsSync(path)
      const fh = await FsP.open(path, "a")
      try {
        await fh.writeFile(rows.map((r) => JSON.stringify(r)).join("\n") + "\n")
        await fh.sync()
      } finally {
        await fh.close()
      }
      if (created) await syncDir(dir)
    })

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
export const readJsonlLines = (path: string, options: { readonly tailBytes?: number } = {}) =>
  io(path, () => {
    if (!Fs.existsSync(path)) return [] as Array<JsonlLine>
    const size = Fs.statSync(path).size
    const from = options.tailBytes === undefined ? 0 : Math.max(0, size - options.tailBytes)
    const buf = Buffer.alloc(size - from)
    const fd = Fs.openSync(path, "r")
    try {
      Fs.readSync(fd, buf, 0, buf.length, from)
    } finally {
      Fs.closeSync(fd)
    }
    const lines = buf.toString("utf8").split("\n")
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
  })

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
    if (!Fs.existsSync(path)) return rows
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

/**
 * The run folder `runs/<name>/`: `config.json`, `metrics.jsonl`, `rollouts.jsonl`,
 * `checkpoints.jsonl`. Whole files are written atomically (temp file, then rename);
 * JSONL files are appended one complete line at a time, and a torn last line left by
 * a crash is dropped on resume.
 *
 * @since 0.1.0
 */
import * as Fs from "node:fs"
import * as Path from "node:path"
import { Effect, Schema } from "effect"

/** A run folder could not be read or written. @since 0.1.0 @category errors */
export class RunLogError extends Schema.TaggedError<RunLogError>()("RunLogError", {
  path: Schema.String,
  message: Schema.String,
}) {}

const io = <A>(path: string, f: () => A) =>
  Effect.try({ try: f, catch: (e) => new RunLogError({ path, message: (e as Error).message }) })

/** Writes a file atomically: a temp file in the same folder, then rename. @since 0.1.0 @category io */
export const writeAtomic = (path: string, data: string | Uint8Array) =>
  io(path, () => {
    Fs.mkdirSync(Path.dirname(path), { recursive: true })
    const tmp = `${path}.${process.pid}.${Date.now()}.tmp`
    Fs.writeFileSync(tmp, data)
    Fs.renameSync(tmp, path)
  })

/** Appends JSON rows, one line each, in one write. @since 0.1.0 @category io */
export const appendJsonl = (path: string, rows: ReadonlyArray<unknown>) =>
  rows.length === 0
    ? Effect.void
    : io(path, () => {
      Fs.mkdirSync(Path.dirname(path), { recursive: true })
      Fs.appendFileSync(path, rows.map((r) => JSON.stringify(r)).join("\n") + "\n")
    })

/**
 * Reads a JSONL file's complete rows, skipping lines that are not JSON (a line torn by
 * a crash, or one a later append was glued to). `filterJsonl` rewrites the file clean.
 * With `tailBytes`, reads only the rows in the file's last `tailBytes` bytes (rollout
 * logs grow large).
 * @since 0.1.0 @category io
 */
export const readJsonl = (path: string, options: { readonly tailBytes?: number } = {}) =>
  io(path, () => {
    if (!Fs.existsSync(path)) return [] as Array<Record<string, unknown>>
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
    const rows: Array<Record<string, unknown>> = []
    for (const line of complete) {
      if (line.trim() === "") continue
      try {
        rows.push(JSON.parse(line))
      } catch {
        continue
      }
    }
    return rows
  })

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
})

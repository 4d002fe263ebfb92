/**
 * A table of rows read from a file or a download, row by row: one pass over every row in
 * order (to split and index them once), then any row by its number. Separate from the
 * formats (JSONL, CSV, Parquet, the Hub) that implement it, and from the index built on
 * it (`RowIndex.ts`), so that a draw never depends on how big or where the data is.
 *
 * @since 0.1.0
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { Effect, Schema, Stream } from "effect"

// ===== Models =====

/** Why a data source could not be read. @since 0.1.0 @category errors */
export class SourceError extends Schema.TaggedError<SourceError>()("SourceError", {
  origin: Schema.String,
  reason: Schema.Literals(["NotFound", "Unreadable", "InvalidRow", "Download", "Offline"]),
  message: Schema.String,
}) {}

/** @since 0.1.0 @category models */
export interface RowTable {
  /** every row in order, once, in chunks: row numbers count from 0 across chunks */
  readonly scan: Stream.Stream<ReadonlyArray<unknown>, SourceError>
  /** row `index` (after `scan` has passed it) */
  readonly read: (index: number) => Effect.Effect<unknown, SourceError>
  /** where row `index` is, for messages: `file:line`, `file row n` */
  readonly locate: (index: number) => string
  /**
   * Lets the row index be kept on disk between runs (optional): `identity` names the data
   * as it is now (a file's path, size and modification time; undefined: not worth
   * keeping), `save` gives what the table learnt in its scan (row offsets) and may keep a
   * file of its own at `beside` (a copy of its rows), and `restore` takes that back in
   * place of a scan (false: it does not fit, scan instead).
   */
  readonly persist?: {
    readonly identity: Effect.Effect<string | undefined>
    readonly save: (beside: string) => ReadonlyArray<Float64Array>
    readonly restore: (parts: ReadonlyArray<Float64Array>, beside: string) => boolean
  }
}

// ===== Offsets =====

/** A growable list of byte offsets (doubles: files may pass 4 GiB). */
export class Offsets {
  private data = new Float64Array(1024)
  length = 0
  push(value: number) {
    if (this.length === this.data.length) {
      const next = new Float64Array(this.data.length * 2)
      next.set(this.data)
      this.data = next
    }
    this.data[this.length++] = value
  }
  at(index: number): number {
    return this.data[index]!
  }
  /** the offsets pushed so far (a view: copy it to keep it past the next push) */
  view(): Float64Array {
    return this.data.subarray(0, this.length)
  }
  /** replaces the offsets with `values` */
  load(values: Float64Array) {
    this.data = values.length > 0 ? Float64Array.from(values) : new Float64Array(1024)
    this.length = values.length
  }
}

/**
 * The identity of local files for `RowTable.persist`: each one's absolute path, size,
 * modification time and inode; undefined when one is missing or together they are
 * smaller than `minBytes` (scanned again faster than a kept index is read).
 * @since 0.1.0 @category constructors
 */
export const fileIdentity = (kind: string, paths: ReadonlyArray<string>, minBytes: number): Effect.Effect<string | undefined> =>
  Effect.sync(() => {
    const stats = paths.map((path) => Fs.statSync(path, { throwIfNoEntry: false }))
    if (stats.some((stat) => stat === undefined) || stats.reduce((n, stat) => n + stat!.size, 0) < minBytes) return undefined
    return [kind, ...paths.map((path, i) => `${Path.resolve(path)} ${stats[i]!.size} ${stats[i]!.mtimeMs} ${stats[i]!.ino}`)].join("\n")
  })

/** Bytes `[start, end)` of an open file, as text. */
export const readRange = (fd: number, start: number, end: number): string => {
  const buffer = Buffer.allocUnsafe(end - start)
  let done = 0
  while (done < buffer.length) {
    const n = Fs.readSync(fd, buffer, done, buffer.length - done, start + done)
    if (n === 0) break
    done += n
  }
  return buffer.toString("utf8", 0, done)
}

// ===== Spool =====

/** spool folders of this process, removed at its exit (one listener for all of them) */
const spools = new Set<string>()
const removeSpools = () => {
  for (const dir of spools) Fs.rmSync(dir, { recursive: true, force: true })
}

/** @since 0.1.0 @category models */
export interface SpoolOptions {
  /** names the data as it is now (see `fileIdentity`); without it the index is never kept */
  readonly identity?: Effect.Effect<string | undefined>
  /** the caller's own offsets (a CSV record's line), kept and restored with the spool's */
  readonly alsoKept?: ReadonlyArray<Offsets>
}

/**
 * A table over rows that arrive decoded (CSV records, Parquet row groups): each row is
 * written once as a JSON line to a temporary file as the scan passes it, and read back by
 * its byte offset, so memory holds offsets, not rows. The file is removed when the process
 * exits; where the index is kept, a copy (a hard link where it can) is kept beside it.
 * @since 0.1.0 @category constructors
 */
export const spooled = (
  origin: string,
  rows: Stream.Stream<ReadonlyArray<unknown>, SourceError>,
  locate: (index: number) => string,
  options: SpoolOptions = {},
): RowTable => {
  const offsets = new Offsets()
  const alsoKept = options.alsoKept ?? []
  let fd: number | undefined
  let spool: string | undefined
  let end = 0
  const open = () => {
    if (fd !== undefined) return fd
    const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-rows-"))
    spool = Path.join(dir, "rows.jsonl")
    fd = Fs.openSync(spool, "w+")
    // the spool is a cache of this process's draws: nothing reads it after exit
    if (spools.size === 0) process.once("exit", removeSpools)
    spools.add(dir)
    return fd
  }
  /** a scan writes a spool of its own (a restored one is read-only) */
  const restart = () => {
    if (fd !== undefined) Fs.closeSync(fd)
    fd = spool = undefined
    offsets.length = end = 0
  }
  const write = (chunk: ReadonlyArray<unknown>) =>
    Effect.try({
      try: () => {
        const file = open()
        const parts: Array<string> = []
        for (const row of chunk) {
          const line = JSON.stringify(row) + "\n"
          offsets.push(end)
          end += Buffer.byteLength(line)
          parts.push(line)
        }
        Fs.writeSync(file, parts.join(""))
      },
      catch: (e) => new SourceError({ origin, reason: "Unreadable", message: `${origin}: could not write the row spool in ${Os.tmpdir()} (${(e as Error).message}); free disk space or set TMPDIR` }),
    })
  const persist: RowTable["persist"] = options.identity && {
    identity: options.identity,
    save: (beside) => {
      if (spool === undefined) return []
      const part = `${beside}.${process.pid}.part`
      try {
        Fs.linkSync(spool, part)
      } catch {
        Fs.copyFileSync(spool, part)
      }
      Fs.renameSync(part, beside)
      return [offsets.view(), Float64Array.of(end), ...alsoKept.map((o) => o.view())]
    },
    restore: (parts, beside) => {
      const [kept, last, ...others] = parts
      if (kept === undefined || last?.length !== 1 || others.length !== alsoKept.length) return false
      if (Fs.statSync(beside, { throwIfNoEntry: false })?.size !== last[0]) return false
      restart()
      fd = Fs.openSync(beside, "r")
      offsets.load(kept)
      end = last[0]!
      others.forEach((o, i) => alsoKept[i]!.load(o))
      return true
    },
  }
  return {
    scan: Stream.unwrap(Effect.sync(() => {
      restart()
      return Stream.tap(rows, write)
    })),
    read: (index) =>
      Effect.try({
        try: () => JSON.parse(readRange(open(), offsets.at(index), index + 1 < offsets.length ? offsets.at(index + 1) : end)) as unknown,
        catch: (e) => new SourceError({ origin, reason: "Unreadable", message: `${locate(index)}: could not read the row back (${(e as Error).message})` }),
      }),
    locate,
    ...(persist && { persist }),
  }
}

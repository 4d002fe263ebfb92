/**
 * A JSONL file as a row table: read as a stream (never whole), each row's byte range
 * recorded as the scan passes it, any row read back by its range afterwards. Blank lines
 * are skipped; messages name the file and the line. A file of 4 MiB or more says who it
 * is (path, size, modification time) so that its ranges can be kept with the row index.
 *
 * @since 0.1.0
 */
import * as Fs from "node:fs"
import { Effect, Stream } from "effect"
import { fileIdentity, Offsets, readRange, type RowTable, SourceError } from "./RowTable.ts"

const NEWLINE = 0x0a
const CHUNK_BYTES = 1 << 20
const BLANK = Symbol("blank")
/** smaller files are scanned again: that is about as fast as reading a kept index */
const KEPT_FROM_BYTES = 4 << 20

/** @since 0.1.0 @category constructors */
export const table = (path: string): RowTable => {
  const starts = new Offsets()
  const ends = new Offsets()
  const lines = new Offsets()
  let fd: number | undefined
  const failure = (reason: "NotFound" | "Unreadable" | "InvalidRow", message: string) => new SourceError({ origin: path, reason, message })
  const asSourceError = (e: unknown) => e instanceof SourceError ? e : failure("Unreadable", `${path}: ${String(e)}`)
  const notFound = (e: unknown) =>
    (e as NodeJS.ErrnoException).code === "ENOENT"
      ? failure("NotFound", `${path}: no such file; check the path given to Env.jsonl`)
      : failure("Unreadable", `${path}: ${(e as Error).message}`)

  const scan = Stream.unwrap(Effect.sync(() => {
    starts.length = ends.length = lines.length = 0
    let carry: Buffer | undefined
    let offset = 0 // file offset of carry's first byte
    let line = 1
    /** the rows of `data` (at file offset `offset`) into `out`; an unfinished last line is carried */
    const rowsOf = (out: Array<unknown>, data: Buffer, last: boolean): Array<unknown> => {
      let at = 0
      for (;;) {
        const nl = data.indexOf(NEWLINE, at)
        if (nl < 0 && !last) break
        const stop = nl < 0 ? data.length : nl
        const text = data.toString("utf8", at, stop)
        let row: unknown = BLANK
        try {
          row = JSON.parse(text)
        } catch (e) {
          // a blank line is skipped; trimmed only here, since most lines parse
          if (text.trim() !== "") throw failure("InvalidRow", `${path}:${line}: not valid JSON (${(e as Error).message})`)
        }
        if (row !== BLANK) {
          starts.push(offset + at)
          ends.push(offset + stop)
          lines.push(line)
          out.push(row)
        }
        line++
        at = stop + 1
        if (nl < 0) break
      }
      carry = at < data.length ? data.subarray(at) : undefined
      offset += at
      return out
    }
    /** only the line that crosses into `chunk` is copied, not the chunk */
    const chunkRows = (chunk: Buffer): Array<unknown> => {
      const out: Array<unknown> = []
      if (carry === undefined) return rowsOf(out, chunk, false)
      const nl = chunk.indexOf(NEWLINE)
      if (nl < 0) {
        carry = Buffer.concat([carry, chunk])
        return out
      }
      rowsOf(out, Buffer.concat([carry, chunk.subarray(0, nl + 1)]), false)
      return rowsOf(out, chunk.subarray(nl + 1), false)
    }
    const chunks = Stream.fromAsyncIterable(
      Fs.createReadStream(path, { highWaterMark: CHUNK_BYTES }) as AsyncIterable<Buffer>,
      notFound,
    )
    return chunks.pipe(
      Stream.mapEffect((chunk) => Effect.try({ try: () => chunkRows(chunk), catch: asSourceError })),
      Stream.concat(Stream.fromEffect(Effect.try({ try: () => (carry ? rowsOf([], carry, true) : []), catch: asSourceError }))),
      Stream.filter((rows) => rows.length > 0),
    )
  }))

  return {
    scan,
    read: (index) =>
      Effect.try({
        try: () => JSON.parse(readRange((fd ??= Fs.openSync(path, "r")), starts.at(index), ends.at(index))) as unknown,
        catch: (e) => failure("Unreadable", `${path}:${lines.at(index)}: could not read the row again (${(e as Error).message}); was the file changed during the run?`),
      }),
    locate: (index) => `${path}:${index < lines.length ? lines.at(index) : "?"}`,
    persist: {
      identity: fileIdentity("jsonl", [path], KEPT_FROM_BYTES),
      save: () => [starts.view(), ends.view(), lines.view()],
      restore: (parts) => {
        const [s, e, l] = parts
        if (parts.length !== 3 || s === undefined || e === undefined || l === undefined || s.length !== e.length || s.length !== l.length) return false
        starts.load(s)
        ends.load(e)
        lines.load(l)
        return true
      },
    },
  }
}

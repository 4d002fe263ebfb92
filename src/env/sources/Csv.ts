/**
 * CSV files (a path or an http(s) URL) as a row table: parsed as a stream by csv-parse,
 * each record an object keyed by the header row (or the given columns), spooled for
 * reading back by number. Messages name the file and the record's line. A local file of
 * 4 MiB or more has its index and spool kept for the next run.
 *
 * @since 0.1.0
 */
import * as Fs from "node:fs"
import { Readable } from "node:stream"
import { Effect, Stream } from "effect"
import { fileIdentity, Offsets, type RowTable, SourceError, spooled } from "./RowTable.ts"

/** CSV options (`Env.csv`). @since 0.1.0 @category models */
export interface Options {
  /** the field delimiter (default `,`) */
  readonly delimiter?: string
  /** column names; default: the file's first row */
  readonly columns?: ReadonlyArray<string>
}

const CHUNK_ROWS = 1024
/** smaller local files are read again rather than kept */
const KEPT_FROM_BYTES = 4 << 20
const isUrl = (pathOrUrl: string) => /^https?:\/\//.test(pathOrUrl)

/** The raw bytes, as a Node stream. */
const bytes = (pathOrUrl: string): Effect.Effect<Readable, SourceError> =>
  isUrl(pathOrUrl)
    ? Effect.tryPromise({
      try: async () => {
        const response = await globalThis.fetch(pathOrUrl)
        if (!response.ok || response.body === null) throw new Error(`HTTP ${response.status}`)
        return Readable.fromWeb(response.body as import("node:stream/web").ReadableStream<Uint8Array>)
      },
      catch: (e) => new SourceError({ origin: pathOrUrl, reason: "Download", message: `${pathOrUrl}: could not download (${(e as Error).message})` }),
    })
    : Effect.try({
      try: () => {
        Fs.accessSync(pathOrUrl, Fs.constants.R_OK)
        return Fs.createReadStream(pathOrUrl)
      },
      catch: () => new SourceError({ origin: pathOrUrl, reason: "NotFound", message: `${pathOrUrl}: no such file; check the path given to Env.csv` }),
    })

/** @since 0.1.0 @category constructors */
export const table = (pathOrUrl: string, options: Options = {}): RowTable => {
  const lines = new Offsets()
  const records = Stream.unwrap(Effect.gen(function*() {
    const input = yield* bytes(pathOrUrl)
    const { parse } = yield* Effect.promise(() => import("csv-parse"))
    lines.length = 0
    const parser = input.pipe(parse({
      columns: options.columns !== undefined ? [...options.columns] : true,
      delimiter: options.delimiter ?? ",",
      skip_empty_lines: true,
      bom: true,
      info: true,
    }))
    input.on("error", (e) => parser.destroy(e))
    return Stream.fromAsyncIterable(
      parser as AsyncIterable<{ readonly record: unknown; readonly info: { readonly lines: number } }>,
      (e) => new SourceError({ origin: pathOrUrl, reason: "InvalidRow", message: `${pathOrUrl}: not valid CSV (${(e as Error).message}); check the delimiter and quoting` }),
    )
  }))
  const scan = records.pipe(
    Stream.map(({ info, record }) => {
      lines.push(info.lines)
      return record
    }),
    Stream.grouped(CHUNK_ROWS),
  )
  return spooled(pathOrUrl, scan, (index) => `${pathOrUrl}:${index < lines.length ? lines.at(index) : "?"}`, {
    alsoKept: [lines],
    ...(!isUrl(pathOrUrl) && { identity: fileIdentity("csv", [pathOrUrl], KEPT_FROM_BYTES) }),
  })
}

/**
 * Parquet files (a path or an http(s) URL) as a row table: the scan reads one row group
 * at a time (a URL by byte ranges), so a file bigger than memory is never held whole;
 * rows become plain JSON values (64-bit integers as numbers, dates as ISO text, missing
 * values as null) and are spooled for reading back by number. A local file of 1 MiB or
 * more has its index and spool kept for the next run.
 *
 * @since 0.1.0
 */
import { Effect, Stream } from "effect"
import { fileIdentity, type RowTable, SourceError, spooled } from "./RowTable.ts"

/** smaller local files are read again rather than kept (compressed: their rows are several times bigger) */
const KEPT_FROM_BYTES = 1 << 20

const isUrl = (pathOrUrl: string) => /^https?:\/\//.test(pathOrUrl)

/** The file's bytes, read by range. */
const open = (pathOrUrl: string, headers: Record<string, string>) =>
  Effect.tryPromise({
    try: async () => {
      const { asyncBufferFromFile, asyncBufferFromUrl, parquetMetadataAsync } = await import("hyparquet")
      const file = isUrl(pathOrUrl) ? await asyncBufferFromUrl({ url: pathOrUrl, requestInit: { headers } }) : await asyncBufferFromFile(pathOrUrl)
      return { file, metadata: await parquetMetadataAsync(file) }
    },
    catch: (e) =>
      (e as NodeJS.ErrnoException).code === "ENOENT"
        ? new SourceError({ origin: pathOrUrl, reason: "NotFound", message: `${pathOrUrl}: no such file; check the path given to Env.parquet` })
        : new SourceError({ origin: pathOrUrl, reason: "Unreadable", message: `${pathOrUrl}: not a readable Parquet file (${(e as Error).message})` }),
  })

/** One row group's rows, as JSON values. */
const rowGroup = (pathOrUrl: string, file: import("hyparquet").AsyncBuffer, metadata: import("hyparquet").FileMetaData, rowStart: number, rowEnd: number) =>
  Effect.tryPromise({
    try: async () => {
      const [{ parquetReadObjects, toJson }, { compressors }] = await Promise.all([import("hyparquet"), import("hyparquet-compressors")])
      const rows = await parquetReadObjects({ file, metadata, rowStart, rowEnd, compressors })
      return rows.map((row) => toJson(row) as unknown)
    },
    catch: (e) => new SourceError({ origin: pathOrUrl, reason: "Unreadable", message: `${pathOrUrl} rows ${rowStart}-${rowEnd - 1}: ${(e as Error).message}` }),
  })

/** Every row group of one file, in order, one chunk of rows each. */
const rowGroups = (pathOrUrl: string, headers: Record<string, string>): Stream.Stream<ReadonlyArray<unknown>, SourceError> =>
  Stream.unwrap(Effect.map(open(pathOrUrl, headers), ({ file, metadata }) => {
    const groups: Array<readonly [number, number]> = []
    let start = 0
    for (const group of metadata.row_groups) {
      const n = Number(group.num_rows)
      if (n > 0) groups.push([start, start + n])
      start += n
    }
    return Stream.fromIterable(groups).pipe(Stream.mapEffect(([from, to]) => rowGroup(pathOrUrl, file, metadata, from, to)))
  }))

/**
 * @param headers sent with every range request of a URL (an Authorization header, say)
 * @since 0.1.0 @category constructors
 */
export const table = (pathOrUrl: string, headers: Record<string, string> = {}): RowTable =>
  spooled(pathOrUrl, rowGroups(pathOrUrl, headers), (index) => `${pathOrUrl} row ${index}`, {
    ...(!isUrl(pathOrUrl) && { identity: fileIdentity("parquet", [pathOrUrl], KEPT_FROM_BYTES) }),
  })

/** Several local Parquet files read one after another as one table (a split in shards). @since 0.1.0 @category constructors */
export const tables = (origin: string, paths: ReadonlyArray<string>): RowTable =>
  spooled(origin, Stream.flatMap(Stream.fromIterable(paths), (path) => rowGroups(path, {})), (index) => `${origin} row ${index}`, {
    identity: fileIdentity("parquet", paths, KEPT_FROM_BYTES),
  })

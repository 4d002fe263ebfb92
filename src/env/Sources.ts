/**
 * Where an env's problems come from: a seeded generator (with the small deterministic
 * PRNG it is handed), rows in memory, or a table of rows read from a file or the Hub
 * (JSONL, CSV, Parquet, a Hugging Face dataset). Separate from the env definition
 * because sources are plain data a definition holds; how problems are drawn from them
 * into splits is `Tasks.ts` and `RowIndex.ts`. The readers of each format are loaded on
 * first use, so importing gyre loads none of them.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"

import type { Random } from "../util/Random.ts"
import type { Options as CsvOptions } from "./sources/Csv.ts"
import type { Options as HuggingFaceOptions } from "./sources/HuggingFace.ts"
import type { RowTable, SourceError } from "./sources/RowTable.ts"

export type { CsvOptions, HuggingFaceOptions }

// ===== Sources =====

/** What a seeded generator gets for each problem. @since 0.1.0 @category models */
export interface GenerateContext {
  readonly random: Random
  readonly difficulty: number
  readonly index: number
}

/** @since 0.1.0 @category models */
export type Source<P> =
  | { readonly _tag: "Seeded"; readonly generate: (ctx: GenerateContext) => P | Effect.Effect<P> }
  | {
    readonly _tag: "Rows"
    readonly load: () => Array<unknown>
    readonly origin: string
    /** where row i came from, for error messages (default `<origin>[i]`) */
    readonly locate?: (index: number) => string
  }
  | {
    readonly _tag: "Table"
    /** the file, URL or dataset, for messages */
    readonly origin: string
    /** opens the table (reads nothing yet): its rows are scanned once, then read by number */
    readonly open: Effect.Effect<RowTable, SourceError>
  }

/**
 * A seeded generator: problem i of seed s is always the same.
 * @since 0.1.0 @category constructors
 */
export const seeded = <P>(generate: (ctx: GenerateContext) => P | Effect.Effect<P>): Source<P> => ({ _tag: "Seeded", generate })

/** Problems from an array of rows, decoded with the env's problem Schema. @since 0.1.0 @category constructors */
export const rows = <P = unknown>(items: ReadonlyArray<unknown>): Source<P> => ({
  _tag: "Rows",
  load: () => [...items],
  origin: "rows",
})

/** A table whose reader module is imported on first use. */
const lazyTable = <P>(origin: string, open: () => Promise<Effect.Effect<RowTable, SourceError>>): Source<P> => ({
  _tag: "Table",
  origin,
  open: Effect.flatten(Effect.promise(open)),
})

/**
 * Problems from a JSONL file (one JSON object per line; blank lines skipped), decoded
 * with the env's problem Schema. The file is read as a stream, never whole; errors name
 * the file and the line. A file of 4 MiB or more has its row index kept in gyre's cache
 * (`GYRE_CACHE/index/`), so the next run on the unchanged file need not read it through.
 * @since 0.1.0 @category constructors
 */
export const jsonl = <P = unknown>(path: string): Source<P> =>
  lazyTable(path, () => import("./sources/Jsonl.ts").then((m) => Effect.succeed(m.table(path))))

/**
 * Problems from a CSV file or an http(s) URL: each record is an object keyed by the
 * header row (or `columns`), every value a string (decode numbers with the problem
 * Schema, e.g. `Schema.NumberFromString`). Read as a stream.
 * @since 0.1.0 @category constructors
 */
export const csv = <P = unknown>(pathOrUrl: string, options: CsvOptions = {}): Source<P> =>
  lazyTable(pathOrUrl, () => import("./sources/Csv.ts").then((m) => Effect.succeed(m.table(pathOrUrl, options))))

/**
 * Problems from a Parquet file or an http(s) URL: each row an object keyed by column
 * name (64-bit integers as numbers, dates as ISO text). Read one row group at a time.
 * @since 0.1.0 @category constructors
 */
export const parquet = <P = unknown>(pathOrUrl: string): Source<P> =>
  lazyTable(pathOrUrl, () => import("./sources/Parquet.ts").then((m) => Effect.succeed(m.table(pathOrUrl))))

/**
 * Problems from a dataset on the Hugging Face Hub: the Parquet files of one config and
 * split are downloaded once into gyre's cache (`GYRE_CACHE`, default
 * `~/.cache/gyre/hub`), then read like {@link parquet}. Honours `HF_TOKEN`,
 * `HF_ENDPOINT` and `HF_HUB_OFFLINE=1` (cache, else `fixture`).
 *
 * @example
 * source: Env.huggingface("openai/gsm8k", { config: "main", split: "train", fixture: "envs/fixtures/gsm8k.jsonl" })
 * @since 0.1.0 @category constructors
 */
export const huggingface = <P = unknown>(repo: string, options: HuggingFaceOptions = {}): Source<P> =>
  lazyTable(`hf://datasets/${repo}/${options.config ?? "default"}/${options.split ?? "train"}`, () =>
    import("./sources/HuggingFace.ts").then((m) => m.open(repo, options)))

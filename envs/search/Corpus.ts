/**
 * The passages `envs/search-qa.ts` searches: rows of a data source (`passage`, `id`),
 * indexed once per thread with minisearch (BM25-style ranking, prefix and fuzzy terms
 * off so a query matches words, not spellings), and the `search` tool over them.
 */
import { Effect, Schema, Stream } from "effect"
import type { Env } from "gyre"
import { Tool } from "gyre"

/** A passage row, as `rag-datasets/rag-mini-wikipedia`'s text corpus holds them. */
const Passage = Schema.Struct({ passage: Schema.String, id: Schema.Union([Schema.Number, Schema.String]) })

/** What a search answers: the best passages, best first. */
export interface Hit {
  readonly id: string
  readonly passage: string
}

export interface Index {
  readonly size: number
  readonly search: (query: string, limit: number) => ReadonlyArray<Hit>
}

/** Every row of a source, checked as a passage; row numbers name the bad ones. */
const readPassages = (source: Env.Source<unknown>) =>
  Effect.gen(function* () {
    if (source._tag === "Seeded") return yield* Effect.fail(new Error("the corpus must be rows (Env.jsonl, Env.huggingface, ...), not a seeded generator"))
    const rows = source._tag === "Rows" ? source.load() : Array.from(yield* Stream.runCollect(Stream.flattenIterable((yield* source.open).scan)))
    const decode = Schema.decodeUnknownSync(Passage)
    return rows.map((row, i) => {
      try {
        return decode(row)
      } catch (e) {
        throw new Error(`${source.origin} row ${i}: not a passage ({ passage: string, id }): ${e instanceof Error ? e.message : String(e)}`)
      }
    })
  })

/** Indexes the passages of `source` (minisearch is loaded on first use). */
export const buildIndex = (source: Env.Source<unknown>) =>
  Effect.gen(function* () {
    const passages = yield* readPassages(source)
    const { default: MiniSearch } = yield* Effect.promise(() => import("minisearch"))
    const index = new MiniSearch<{ id: string; passage: string }>({ fields: ["passage"], storeFields: ["passage"], idField: "id" })
    index.addAll(passages.map((p, i) => ({ id: `${p.id}#${i}`, passage: p.passage })))
    return {
      size: passages.length,
      search: (query, limit) =>
        index.search(query, { prefix: false, fuzzy: false }).slice(0, limit).map((r) => ({ id: String(r.id).split("#")[0]!, passage: String(r["passage"]) })),
    } satisfies Index
  })

/**
 * One index per source per thread (each episode worker builds its own), built by the first
 * search (a failed build is retried by the next). The build runs with that search's
 * services, so it reads the run's settings (`HF_HUB_OFFLINE`, the cache folder) and logs to
 * the run's logger.
 */
export const cachedIndex = (source: Env.Source<unknown>) => {
  const origin = source._tag === "Seeded" ? "a seeded generator" : source.origin
  let built: Promise<Index> | undefined
  return Effect.flatMap(Effect.context<never>(), (context) =>
    Effect.tryPromise({
      try: () => (built ??= Effect.runPromiseWith(context)(buildIndex(source)).catch((e: unknown) => {
        built = undefined
        throw e
      })),
      catch: (e) => new Tool.InfraFault({ message: `the search corpus ${origin} cannot be read: ${e instanceof Error ? e.message : String(e)}` }),
    }))
}

/** The observation of a search: each passage on its own line, numbered, or a line saying none matched. */
export const formatHits = (query: string, hits: ReadonlyArray<Hit>): string =>
  hits.length === 0 ? `No passage matches ${JSON.stringify(query)}.` : hits.map((h, i) => `Document ${i + 1}: ${h.passage}`).join("\n")

/** The `search` tool over a corpus: `{"query": "..."}` in hermes calls, `[search words]` in brackets. */
export const searchTool = (corpus: Effect.Effect<Index, Tool.InfraFault>, limit = 3) =>
  Tool.make({
    name: "search",
    description: "Searches an encyclopedia for passages about a query; returns the best passages",
    args: Schema.Struct({ query: Schema.String }),
    parseArgs: (text) => ({ query: text }),
    run: ({ query }) => Effect.map(corpus, (index) => formatHits(query, index.search(query, limit))),
  })

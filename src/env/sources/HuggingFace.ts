/**
 * A Hugging Face dataset's split as a row table: its Parquet files are listed through
 * the Hub's HTTP API (`GET {endpoint}/api/datasets/{repo}/parquet/{config}/{split}` for
 * the current conversion, `GET {endpoint}/api/datasets/{repo}/tree/{revision}/{config}/{split}`
 * for a pinned revision, files from `{endpoint}/datasets/{repo}/resolve/{revision}/{path}`),
 * downloaded once into the cache with progress lines, then read as Parquet. Offline
 * (`HF_HUB_OFFLINE=1`) it reads the cache, else the env's fixture.
 *
 * @since 0.1.0
 */
import * as Fs from "node:fs"
import * as Path from "node:path"
import { Effect, Option, Redacted, Schema } from "effect"
import { download } from "./HubDownload.ts"
import { cached, type HubSettings, hubSettings, type Manifest, splitFolder, writeManifest } from "./HubCache.ts"
import * as Parquet from "./Parquet.ts"
import { type RowTable, SourceError } from "./RowTable.ts"

/** Which files of a Hub dataset (`Env.huggingface`). @since 0.1.0 @category models */
export interface Options {
  /** the dataset's config (subset), default `"default"` */
  readonly config?: string
  /** the split, default `"train"` */
  readonly split?: string
  /** `"main"` (default): the Hub's current Parquet conversion; else a commit or branch whose files are `{config}/{split}/*.parquet` (e.g. a commit of `refs/convert/parquet`) */
  readonly revision?: string
  /** a local file (`.jsonl`, `.parquet`, `.csv`) read instead when offline (HF_HUB_OFFLINE=1) and nothing is cached */
  readonly fixture?: string
}

const REPO = /^[A-Za-z0-9][\w.-]*(\/[\w.-]+)?$/

const ParquetUrls = Schema.Array(Schema.String)
const ConfigListing = Schema.Record(Schema.String, Schema.Record(Schema.String, Schema.Array(Schema.String)))
const TreeEntries = Schema.Array(Schema.Struct({ type: Schema.String, path: Schema.String, size: Schema.optional(Schema.Number) }))

interface Wanted {
  readonly repo: string
  readonly config: string
  readonly split: string
  readonly revision: string
  readonly origin: string
}

const headersOf = (settings: HubSettings): Record<string, string> =>
  Option.match(settings.token, { onNone: () => ({}), onSome: (token) => ({ authorization: `Bearer ${Redacted.value(token)}` }) })

/** GET a Hub API route as JSON, with errors that say what to do. */
const getJson = <S extends Schema.Top & { readonly DecodingServices: never }>(settings: HubSettings, wanted: Wanted, route: string, schema: S) =>
  Effect.gen(function*() {
    const url = `${settings.endpoint}${route}`
    const fail = (reason: "NotFound" | "Download", message: string) => new SourceError({ origin: wanted.origin, reason, message })
    const response = yield* Effect.tryPromise({
      try: () => globalThis.fetch(url, { headers: { ...headersOf(settings), accept: "application/json" } }),
      catch: (e) => fail("Download", `${url}: ${(e as Error).message}; check the network and HF_ENDPOINT, or set HF_HUB_OFFLINE=1 to use the cache or the env's fixture`),
    })
    if (response.status === 401 || response.status === 403) {
      return yield* fail("Download", `${url}: HTTP ${response.status}: ${wanted.repo} is private or gated; accept its terms on the Hub and set HF_TOKEN to a token that may read it`)
    }
    if (response.status === 404) return yield* fail("NotFound", `${url}: HTTP 404`)
    if (!response.ok) return yield* fail("Download", `${url}: HTTP ${response.status}; try again later`)
    const body = yield* Effect.tryPromise({ try: () => response.json() as Promise<unknown>, catch: (e) => fail("Download", `${url}: ${(e as Error).message}`) })
    return yield* Schema.decodeUnknownEffect(schema)(body).pipe(
      Effect.mapError(() => fail("Download", `${url}: the Hub answered in a shape gyre does not know (${JSON.stringify(body).slice(0, 200)})`)),
    )
  })

/** What configs and splits the dataset has, for a 404's message. */
const whatExists = (settings: HubSettings, wanted: Wanted) =>
  getJson(settings, wanted, `/api/datasets/${wanted.repo}/parquet`, ConfigListing).pipe(
    Effect.map((listing) => Object.entries(listing).map(([config, splits]) => `${config} (${Object.keys(splits).join(", ")})`).join("; ")),
    Effect.map((found) => found === "" ? "" : `; it has: ${found}`),
    Effect.orElseSucceed(() => ""),
  )

/** The URLs of the split's Parquet files. */
const listFiles = (settings: HubSettings, wanted: Wanted) => {
  const { repo, config, split, revision } = wanted
  const listed = revision === "main"
    ? getJson(settings, wanted, `/api/datasets/${repo}/parquet/${encodeURIComponent(config)}/${encodeURIComponent(split)}`, ParquetUrls)
    : getJson(settings, wanted, `/api/datasets/${repo}/tree/${encodeURIComponent(revision)}/${encodeURIComponent(config)}/${encodeURIComponent(split)}`, TreeEntries).pipe(
      Effect.map((entries) =>
        entries.filter((e) => e.type === "file" && e.path.endsWith(".parquet"))
          .map((e) => `${settings.endpoint}/datasets/${repo}/resolve/${encodeURIComponent(revision)}/${e.path.split("/").map(encodeURIComponent).join("/")}`)
      ),
    )
  return listed.pipe(
    Effect.catchTag("SourceError", (e) =>
      e.reason !== "NotFound" ? Effect.fail(e) : Effect.flatMap(whatExists(settings, wanted), (found) =>
        Effect.fail(new SourceError({
          origin: wanted.origin,
          reason: "NotFound",
          message: `${repo}: no Parquet files for config ${JSON.stringify(config)}, split ${JSON.stringify(split)} at revision ${JSON.stringify(revision)} (${e.message})${found}; check the repo name and the config and split options of Env.huggingface`,
        })))),
    Effect.filterOrFail((urls) => urls.length > 0, () =>
      new SourceError({ origin: wanted.origin, reason: "NotFound", message: `${repo}: config ${config}, split ${split} lists no Parquet files; check the config and split options` })),
  )
}

/** The ETag of a file's current version (a HEAD request, redirects followed); none when the Hub gives none. */
const currentEtag = (url: string, headers: Record<string, string>) =>
  Effect.tryPromise(() => globalThis.fetch(url, { method: "HEAD", headers, redirect: "follow" })).pipe(
    Effect.map((response) => (response.ok ? response.headers.get("x-linked-etag") ?? response.headers.get("etag") ?? undefined : undefined)),
    Effect.orElseSucceed(() => undefined),
  )

/** Downloads what the cache lacks or holds an older version of; the split's manifest once all files are present. */
const fetchSplit = (settings: HubSettings, wanted: Wanted, folder: string) =>
  Effect.gen(function*() {
    const urls = yield* listFiles(settings, wanted)
    const previous = cached(folder)
    yield* Effect.sync(() => Fs.mkdirSync(folder, { recursive: true }))
    const files: Array<Manifest["files"][number]> = []
    for (const [i, url] of urls.entries()) {
      const name = `${String(i).padStart(4, "0")}.parquet`
      // the file's current version: a new conversion keeps the URL and changes the ETag
      const etag = yield* currentEtag(url, headersOf(settings))
      const kept = Option.flatMap(previous, (m) => Option.fromUndefinedOr(m.files.find((f) => f.name === name && f.url === url && f.etag === etag)))
      if (Option.isSome(kept)) {
        files.push(kept.value)
        continue
      }
      const size = yield* download({ url, to: Path.join(folder, name), headers: headersOf(settings), what: `${wanted.repo} ${wanted.config}/${wanted.split} file ${i + 1} of ${urls.length}`, origin: wanted.origin })
      files.push({ name, url, size, ...(etag !== undefined ? { etag } : {}) })
    }
    const manifest: Manifest = { repo: wanted.repo, config: wanted.config, split: wanted.split, revision: wanted.revision, files }
    yield* writeManifest(folder, manifest)
    return manifest
  })

/** A local file read by its extension, for the env's fixture. */
const fixtureTable = (path: string, origin: string): Effect.Effect<RowTable, SourceError> =>
  Effect.promise(async () => {
    if (path.endsWith(".parquet")) return Parquet.table(path)
    if (path.endsWith(".csv")) return (await import("./Csv.ts")).table(path)
    if (path.endsWith(".jsonl") || path.endsWith(".json")) return (await import("./Jsonl.ts")).table(path)
    return undefined
  }).pipe(Effect.flatMap((table) =>
    table !== undefined ? Effect.succeed(table) : Effect.fail(new SourceError({ origin, reason: "Unreadable", message: `fixture ${path}: give a .jsonl, .parquet or .csv file` }))
  ))

/**
 * The table of a Hub dataset's split.
 * @since 0.1.0 @category constructors
 */
export const open: (repo: string, options: Options) => Effect.Effect<RowTable, SourceError> = Effect.fn("Env.huggingface")(
  function*(repo: string, options: Options) {
    const wanted: Wanted = {
      repo,
      config: options.config ?? "default",
      split: options.split ?? "train",
      revision: options.revision ?? "main",
      origin: `hf://datasets/${repo}/${options.config ?? "default"}/${options.split ?? "train"}`,
    }
    if (!REPO.test(repo)) return yield* new SourceError({ origin: wanted.origin, reason: "NotFound", message: `Env.huggingface(${JSON.stringify(repo)}): give the dataset as "owner/name", as on the Hub` })
    const settings = yield* Effect.gen(function*() {
      return yield* hubSettings
    }).pipe(
      Effect.mapError((e) => new SourceError({ origin: wanted.origin, reason: "Offline", message: `the Hub settings could not be read (${String(e)}); check HF_ENDPOINT, HF_HUB_OFFLINE, GYRE_CACHE and HF_HOME` })),
    )
    const folder = splitFolder(settings.cache, repo, wanted.revision, wanted.config, wanted.split)
    const local = (m: Manifest) => Parquet.tables(wanted.origin, m.files.map((f) => Path.join(folder, f.name)))
    if (!settings.offline) return local(yield* fetchSplit(settings, wanted, folder))
    const hit = cached(folder)
    if (Option.isSome(hit)) return local(hit.value)
    if (options.fixture !== undefined) {
      yield* Effect.logInfo(`${wanted.origin}: offline (HF_HUB_OFFLINE) and not cached in ${folder}: reading the fixture ${options.fixture}`)
      return yield* fixtureTable(options.fixture, wanted.origin)
    }
    return yield* new SourceError({
      origin: wanted.origin,
      reason: "Offline",
      message: `${repo} (config ${wanted.config}, split ${wanted.split}, revision ${wanted.revision}) is not in the cache (${folder}) and HF_HUB_OFFLINE is set: run once online to download it, or give Env.huggingface a fixture file`,
    })
  },
)

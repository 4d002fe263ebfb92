/**
 * Where Hub downloads live and the settings that reach the Hub: `HF_ENDPOINT`,
 * `HF_TOKEN` (kept redacted), `HF_HUB_OFFLINE`, and the cache folder (`GYRE_CACHE`, else
 * `HF_HOME/gyre`, else `~/.cache/gyre`, with `hub/` inside). A split's files sit in one
 * folder with a manifest written after the last file is complete, so a half-finished
 * download is never taken for a cached one.
 *
 * @since 0.1.0
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { Config, Effect, Option, type Redacted, Schema } from "effect"

/** @since 0.1.0 @category models */
export interface HubSettings {
  readonly endpoint: string
  readonly token: Option.Option<Redacted.Redacted<string>>
  readonly offline: boolean
  /** the `hub` folder of gyre's cache */
  readonly cache: string
}

/** @since 0.1.0 @category config */
/**
 * gyre's cache folder: `GYRE_CACHE`, else `HF_HOME/gyre`, else `~/.cache/gyre` (Hub
 * downloads in `hub/`, kept row indexes in `index/`).
 * @since 0.1.0 @category config
 */
export const cacheRoot: Config.Config<string> = Config.all({
  gyreCache: Config.option(Config.String("GYRE_CACHE")),
  hfHome: Config.option(Config.String("HF_HOME")),
}).pipe(Config.map(({ gyreCache, hfHome }) =>
  Option.getOrElse(gyreCache, () => Option.match(hfHome, { onNone: () => Path.join(Os.homedir(), ".cache", "gyre"), onSome: (home) => Path.join(home, "gyre") }))
))

/** @since 0.1.0 @category config */
export const hubSettings: Config.Config<HubSettings> = Config.all({
  endpoint: Config.String("HF_ENDPOINT").pipe(Config.withDefault("https://huggingface.co")),
  token: Config.option(Config.Redacted("HF_TOKEN")),
  offline: Config.Boolean("HF_HUB_OFFLINE").pipe(Config.withDefault(false)),
  root: cacheRoot,
}).pipe(Config.map(({ endpoint, token, offline, root }) => ({
  endpoint: endpoint.replace(/\/+$/, ""),
  token,
  offline,
  cache: Path.join(root, "hub"),
})))

/** What a finished download of a split holds. @since 0.1.0 @category models */
export const Manifest = Schema.Struct({
  repo: Schema.String,
  config: Schema.String,
  split: Schema.String,
  revision: Schema.String,
  files: Schema.Array(Schema.Struct({ name: Schema.String, url: Schema.String, size: Schema.Number, etag: Schema.optional(Schema.String) })),
})
/** @since 0.1.0 @category models */
export type Manifest = typeof Manifest.Type

/** The folder of one split of one revision of a dataset. @since 0.1.0 @category accessors */
export const splitFolder = (cache: string, repo: string, revision: string, config: string, split: string) =>
  Path.join(cache, "datasets", ...repo.split("/"), encodeURIComponent(revision), encodeURIComponent(config), encodeURIComponent(split))

const decodeManifest = Schema.decodeUnknownOption(Schema.fromJsonString(Manifest))

/**
 * The manifest of a split whose files are all present with their recorded sizes, if any.
 * @since 0.1.0 @category accessors
 */
export const cached = (folder: string): Option.Option<Manifest> => {
  const text = Option.liftThrowable(() => Fs.readFileSync(Path.join(folder, "manifest.json"), "utf8"))()
  return Option.flatMap(text, decodeManifest).pipe(
    Option.filter((m) => m.files.every((f) => Option.liftThrowable(() => Fs.statSync(Path.join(folder, f.name)).size)().pipe(Option.contains(f.size)))),
  )
}

/** Records a complete download. @since 0.1.0 @category constructors */
export const writeManifest = (folder: string, manifest: Manifest) =>
  Effect.sync(() => {
    const tmp = Path.join(folder, `manifest.json.${process.pid}.part`)
    Fs.writeFileSync(tmp, JSON.stringify(manifest, null, 2))
    Fs.renameSync(tmp, Path.join(folder, "manifest.json"))
  })

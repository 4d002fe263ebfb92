/**
 * Checkpoint downloads, as Tinker's archive route:
 *
 * - `GET /api/v1/training_runs/{model_id}/checkpoints/{checkpoint_id}/archive`, where
 *   `checkpoint_id` is `weights/<name>` or `sampler_weights/<name>` (the slash as is or
 *   as `%2F`), answers `302` with the download URL in `Location` and when it stops working
 *   in `Expires` (an HTTP date, after `ttlMillis`, default 15 minutes), as Tinker does
 *   (the official SDK's `resources/weights.py` follows either that or a JSON
 *   `{"url", "expires"}`). It needs the API key like every other route.
 * - `GET /api/v1/checkpoint_files/{token}` (the URL) returns a tar archive
 *   (`application/x-tar`) of the checkpoint's files: what `pack` makes of its state file
 *   (for the embedded backend the PEFT adapter, `checkpoint_complete` and the state file
 *   itself, which the SDK's `tinker checkpoint download` unpacks), or the state file
 *   alone. The unguessable token is the credential, as a signed URL's signature is, so
 *   this route takes no API key.
 *
 * Only checkpoints that this server saved (recorded in its checkpoint index, so also those
 * of its earlier runs on the same `stateDir`) are handed out, and only when their file
 * lies inside `stateDir` (symbolic links resolved): a client never names a file on this
 * machine. A sampler checkpoint's files are those of the training checkpoint that holds
 * the same weights (`CheckpointIndex.stateFileOf`).
 *
 * @since 0.1.0
 */
import * as Path from "node:path"
import { Effect, Stream } from "effect"
import * as Files from "../../../platform/FileSystem.ts"
import { type CheckpointIndex, type Entry, stateFileOf } from "./CheckpointIndex.ts"
import { checkName, type FileReply, notFound, Reject } from "./Requests.ts"
import * as Tar from "../wire/Tar.ts"
import * as Wire from "../wire/Wire.ts"

/** The path of the download route, below the API prefix. @since 0.1.0 @category constants */
export const FILES_ROUTE = "checkpoint_files"

/** How long a download URL works. @since 0.1.0 @category constants */
export const DEFAULT_TTL_MILLIS = 15 * 60 * 1000

export type { FileReply } from "./Requests.ts"

/** @since 0.1.0 @category models */
export interface Archives {
  /** the archive route: `modelId` and `checkpointId` as they came in the path (percent-encoded); `origin` is where the download URL points */
  readonly archive: (modelId: string, checkpointId: string, origin: string) => Effect.Effect<{ readonly url: string; readonly expires: Date }, Reject>
  /** the download route */
  readonly download: (token: string) => Effect.Effect<FileReply, Reject>
  /** forgets expired download URLs */
  readonly sweep: Effect.Effect<void>
  /** download URLs that still work */
  readonly size: () => number
}

const decodePart = (part: string, field: string) =>
  Effect.try({ try: () => decodeURIComponent(part), catch: () => new Reject({ status: 400, message: `the ${field} in the path is not valid percent-encoding` }) })

/** `root` holds `file` (both real paths): not itself, not above it, not beside it. */
const inside = (root: string, file: string) => {
  const rel = Path.relative(root, file)
  return rel !== "" && !rel.startsWith("..") && !Path.isAbsolute(rel)
}

/** @since 0.1.0 @category models */
export interface Options {
  /** the folder checkpoint files must lie in; without it no checkpoint is handed out */
  readonly stateDir: string | undefined
  /** the checkpoints this server saved */
  readonly checkpoints: CheckpointIndex
  /** the files of a checkpoint's archive, from its state file's bytes (default: the state file alone), or why there are none */
  readonly pack?: ((stateBytes: Uint8Array, entry: Entry) => ReadonlyArray<Tar.TarFile> | string) | undefined
  readonly now: Effect.Effect<number>
  readonly ttlMillis?: number | undefined
}

/** A download URL's token: what it hands out, until when. */
interface Grant {
  readonly file: string
  readonly entry: Entry
  readonly filename: string
  readonly expiresAt: number
}

/** What the routes share: the options and the download URLs that still work, by token. */
interface State {
  readonly options: Options
  readonly ttl: number
  readonly tokens: Map<string, Grant>
}

/** The checkpoint's file, resolved, if it lies inside the state folder. */
const resolve = (stateDir: string | undefined, uri: string, saved: string) =>
  Effect.gen(function* () {
    if (stateDir === undefined) {
      return yield* new Reject({ status: 403, message: `${uri}: this server hands out no checkpoint files (it was started without a state folder)` })
    }
    const fs = yield* Files.current
    const real = (p: string) => fs.realPath(p).pipe(Effect.mapError(() => notFound(`${uri}: its state file is gone from the server (it was deleted or moved)`)))
    const root = yield* real(stateDir)
    const file = yield* real(saved)
    if (!inside(root, file)) {
      return yield* new Reject({ status: 403, message: `${uri}: its file lies outside the server's state folder, so it is not handed out` })
    }
    const stat = yield* fs.stat(file).pipe(Effect.mapError(() => notFound(`${uri}: its state file is gone from the server`)))
    if (stat.type !== "File") return yield* notFound(`${uri}: its state file is not a file`)
    return file
  })

const archive = (st: State, rawModelId: string, rawCheckpointId: string, origin: string) =>
  Effect.gen(function* () {
    const modelId = yield* decodePart(rawModelId, "model_id")
    const checkpointId = yield* decodePart(rawCheckpointId, "checkpoint_id")
    const name = /^(weights|sampler_weights)\/([^/]+)$/.exec(checkpointId)?.[2]
    if (name === undefined) {
      return yield* new Reject({ status: 400, message: `checkpoint_id ${JSON.stringify(checkpointId.slice(0, 200))} is not weights/<name> or sampler_weights/<name> (the part of a tinker:// path after the model id)` })
    }
    yield* checkName(name, "checkpoint_id's name")
    const uri = `tinker://${modelId}/${checkpointId}`
    const entry = st.options.checkpoints.get(uri)
    if (entry === undefined) return yield* notFound(`no checkpoint ${uri.slice(0, 300)} on this server: only checkpoints this server saved can be downloaded`)
    const saved = stateFileOf(st.options.checkpoints, entry)
    if (saved === undefined) {
      return yield* notFound(
        `${uri}: sampler weights are kept as files only where a training checkpoint holds the same weights; save_state (save_weights) at the same step, or save the sampler weights with a name`,
      )
    }
    const file = yield* resolve(st.options.stateDir, uri, saved)
    const token = globalThis.crypto.randomUUID().replace(/-/g, "") + globalThis.crypto.randomUUID().replace(/-/g, "")
    const expiresAt = (yield* st.options.now) + st.ttl
    st.tokens.set(token, { file, entry, filename: `${name}.tar`, expiresAt })
    return { url: `${origin}${Wire.API_PREFIX}/${FILES_ROUTE}/${token}`, expires: new Date(expiresAt) }
  })

const download = (st: State, token: string) =>
  Effect.gen(function* () {
    const grant = st.tokens.get(token)
    const now = yield* st.options.now
    if (grant === undefined || grant.expiresAt <= now) {
      if (grant !== undefined) st.tokens.delete(token)
      return yield* notFound("this download URL is unknown or has expired: ask the archive route for a new one")
    }
    const fs = yield* Files.current
    const bytes = yield* fs.readFile(grant.file).pipe(Effect.mapError(() => notFound("the checkpoint's file is gone from the server")))
    const files = st.options.pack === undefined ? [{ name: Path.basename(grant.file), bytes }] : st.options.pack(bytes, grant.entry)
    if (typeof files === "string") return yield* new Reject({ status: 409, message: `${grant.entry.tinker_path} cannot be archived: ${files}` })
    const tar = Tar.pack(files, Math.floor(Date.parse(grant.entry.created_at) / 1000) || 0)
    if (typeof tar === "string") return yield* new Reject({ status: 500, message: tar })
    return { stream: Stream.make(tar), size: tar.length, filename: grant.filename, contentType: "application/x-tar" }
  })

const sweep = (st: State) =>
  Effect.flatMap(st.options.now, (now) =>
    Effect.sync(() => {
      for (const [token, grant] of st.tokens) if (grant.expiresAt <= now) st.tokens.delete(token)
    }),
  )

/** @since 0.1.0 @category constructors */
export const make = (options: Options): Archives => {
  const st: State = { options, ttl: options.ttlMillis ?? DEFAULT_TTL_MILLIS, tokens: new Map() }
  return {
    archive: (modelId, checkpointId, origin) => archive(st, modelId, checkpointId, origin),
    download: (token) => download(st, token),
    sweep: sweep(st),
    size: () => st.tokens.size,
  }
}

/**
 * Checkpoint downloads, as Tinker's archive route:
 *
 * - `GET /api/v1/training_runs/{model_id}/checkpoints/{checkpoint_id}/archive`, where
 *   `checkpoint_id` is `weights/<name>` (the slash as is or as `%2F`), answers
 *   `{"url", "expires"}`: a download URL and when it stops working (ISO time, after
 *   `ttlMillis`, default 15 minutes). It needs the API key like every other route.
 * - `GET /api/v1/checkpoint_files/{token}` (the `url`) returns the state file's bytes
 *   (`application/octet-stream`, streamed). The unguessable token is the credential, as a
 *   signed URL's signature is, so this route takes no API key.
 *
 * Only training checkpoints that this server saved (`save_weights`, recorded in its
 * checkpoint index, so also those of its earlier runs on the same `stateDir`) are handed
 * out, and only when their file lies inside `stateDir` (symbolic links resolved): a
 * client never names a file on this machine.
 *
 * @since 0.1.0
 */
import * as Fs from "node:fs"
import * as Path from "node:path"
import { Effect, Stream } from "effect"
import { checkName, notFound, Reject } from "./Requests.ts"
import * as Wire from "./Wire.ts"

/** The path of the download route, below the API prefix. @since 0.1.0 @category constants */
export const FILES_ROUTE = "checkpoint_files"

/** How long a download URL works. @since 0.1.0 @category constants */
export const DEFAULT_TTL_MILLIS = 15 * 60 * 1000

/** A file to send: its bytes as a stream, their count and the name to save it under. @since 0.1.0 @category models */
export interface FileReply {
  readonly stream: Stream.Stream<Uint8Array, Error>
  readonly size: number
  readonly filename: string
}

/** @since 0.1.0 @category models */
export interface Archives {
  /** the archive route: `modelId` and `checkpointId` as they came in the path (percent-encoded); `origin` is where the download URL points */
  readonly archive: (modelId: string, checkpointId: string, origin: string) => Effect.Effect<{ readonly url: string; readonly expires: string }, Reject>
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

/** @since 0.1.0 @category constructors */
export const make = (options: {
  /** the folder checkpoint files must lie in; without it no checkpoint is handed out */
  readonly stateDir: string | undefined
  /** tinker:// training checkpoint -> its file, as the checkpoint index records it */
  readonly checkpoints: ReadonlyMap<string, string>
  readonly now: Effect.Effect<number>
  readonly ttlMillis?: number | undefined
}): Archives => {
  const ttl = options.ttlMillis ?? DEFAULT_TTL_MILLIS
  const tokens = new Map<string, { readonly file: string; readonly filename: string; readonly expiresAt: number }>()

  /** The checkpoint's file, resolved, if it lies inside the state folder. */
  const resolve = (uri: string, saved: string) =>
    Effect.gen(function* () {
      if (options.stateDir === undefined) {
        return yield* new Reject({ status: 403, message: `${uri}: this server hands out no checkpoint files (it was started without a state folder)` })
      }
      const real = (p: string) => Effect.tryPromise({ try: () => Fs.promises.realpath(p), catch: () => notFound(`${uri}: its state file is gone from the server (it was deleted or moved)`) })
      const root = yield* real(options.stateDir)
      const file = yield* real(saved)
      if (!inside(root, file)) {
        return yield* new Reject({ status: 403, message: `${uri}: its file lies outside the server's state folder, so it is not handed out` })
      }
      const stat = yield* Effect.tryPromise({ try: () => Fs.promises.stat(file), catch: () => notFound(`${uri}: its state file is gone from the server`) })
      if (!stat.isFile()) return yield* notFound(`${uri}: its state file is not a file`)
      return file
    })

  const archive: Archives["archive"] = (rawModelId, rawCheckpointId, origin) =>
    Effect.gen(function* () {
      const modelId = yield* decodePart(rawModelId, "model_id")
      const checkpointId = yield* decodePart(rawCheckpointId, "checkpoint_id")
      const m = /^(weights|sampler_weights)\/([^/]+)$/.exec(checkpointId)
      if (m === null) {
        return yield* new Reject({ status: 400, message: `checkpoint_id ${JSON.stringify(checkpointId.slice(0, 200))} is not weights/<name> (the part of a tinker:// path after the model id)` })
      }
      if (m[1] === "sampler_weights") {
        return yield* notFound(`checkpoint_id ${checkpointId}: sampler weights are not kept as files here; download a training checkpoint (weights/<name>, from save_weights)`)
      }
      yield* checkName(m[2]!, "checkpoint_id's name")
      const uri = `tinker://${modelId}/${checkpointId}`
      const saved = options.checkpoints.get(uri)
      if (saved === undefined) {
        return yield* notFound(`no checkpoint ${uri.slice(0, 300)} on this server: only training checkpoints this server saved (save_weights) can be downloaded`)
      }
      const file = yield* resolve(uri, saved)
      const token = globalThis.crypto.randomUUID().replace(/-/g, "") + globalThis.crypto.randomUUID().replace(/-/g, "")
      const expiresAt = (yield* options.now) + ttl
      tokens.set(token, { file, filename: `${m[2]!}${Path.extname(file)}`, expiresAt })
      return { url: `${origin}${Wire.API_PREFIX}/${FILES_ROUTE}/${token}`, expires: new Date(expiresAt).toISOString() }
    })

  const download: Archives["download"] = (token) =>
    Effect.gen(function* () {
      const entry = tokens.get(token)
      const now = yield* options.now
      if (entry === undefined || entry.expiresAt <= now) {
        if (entry !== undefined) tokens.delete(token)
        return yield* notFound("this download URL is unknown or has expired: ask the archive route for a new one")
      }
      const stat = yield* Effect.tryPromise({ try: () => Fs.promises.stat(entry.file), catch: () => notFound("the checkpoint's file is gone from the server") })
      return {
        // opened when the answer is sent, not before
        stream: Stream.suspend(() => Stream.fromAsyncIterable(Fs.createReadStream(entry.file), (e) => (e instanceof Error ? e : new Error(String(e))))).pipe(
          Stream.map((chunk) => (typeof chunk === "string" ? new TextEncoder().encode(chunk) : new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength))),
        ),
        size: stat.size,
        filename: entry.filename,
      }
    })

  const sweep = Effect.flatMap(options.now, (now) =>
    Effect.sync(() => {
      for (const [token, entry] of tokens) if (entry.expiresAt <= now) tokens.delete(token)
    }),
  )

  return { archive, download, sweep, size: () => tokens.size }
}

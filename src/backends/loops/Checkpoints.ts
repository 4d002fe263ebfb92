/**
 * Downloading a Loops checkpoint (`bt://loops:<run_id>/(weights|sampler_weights)/<name>`).
 *
 * A checkpoint is a folder: `GET /v1/loops/checkpoints?checkpoint_path=<uri>` finds its
 * global id, `GET /v1/loops/checkpoints/{id}/files` lists its files as presigned URLs a
 * page at a time (`page_token` is an offset; the walk stops at a null
 * `next_page_token` or an empty page), and each file is fetched from its URL without
 * the Baseten key (a presigned URL is its own credential; the key must not reach the
 * storage host). Files are written under the output folder by `relative_file_name`
 * (files of node rank N > 0 under `node-N/`), each streamed to a temp file and renamed
 * into place once its size matches `size_bytes`; a name that would leave the folder is
 * refused.
 *
 * Presigned URLs exist only for checkpoints stored in S3; for one stored in a Baseten
 * volume the files route fails (`Checkpoint <id> has no presigned URLs`, as the Loops
 * download guide says; `GET /v1/loops/checkpoints/{id}/source` tells the two apart, a
 * route gyre does not call since its answer's schema is not in the reference gyre
 * read). That failure is reported as such, with what to use instead.
 *
 * What the files hold is Loops' own layout: a `sampler_weights` checkpoint is the LoRA
 * adapter the sampler loads, a `weights` checkpoint the trainer's full state. gyre
 * writes them as they are and counts the tensors of any `.safetensors` among them.
 *
 * @since 0.1.0
 */
import * as Fs from "node:fs"
import * as Path from "node:path"
import { Effect, type FileSystem, type PlatformError, Schedule, Stream } from "effect"
import { HttpClient, HttpClientRequest } from "effect/http"
import * as Files from "../../platform/FileSystem.ts"
import * as PlatformHttpClient from "../../platform/HttpClient.ts"
import * as Api from "./Api.ts"
import { ControlPlane } from "./ControlPlane.ts"
import { LoopsError } from "./Errors.ts"
import * as RunRecord from "./RunRecord.ts"

const ROUTE = "checkpoint files"
const fail = (reason: LoopsError["reason"], message: string) => new LoopsError({ reason, route: ROUTE, message })

/** Every file of a checkpoint, walking the pages of the files route. @since 0.1.0 @category constructors */
export const listFiles = Effect.fn("Loops.listFiles")(function* (checkpointId: string) {
  const cp = yield* ControlPlane
  const files: Array<Api.CheckpointFile> = []
  for (let token = 0; ;) {
    const page = yield* cp.checkpointFiles(checkpointId, { page_token: token }).pipe(
      Effect.mapError((e) =>
        e.message.includes("has no presigned URLs")
          ? fail("NotFound", `checkpoint ${checkpointId} is stored in a Baseten volume, and the REST API hands out presigned URLs only for checkpoints in S3: download it with the Loops Python SDK (${e.message})`)
          : e
      ),
    )
    files.push(...page.presigned_urls)
    const next = page.next_page_token
    if (next === undefined || next === null || page.presigned_urls.length === 0) return files
    if (next <= token) return yield* fail("Decode", `the files route of checkpoint ${checkpointId} answered next_page_token ${next} after page_token ${token}; it must grow`)
    token = next
  }
})

/** Where a file goes under `out`; undefined when its name would leave `out`. */
const destination = (out: string, file: Api.CheckpointFile): string | undefined => {
  const rel = Path.normalize(file.node_rank > 0 ? Path.join(`node-${file.node_rank}`, file.relative_file_name) : file.relative_file_name)
  if (rel === "" || rel === "." || Path.isAbsolute(rel) || rel.split(/[\\/]/).includes("..")) return undefined
  return Path.join(out, rel)
}

/** How many downloaded bytes are gathered before they are appended to the file. */
const FLUSH_BYTES = 4 * 2 ** 20

/**
 * Writes a download to `part` through the FileSystem service, appending a few MiB at a
 * time: the service has no open file handle to write chunk by chunk, and a checkpoint
 * (gigabytes) must not be held whole in memory. Measured on 256 MiB of 16 KiB chunks
 * (Node 20, 2 cores, in the page cache): sync fd writes 120-210 ms, one service append per chunk
 * 1.6 s, one per 4 MiB 160-390 ms, off the event loop. Answers the bytes written.
 */
const writeStream = (fs: FileSystem.FileSystem, part: string, body: Stream.Stream<Uint8Array, LoopsError>) =>
  Effect.gen(function* () {
    const cannot = (e: PlatformError.PlatformError) => fail("Failed", `cannot write ${part}: ${Files.messageOf(e)}`)
    yield* fs.writeFile(part, new Uint8Array(0)).pipe(Effect.mapError(cannot))
    let pending: Array<Uint8Array> = []
    let size = 0
    let total = 0
    const flush = Effect.suspend(() => {
      const bytes = new Uint8Array(size)
      let at = 0
      for (const chunk of pending) {
        bytes.set(chunk, at)
        at += chunk.length
      }
      pending = []
      size = 0
      return fs.writeFile(part, bytes, { flag: "a" }).pipe(Effect.mapError(cannot))
    })
    yield* Stream.runForEach(body, (chunk) => {
      pending.push(chunk)
      size += chunk.length
      total += chunk.length
      return size >= FLUSH_BYTES ? flush : Effect.void
    })
    if (size > 0) yield* flush
    return total
  })

/** Streams one presigned URL to `dest` (no Authorization header), checking its size. */
const fetchFile = (http: HttpClient.HttpClient, file: Api.CheckpointFile, dest: string) =>
  Effect.gen(function* () {
    const fs = yield* Files.current
    const res = yield* http.execute(HttpClientRequest.get(file.url)).pipe(Effect.mapError((e) => fail("Unavailable", `${file.relative_file_name}: no answer from its presigned URL: ${e.reason._tag}`)))
    if (res.status !== 200) return yield* fail(res.status >= 500 || res.status === 429 ? "Unavailable" : "NotFound", `${file.relative_file_name}: its presigned URL answered HTTP ${res.status} (it may have expired: run the export again)`)
    yield* fs.makeDirectory(Path.dirname(dest), { recursive: true }).pipe(Effect.mapError((e) => fail("Failed", `cannot create ${Path.dirname(dest)}: ${Files.messageOf(e)}`)))
    const part = `${dest}.part`
    const written = yield* writeStream(fs, part, res.stream.pipe(Stream.mapError((e) => fail("Unavailable", `${file.relative_file_name}: the download broke off: ${e.reason._tag}`))))
    if (written !== file.size_bytes) {
      yield* fs.remove(part, { force: true }).pipe(Effect.ignore)
      return yield* fail("Unavailable", `${file.relative_file_name}: got ${written} bytes, the files route lists ${file.size_bytes}`)
    }
    yield* fs.rename(part, dest).pipe(Effect.mapError((e) => fail("Failed", `cannot write ${dest}: ${Files.messageOf(e)}`)))
  })

/** The number of tensors in a safetensors file (its JSON header's keys, less `__metadata__`); 0 when it is not one. */
const tensorsIn = (file: string): number => {
  try {
    // sync: 8 bytes and a header from the start of a file of gigabytes; the FileSystem service has no ranged read (no `open`), only whole files
    const fd = Fs.openSync(file, "r")
    try {
      const head = Buffer.alloc(8)
      if (Fs.readSync(fd, head, 0, 8, 0) < 8) return 0
      const n = Number(head.readBigUInt64LE(0))
      if (n > 100 * 2 ** 20) return 0
      const json = Buffer.alloc(n)
      Fs.readSync(fd, json, 0, n, 8)
      return Object.keys(JSON.parse(json.toString("utf8")) as object).filter((k) => k !== "__metadata__").length
    } finally {
      Fs.closeSync(fd)
    }
  } catch {
    return 0
  }
}

/**
 * Downloads every file of checkpoint `uri` into `out`. Needs the control plane and an
 * `HttpClient`.
 * @since 0.1.0 @category constructors
 */
export const download = Effect.fn("Loops.downloadCheckpoint")(function* (uri: string, out: string) {
  const cp = yield* ControlPlane
  const http = yield* HttpClient.HttpClient
  const parsed = Api.parseCheckpointUri(uri)
  if (parsed === undefined) return yield* fail("InvalidInput", `${uri} is not a Loops checkpoint URI: bt://loops:<run_id>/(weights|sampler_weights)/<name>`)
  const found = yield* cp.listCheckpoints({ checkpoint_path: uri })
  const checkpoint = found[0]
  if (checkpoint === undefined) return yield* fail("NotFound", `Loops has no checkpoint ${uri} at ${cp.url}; list the run's checkpoints with: gyre loops checkpoints ${parsed.runId}`)
  const files = yield* listFiles(checkpoint.id)
  if (files.length === 0) return yield* fail("NotFound", `checkpoint ${uri} (${checkpoint.id}) lists no files${checkpoint.sync_status === "SYNCING" ? " yet: it is still SYNCING, try again shortly" : ""}`)
  const written: Array<string> = []
  for (const file of files) {
    const dest = destination(out, file)
    if (dest === undefined) return yield* fail("Decode", `checkpoint ${uri} lists a file named ${JSON.stringify(file.relative_file_name)}, which would be written outside ${out}; nothing more is written`)
    yield* fetchFile(http, file, dest).pipe(Effect.retry({ schedule: Schedule.exponential("500 millis"), times: 3, while: (e) => e.reason === "Unavailable" }))
    written.push(dest)
  }
  return { checkpoint, files: written, tensors: written.filter((f) => f.endsWith(".safetensors")).reduce((n, f) => n + tensorsIn(f), 0) }
})

/**
 * Downloads checkpoint `uri` into `out` on gyre's HTTP client. The control plane:
 * `url`, else the one the run folder `runDir` trained on (its `loops.json`), else
 * `LOOPS_API_URL`, else Baseten's API.
 * @since 0.1.0 @category constructors
 */
export const exportCheckpoint = Effect.fn("Loops.exportCheckpoint")(function* (uri: string, out: string, options: { readonly url?: string | undefined; readonly runDir?: string | undefined } = {}) {
  const recorded = options.runDir === undefined ? undefined : (yield* RunRecord.read(options.runDir).pipe(Effect.orElseSucceed(() => undefined)))?.controlPlane
  return yield* download(uri, out).pipe(Effect.provide(ControlPlane.layer({ url: options.url ?? recorded })), Effect.provide(PlatformHttpClient.layer))
})

/**
 * The server's durable record of the checkpoints it saved, so that a restarted server
 * still finds them: `<stateDir>/checkpoint-index.jsonl`, one JSON object per line
 * (`Entry`), appended and synced to disk (`RunLog.appendJsonl`) before the save that
 * made it answers. A client therefore never holds a `tinker://` path the index lacks,
 * also after a power loss.
 *
 * - Read when the server starts: a later row for the same `tinker_path` replaces an
 *   earlier one (a name saved again). A line torn by a crash is dropped, and the file
 *   rewritten without it (atomically) before anything is appended, so no new row is
 *   glued to a torn one.
 * - A training checkpoint's row names its state file relative to the state folder (so
 *   the folder may move), or absolute when the backend wrote it elsewhere. A path with
 *   a URI scheme (`mem://…`, `s3://…`) names no file here and is kept as the backend
 *   returned it, for the backend's `loadState`. A sampler
 *   checkpoint's row has no file (sampler weights are not written to disk): it names its
 *   model and weights (`policy_version`, `loads`), which a training checkpoint of the same
 *   weights may hold (`RestoredSamplers.ts`).
 * - Without a state folder the index lives in memory only.
 *
 * @since 0.1.0
 */
import * as Path from "node:path"
import { Effect, Option, Schema } from "effect"
import { BackendError } from "../../../contract/Contract.ts"
import * as RunLog from "../../../folder/RunLog.ts"
import * as Files from "../../../platform/FileSystem.ts"

/** The index's file name, inside the state folder. @since 0.1.0 @category constants */
export const FILE = "checkpoint-index.jsonl"

/** One saved checkpoint. @since 0.1.0 @category models */
export const Entry = Schema.Struct({
  /** `tinker://<model_id>/<kind>/<name>` */
  tinker_path: Schema.String,
  kind: Schema.Literals(["weights", "sampler_weights"]),
  model_id: Schema.String,
  name: Schema.String,
  /** the state file: relative to the state folder when inside it */
  file: Schema.optional(Schema.String),
  base_model: Schema.String,
  lora_rank: Schema.Int,
  /** false when the adapter does not train that part (absent: it does) */
  train_attn: Schema.optional(Schema.Boolean),
  train_mlp: Schema.optional(Schema.Boolean),
  policy_version: Schema.optional(Schema.Int),
  /**
   * how many `load_weights` the model had applied before this save: with `model_id` and
   * `policy_version` it names the weights exactly (only `optim_step` and `load_weights`
   * change them), so a sampler checkpoint can be served again from a training checkpoint
   * of the same weights
   */
  loads: Schema.optional(Schema.Int),
  /** ISO time of the save */
  created_at: Schema.String,
  size_bytes: Schema.optional(Schema.Int),
})
/** @since 0.1.0 @category models */
export type Entry = typeof Entry.Type

const decodeEntry = Schema.decodeUnknownOption(Entry)

/** @since 0.1.0 @category models */
export interface CheckpointIndex {
  /** the index file, or undefined when it is kept in memory only */
  readonly path: string | undefined
  /** tinker path -> the checkpoint's state file (resolved), for training checkpoints with one */
  readonly files: ReadonlyMap<string, string>
  readonly get: (tinkerPath: string) => Entry | undefined
  /** every entry, oldest first; of one model when `modelId` is given */
  readonly list: (modelId?: string) => ReadonlyArray<Entry>
  /** records a checkpoint: appended and synced before it returns; `file` as the backend returned it */
  readonly record: (entry: Omit<Entry, "file" | "created_at" | "size_bytes"> & { readonly file?: string | undefined }) => Effect.Effect<Entry, BackendError>
}

/** A backend's path with a URI scheme (`mem://…`, `s3://…`): not a file on this machine. */
const isUri = (file: string) => /^[A-Za-z][A-Za-z0-9+.-]*:\/\//.test(file)

/** `file` as the index keeps it: relative to `stateDir` when inside it, absolute otherwise; a URI as it is. */
const stored = (stateDir: string | undefined, file: string) => {
  if (isUri(file)) return file
  if (stateDir === undefined) return Path.resolve(file)
  const rel = Path.relative(Path.resolve(stateDir), Path.resolve(file))
  return rel !== "" && !rel.startsWith("..") && !Path.isAbsolute(rel) ? rel : Path.resolve(file)
}

const failure = (operation: string, path: string) => (e: { readonly message: string }) =>
  new BackendError({ reason: "Internal", operation, message: `checkpoint index ${path}: ${e.message}` })

/**
 * Opens the index of `stateDir` (reading what earlier runs of the server recorded), or
 * an index in memory when `stateDir` is undefined.
 * @since 0.1.0 @category constructors
 */
export const open = Effect.fn("CheckpointIndex.open")(function* (stateDir: string | undefined, now: Effect.Effect<number>) {
  const fs = yield* Files.current
  const path = stateDir === undefined ? undefined : Path.join(stateDir, FILE)
  const entries = new Map<string, Entry>()
  const files = new Map<string, string>()
  const resolve = (file: string) => (stateDir === undefined || Path.isAbsolute(file) || isUri(file) ? file : Path.join(stateDir, file))
  const remember = (e: Entry) => {
    entries.delete(e.tinker_path)
    entries.set(e.tinker_path, e)
    if (e.kind === "weights" && e.file !== undefined) files.set(e.tinker_path, resolve(e.file))
    else files.delete(e.tinker_path)
  }
  if (path !== undefined && (yield* Files.exists(path))) {
    const rows = yield* RunLog.readJsonl(path).pipe(Effect.mapError(failure("serve", path)))
    for (const row of rows) {
      const e = decodeEntry(row)
      if (Option.isSome(e)) remember(e.value)
    }
    const text = yield* fs.readFileString(path).pipe(Effect.mapError((e) => failure("serve", path)({ message: Files.messageOf(e) })))
    // a torn line (a crash mid-append) goes before the next append could glue a row to it
    if (rows.length !== text.split("\n").filter((l) => l.trim() !== "").length || (text.length > 0 && !text.endsWith("\n"))) {
      yield* RunLog.writeAtomic(path, rows.map((r) => JSON.stringify(r) + "\n").join("")).pipe(Effect.mapError(failure("serve", path)))
      yield* Effect.logWarning(`checkpoint index ${path}: dropped a line left unfinished by an interrupted write`)
    }
    yield* Effect.logInfo(`checkpoint index ${path}: ${entries.size} checkpoint(s) saved by earlier runs of this server`)
  }

  const record: CheckpointIndex["record"] = (given) =>
    Effect.gen(function* () {
      const operation = given.kind === "weights" ? "save_weights" : "save_weights_for_sampler"
      const file = given.file
      const size = file === undefined || isUri(file) ? undefined : yield* fs.stat(file).pipe(Effect.map((s) => Number(s.size)), Effect.orElseSucceed(() => undefined))
      const entry: Entry = {
        tinker_path: given.tinker_path,
        kind: given.kind,
        model_id: given.model_id,
        name: given.name,
        ...(given.file !== undefined ? { file: stored(stateDir, given.file) } : {}),
        base_model: given.base_model,
        lora_rank: given.lora_rank,
        ...(given.train_attn !== undefined ? { train_attn: given.train_attn } : {}),
        ...(given.train_mlp !== undefined ? { train_mlp: given.train_mlp } : {}),
        ...(given.policy_version !== undefined ? { policy_version: given.policy_version } : {}),
        ...(given.loads !== undefined ? { loads: given.loads } : {}),
        created_at: new Date(yield* now).toISOString(),
        ...(size !== undefined ? { size_bytes: size } : {}),
      }
      if (path !== undefined) yield* RunLog.appendJsonl(path, [entry]).pipe(Effect.mapError(failure(operation, path)))
      remember(entry)
      return entry
    })

  const index: CheckpointIndex = {
    path,
    files,
    get: (p) => entries.get(p),
    list: (modelId) => [...entries.values()].filter((e) => modelId === undefined || e.model_id === modelId),
    record,
  }
  return index
})

/**
 * The state file that holds a checkpoint's weights: a training checkpoint's own; for a
 * sampler checkpoint (whose weights are not kept as a file), that of a training checkpoint
 * of the same model with the same `policy_version` and `loads` (only `optim_step` and
 * `load_weights` change a model's weights, so the two hold the same ones).
 * @since 0.1.0 @category combinators
 */
export const stateFileOf = (index: CheckpointIndex, entry: Entry): string | undefined => {
  const own = index.files.get(entry.tinker_path)
  if (own !== undefined || entry.kind === "weights") return own
  if (entry.policy_version === undefined || entry.loads === undefined) return undefined
  const source = index
    .list(entry.model_id)
    .find((e) => e.kind === "weights" && e.file !== undefined && e.policy_version === entry.policy_version && e.loads === entry.loads)
  return source === undefined ? undefined : index.files.get(source.tinker_path)
}

/**
 * A row index kept on disk between runs, in gyre's cache folder (`index/` beside the Hub
 * downloads): the split hash of every row and what the table learnt in its scan (a JSONL
 * file's row offsets; a Parquet or CSV file's spool of rows and their offsets), under a key made of the data's identity (path, size, modification
 * time), the env's name and its problem Schema. A second run on the same file reads this
 * instead of decoding every row. Separate from `RowIndex.ts` because this is where an index
 * is kept, not what it is; the index checks what it reads here against rows it decodes.
 *
 * @since 0.1.0
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { Effect, Schema } from "effect"
import { hash32 } from "../util/Random.ts"
import type { Env } from "./Definition.ts"
import { cacheRoot } from "./sources/HubCache.ts"
import type { RowTable } from "./sources/RowTable.ts"

/** changes when the layout below or the meaning of what is kept changes */
const FORMAT = `gyre row index 1 ${Os.endianness()}`
const MAGIC = 0x31495247 // "GRI1", little-endian
/** kept indexes; the least recently used go past this many, or past this many bytes with their tables' files */
const KEPT = 32
const KEPT_BYTES = 4 * 1024 ** 3

/** @since 0.1.0 @category models */
export interface Kept {
  /** how many rows the source has */
  readonly rows: number
  /** each row's split hash (empty where nothing is held out, so none was computed) */
  readonly hashes: Int32Array
  /** the table's own index, as its `persist.save` gave it */
  readonly parts: ReadonlyArray<Float64Array>
}

/** Where one index is kept, and the key that must match. @since 0.1.0 @category models */
export interface Slot {
  readonly file: string
  /** where the table may keep a file of its own (a copy of its rows), removed with the index */
  readonly beside: string
  readonly key: string
}

/** the problem Schema as far as it can be written down; undefined where it cannot */
const fingerprint = (env: Env<any, any>): string | undefined => {
  try {
    return JSON.stringify([Schema.toJsonSchemaDocument(env.problem), Schema.toJsonSchemaDocument(Schema.toType(env.problem))])
  } catch {
    return undefined
  }
}

/**
 * The slot of an env's index over a table, or undefined where the table cannot be kept
 * (no `persist`, data too small to be worth it, a Schema with no JSON Schema form).
 * @since 0.1.0 @category constructors
 */
export const slotOf = (env: Env<any, any>, table: RowTable): Effect.Effect<Slot | undefined> =>
  Effect.gen(function*() {
    if (table.persist === undefined) return undefined
    const identity = yield* table.persist.identity
    const schema = fingerprint(env)
    const root = yield* Effect.orElseSucceed(cacheRoot, () => undefined)
    if (identity === undefined || schema === undefined || root === undefined) return undefined
    const key = [FORMAT, identity, env.name, schema].join("\n")
    const name = Path.join(root, "index", `${hash32(key).toString(16).padStart(8, "0")}${hash32(`${key}\n`).toString(16).padStart(8, "0")}`)
    return { file: `${name}.bin`, beside: `${name}.rows`, key }
  })

const Header = Schema.fromJsonString(Schema.Struct({ key: Schema.String, rows: Schema.Int, hashes: Schema.Int, parts: Schema.Array(Schema.Int) }))
const decodeHeader = Schema.decodeUnknownOption(Header)
const align8 = (n: number) => Math.ceil(n / 8) * 8

/** A kept index as bytes: magic, header length, JSON header, then the arrays, each 8-aligned. */
const encode = (key: string, kept: Kept): Buffer => {
  const header = Buffer.from(JSON.stringify({ key, rows: kept.rows, hashes: kept.hashes.length, parts: kept.parts.map((p) => p.length) }))
  const arrays = [kept.hashes, ...kept.parts]
  const out = Buffer.alloc(align8(8 + header.length) + arrays.reduce((n, a) => n + align8(a.byteLength), 0))
  out.writeUInt32LE(MAGIC, 0)
  out.writeUInt32LE(header.length, 4)
  header.copy(out, 8)
  let at = align8(8 + header.length)
  for (const a of arrays) {
    out.set(new Uint8Array(a.buffer, a.byteOffset, a.byteLength), at)
    at += align8(a.byteLength)
  }
  return out
}

const decode = (key: string, bytes: Buffer): Kept | undefined => {
  if (bytes.length < 8 || bytes.readUInt32LE(0) !== MAGIC) return undefined
  const length = bytes.readUInt32LE(4)
  const header = decodeHeader(bytes.toString("utf8", 8, 8 + length))
  if (header._tag === "None" || header.value.key !== key) return undefined
  let at = align8(8 + length)
  // copied out of the file's buffer, whose offset need not be aligned for the arrays
  const take = (bytesLong: number) => {
    const slice = bytes.buffer.slice(bytes.byteOffset + at, bytes.byteOffset + at + bytesLong)
    at += align8(bytesLong)
    return slice
  }
  const { rows, hashes, parts } = header.value
  const need = align8(8 + length) + align8(hashes * 4) + parts.reduce((n, p) => n + align8(p * 8), 0)
  if (bytes.length !== need) return undefined
  return { rows, hashes: new Int32Array(take(hashes * 4)), parts: parts.map((p) => new Float64Array(take(p * 8))) }
}

/**
 * The index kept in a slot, if one is there under the same key (marked as used, so it is
 * among the last to go); anything unreadable is as good as none.
 * @since 0.1.0 @category accessors
 */
export const read = (slot: Slot): Effect.Effect<Kept | undefined> =>
  Effect.sync(() => {
    try {
      const kept = decode(slot.key, Fs.readFileSync(slot.file))
      if (kept !== undefined) Fs.utimesSync(slot.file, new Date(), new Date())
      return kept
    } catch {
      return undefined
    }
  })

/**
 * Removes all but the most recently used indexes of a folder (at most `KEPT`, at most
 * `KEPT_BYTES` with their tables' files, the newest always), each with its table's file.
 */
const evict = (folder: string) => {
  const files = Fs.readdirSync(folder)
  const sizeOf = (f: string) => Fs.statSync(Path.join(folder, f), { throwIfNoEntry: false })
  const used = files.filter((f) => f.endsWith(".bin")).map((f) => {
    const name = f.slice(0, -".bin".length)
    return { name, at: sizeOf(f)?.mtimeMs ?? 0, bytes: (sizeOf(f)?.size ?? 0) + (sizeOf(`${name}.rows`)?.size ?? 0) }
  })
  used.sort((a, b) => b.at - a.at)
  const left = new Set<string>()
  let bytes = 0
  for (const { name, bytes: size } of used) {
    if (left.size >= KEPT || (left.size > 0 && bytes + size > KEPT_BYTES)) break
    left.add(name)
    bytes += size
  }
  // what is past those, a table's file whose index is gone (its write failed), and what a
  // process that stopped mid-write left (a day old: no write takes that long)
  const stale = Date.now() - 24 * 3600_000
  for (const f of files) {
    const gone = (f.endsWith(".bin") || f.endsWith(".rows")) && !left.has(f.slice(0, f.lastIndexOf(".")))
    if (gone || (f.endsWith(".part") && (sizeOf(f)?.mtimeMs ?? Infinity) < stale)) Fs.rmSync(Path.join(folder, f), { force: true })
  }
}

/**
 * Keeps an index in its slot: `save` is the table's (it may keep its own file at
 * `slot.beside` first); the index is written whole under another name, then renamed, so a
 * reader never sees half of it. A cache that cannot be written only costs the next run a scan.
 * @since 0.1.0 @category constructors
 */
export const write = (slot: Slot, kept: Omit<Kept, "parts">, save: (beside: string) => ReadonlyArray<Float64Array>): Effect.Effect<void> =>
  Effect.try({
    try: () => {
      const folder = Path.dirname(slot.file)
      Fs.mkdirSync(folder, { recursive: true })
      const parts = save(slot.beside)
      const part = `${slot.file}.${process.pid}.part`
      Fs.writeFileSync(part, encode(slot.key, { ...kept, parts }))
      Fs.renameSync(part, slot.file)
      evict(folder)
    },
    catch: (e) => e as Error,
  }).pipe(Effect.catch((e) => Effect.logDebug(`the row index could not be kept in ${slot.file} (${e.message}); the next run scans the rows again`)))

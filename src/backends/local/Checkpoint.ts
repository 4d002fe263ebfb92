/**
 * Files of the embedded backend: one binary format for base weights, adapters and
 * optimizer state. Layout: the 8 bytes `GYRECKPT`, a little-endian uint32 header
 * length, a UTF-8 JSON header `{ meta, tensors: [{ name, shape, offset }] }`, zero
 * padding to a multiple of 4, then the float32 data (little-endian). Writes go to a
 * temporary file that is synced and renamed into place, so a reader never sees half a
 * file, also after a power loss.
 *
 * @since 0.1.0
 */
import * as path from "node:path"
import { Effect, type FileSystem, type PlatformError } from "effect"
import * as RunLog from "../../folder/RunLog.ts"
import * as Files from "../../platform/FileSystem.ts"
import { type ModelConfig, type Shapes, type Weights, baseShapes, sizeOf } from "./Model.ts"

const MAGIC = "GYRECKPT"

/** @since 0.1.0 @category models */
export interface CheckpointFile {
  readonly meta: Record<string, unknown>
  readonly tensors: Weights
  readonly shapes: Shapes
}

/** @since 0.1.0 @category combinators */
export const encode = (meta: Record<string, unknown>, tensors: Weights, shapes?: Shapes): Buffer => {
  // in name order (names are unique: the order `sort()` gives the names)
  const named = Object.entries(tensors).sort(([a], [b]) => (a < b ? -1 : 1))
  let offset = 0
  const entries = named.map(([name, data]) => {
    const shape = shapes?.[name] ?? [data.length]
    if (sizeOf(shape) !== data.length) throw new Error(`tensor ${name}: shape ${JSON.stringify(shape)} does not hold ${data.length} values`)
    const e = { name, shape: [...shape], offset }
    offset += data.length * 4
    return e
  })
  const header = Buffer.from(JSON.stringify({ meta, tensors: entries }), "utf8")
  const headerEnd = 12 + header.length
  const dataStart = Math.ceil(headerEnd / 4) * 4
  const buf = Buffer.alloc(dataStart + offset)
  buf.write(MAGIC, 0, "ascii")
  buf.writeUInt32LE(header.length, 8)
  header.copy(buf, 12)
  const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength)
  // the tensors back to back in the order of their offsets
  let p = dataStart
  for (const [, data] of named) for (let i = 0; i < data.length; i++, p += 4) view.setFloat32(p, data[i]!, true)
  return buf
}

/** @since 0.1.0 @category combinators */
export const decode = (buf: Uint8Array): CheckpointFile => {
  const b = Buffer.from(buf.buffer, buf.byteOffset, buf.byteLength)
  if (b.length < 12 || b.toString("ascii", 0, 8) !== MAGIC) throw new Error("not a checkpoint file (bad magic)")
  const hlen = b.readUInt32LE(8)
  if (12 + hlen > b.length) throw new Error("truncated checkpoint header")
  const header = JSON.parse(b.toString("utf8", 12, 12 + hlen)) as {
    meta: Record<string, unknown>
    tensors: Array<{ name: string; shape: Array<number>; offset: number }>
  }
  const dataStart = Math.ceil((12 + hlen) / 4) * 4
  const view = new DataView(b.buffer, b.byteOffset, b.byteLength)
  const tensors: Weights = {}
  const shapes: Record<string, Array<number>> = {}
  for (const e of header.tensors) {
    const n = sizeOf(e.shape)
    const start = dataStart + e.offset
    if (start + n * 4 > b.length) throw new Error(`truncated checkpoint data for ${e.name}`)
    const a = new Float32Array(n)
    for (let i = 0; i < n; i++) a[i] = view.getFloat32(start + i * 4, true)
    tensors[e.name] = a
    shapes[e.name] = e.shape
  }
  return { meta: header.meta, tensors, shapes }
}

/**
 * Writes a checkpoint file atomically and durably (`RunLog.writeAtomic`: a synced temp
 * file renamed into place, then the folder synced).
 * @since 0.1.0 @category combinators
 */
export const write = (file: string, meta: Record<string, unknown>, tensors: Weights, shapes?: Shapes): Promise<void> =>
  Effect.runPromise(RunLog.writeAtomic(file, encode(meta, tensors, shapes)))

/**
 * A read through the FileSystem service for the Promise API here (whose callers are the
 * engines' async code): a failure rejects with Node's own error (its message and code),
 * as `fs.readFile` did, else with the service's.
 */
const readWith = <A>(f: (fs: FileSystem.FileSystem) => Effect.Effect<A, PlatformError.PlatformError>): Promise<A> =>
  Effect.runPromise(Effect.flatMap(Files.current, f).pipe(Effect.mapError((e) => (e.cause instanceof Error ? e.cause : e))))

/** @since 0.1.0 @category combinators */
export const read = async (file: string): Promise<CheckpointFile> => decode(await readWith((fs) => fs.readFile(file)))

/** The base model directory: `config.json` and `weights.bin`. @since 0.1.0 @category combinators */
export const saveBaseModel = async (dir: string, config: ModelConfig, weights: Weights, extra: Record<string, unknown> = {}) => {
  await Effect.runPromise(RunLog.writeAtomic(path.join(dir, "config.json"), JSON.stringify({ ...config, tokenizer: "char-ascii", ...extra }, null, 2) + "\n"))
  await write(path.join(dir, "weights.bin"), { kind: "base", config }, weights, baseShapes(config))
}

/** @since 0.1.0 @category combinators */
export const loadBaseModel = async (dir: string): Promise<{ readonly config: ModelConfig; readonly weights: Weights }> => {
  const raw = JSON.parse(await readWith((fs) => fs.readFileString(path.join(dir, "config.json")))) as Record<string, unknown>
  const num = (k: string) => {
    const v = raw[k]
    if (typeof v !== "number") throw new Error(`${dir}/config.json: ${k} must be a number`)
    return v
  }
  const config: ModelConfig = {
    vocabSize: num("vocabSize"),
    contextLength: num("contextLength"),
    nLayers: num("nLayers"),
    dModel: num("dModel"),
    nHeads: num("nHeads"),
    mlpRatio: num("mlpRatio"),
  }
  const file = await read(path.join(dir, "weights.bin"))
  const shapes = baseShapes(config)
  for (const [name, shape] of Object.entries(shapes)) {
    const got = file.shapes[name]
    if (!got || got.join(",") !== shape.join(",")) throw new Error(`${dir}/weights.bin: ${name} has shape ${JSON.stringify(got)}, config wants ${JSON.stringify(shape)}`)
  }
  return { config, weights: file.tensors }
}

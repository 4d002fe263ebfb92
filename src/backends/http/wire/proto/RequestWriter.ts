/**
 * A `ForwardBackwardRequest` written straight to bytes: the same bytes as
 * `toBinary(requestToProto(req))` (fields in number order, map entries in the record's
 * key order, zero values left out), measured first and then written into one buffer, the
 * number arrays through typed arrays, without a message object, a packed copy per tensor
 * or a growing buffer. The datums are written once; each `seq_id` only adds the head.
 *
 * @since 0.1.0
 */
import { Result } from "effect"
import type * as Wire from "../Wire.ts"
import { type ForwardBackwardRequest, malformed, type ProtoError, unsupported } from "./Common.ts"

/** Fields of the request as written, without `model_id` and `seq_id`. */
type Body = Omit<ForwardBackwardRequest, "seq_id">

/** A request's bytes for each `seq_id`: the datums are written once. @since 0.1.0 @category models */
export type Numbered = (seq: number) => Uint8Array

const utf8 = new TextEncoder()
const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1
const TWO_32 = 2 ** 32

/** Scratch for the number arrays, shared (writing is synchronous): numbers are converted in native code, then copied as bytes. */
let f32 = new Float32Array(1024)
let i32 = new Int32Array(2048)
const scratch = (n: number) => {
  if (f32.length < n) f32 = new Float32Array(Math.max(n, f32.length * 2))
  if (i32.length < 2 * n) i32 = new Int32Array(Math.max(2 * n, i32.length * 2))
}

// ---------------------------------------------------------------------------
// sizes

const varintSize = (v: number): number => {
  if (v < 0) return 10 // a negative int32/int64 is sign-extended to ten bytes
  let n = 1
  while (v >= 128) {
    v = Math.floor(v / 128)
    n++
  }
  return n
}

/** A length-delimited field's size: its tag, its length and the bytes. */
const delimited = (len: number) => 1 + varintSize(len) + len

/** A tensor, measured: its values' bytes and the sizes of its parts. */
interface TensorPlan {
  readonly name: string
  readonly key: Uint8Array
  readonly tensor: Wire.TensorData
  readonly shape: ReadonlyArray<number>
  readonly shapeBytes: number
  /** the tensor message's size */
  readonly size: number
  /** the map entry's size */
  readonly entry: number
}

/** A datum, measured. */
interface DatumPlan {
  readonly chunks: ReadonlyArray<ReadonlyArray<number>>
  readonly tensors: ReadonlyArray<TensorPlan>
  readonly size: number
}

const ELEMENT_SIZE: Record<Wire.TensorData["dtype"], number> = { float32: 4, int64: 8 }
const DTYPE: Record<Wire.TensorData["dtype"], number> = { float32: 1, int64: 2 }

const tensorPlan = (key: string, t: Wire.TensorData, at: string): Result.Result<TensorPlan, ProtoError> => {
  const shape = t.shape ?? []
  let shapeBytes = 0
  for (const [i, d] of shape.entries()) {
    if (!Number.isSafeInteger(d)) return Result.fail(malformed(`${at}.shape[${i}] is ${d}; it must be an integer within ±2^53`))
    shapeBytes += varintSize(d)
  }
  const size = ELEMENT_SIZE[t.dtype]
  let encoding: number
  if (t.sparse_crow_indices === undefined) encoding = delimited(t.data.length * size)
  else if (t.sparse_col_indices === undefined) return Result.fail(malformed(`${at} has sparse_crow_indices without sparse_col_indices`))
  else {
    // SparseCsr's fields are bytes with implicit presence: an empty one is left out
    const part = (bytes: number) => (bytes === 0 ? 0 : delimited(bytes))
    encoding = delimited(part(t.data.length * size) + part(t.sparse_crow_indices.length * 8) + part(t.sparse_col_indices.length * 8))
  }
  const total = encoding + 2 + (shape.length > 0 ? delimited(shapeBytes) : 0) // dtype: its tag and a one-byte enum
  const keyBytes = utf8.encode(key)
  return Result.succeed({ name: key, key: keyBytes, tensor: t, shape, shapeBytes, size: total, entry: delimited(keyBytes.length) + delimited(total) })
}

/** Records as protobuf-es writes a map: sorted, then in `Object.keys` order (integer-like keys first). */
const mapOrder = <A>(o: Readonly<Record<string, A>>): Array<[string, A]> => {
  const sorted: Record<string, A> = {}
  for (const key of Object.keys(o).sort()) sorted[key] = o[key]!
  return Object.keys(sorted).map((k) => [k, sorted[k]!])
}

const datumPlan = (d: Wire.Datum, at: string): Result.Result<DatumPlan, ProtoError> => {
  let size = 0
  const chunks: Array<ReadonlyArray<number>> = []
  for (const chunk of d.model_input.chunks) {
    // Datum.model_input holds a Chunk, which holds an EncodedTextChunk, whose tokens (bytes) are left out when empty
    const bytes = chunk.tokens.length * 4
    size += delimited(delimited(bytes === 0 ? 0 : delimited(bytes)))
    chunks.push(chunk.tokens)
  }
  const tensors: Array<TensorPlan> = []
  for (const [key, t] of mapOrder(d.loss_fn_inputs)) {
    const plan = tensorPlan(key, t, `${at}.loss_fn_inputs.${key}`)
    if (Result.isFailure(plan)) return Result.fail(plan.failure)
    tensors.push(plan.success)
    size += delimited(plan.success.entry)
  }
  return Result.succeed({ chunks, tensors, size })
}

// ---------------------------------------------------------------------------
// writing

/** Writes into one buffer; a value that does not fit its type stops it with a message naming the value. */
class Writer {
  readonly out: Uint8Array
  readonly view: DataView
  at: number
  constructor(size: number, at: number) {
    this.out = new Uint8Array(size)
    this.view = new DataView(this.out.buffer)
    this.at = at
  }
  byte(b: number) {
    this.out[this.at++] = b
  }
  varint(v: number) {
    if (v < 0) {
      // two's complement in 64 bits, seven bits a byte
      let lo = v >>> 0
      let hi = Math.floor(v / TWO_32) >>> 0
      for (let i = 0; i < 9; i++) {
        this.out[this.at++] = (lo & 127) | 128
        lo = ((lo >>> 7) | (hi << 25)) >>> 0
        hi = hi >>> 7
      }
      this.out[this.at++] = lo & 1
      return
    }
    while (v >= 128) {
      this.out[this.at++] = (v % 128) | 128
      v = Math.floor(v / 128)
    }
    this.out[this.at++] = v
  }
  head(tag: number, len: number) {
    this.byte(tag)
    this.varint(len)
  }
  bytes(b: Uint8Array) {
    this.out.set(b, this.at)
    this.at += b.length
  }
  private copy(words: Int32Array | Float32Array, count: number) {
    this.out.set(new Uint8Array(words.buffer, 0, count * 4), this.at)
    this.at += count * 4
  }
  float32(values: ReadonlyArray<number>) {
    const n = values.length
    if (!LITTLE_ENDIAN) {
      for (let i = 0; i < n; i++) this.view.setFloat32(this.at + i * 4, values[i]!, true)
      this.at += n * 4
      return
    }
    scratch(n)
    const f = f32
    for (let i = 0; i < n; i++) f[i] = values[i]!
    this.copy(f, n)
  }
  int32(values: ReadonlyArray<number>, what: string): string | undefined {
    const n = values.length
    scratch(n)
    const w = i32
    for (let i = 0; i < n; i++) {
      const v = values[i]!
      // an integer within int32 is its own `| 0` (NaN, fractions and the out of range are not)
      if ((v | 0) !== v) return `${what}[${i}] is ${v}; it must be an int32`
      w[i] = v
    }
    if (LITTLE_ENDIAN) this.copy(w, n)
    else {
      for (let i = 0; i < n; i++) this.view.setInt32(this.at + i * 4, w[i]!, true)
      this.at += n * 4
    }
    return undefined
  }
  int64(values: ReadonlyArray<number>, what: string): string | undefined {
    const n = values.length
    scratch(n)
    const w = i32
    for (let i = 0; i < n; i++) {
      const v = values[i]!
      if (!Number.isSafeInteger(v)) return `${what}[${i}] is ${v}; it must be an integer within ±2^53`
      // two's complement in two words, low first: the low word is v mod 2^32
      w[2 * i] = v | 0
      w[2 * i + 1] = Math.floor(v / TWO_32)
    }
    if (LITTLE_ENDIAN) this.copy(w, 2 * n)
    else {
      for (let i = 0; i < 2 * n; i++) this.view.setInt32(this.at + i * 4, w[i]!, true)
      this.at += n * 8
    }
    return undefined
  }
}

const writeValues = (w: Writer, values: ReadonlyArray<number>, dtype: Wire.TensorData["dtype"], what: string) =>
  dtype === "float32" ? (w.float32(values), undefined) : w.int64(values, what)

const writeTensor = (w: Writer, p: TensorPlan, at: string): string | undefined => {
  const t = p.tensor
  const size = ELEMENT_SIZE[t.dtype]
  let bad: string | undefined
  if (t.sparse_crow_indices === undefined || t.sparse_col_indices === undefined) {
    w.head(0x0a, t.data.length * size)
    bad = writeValues(w, t.data, t.dtype, `${at}.data`)
  } else {
    const parts = [t.data.length * size, t.sparse_crow_indices.length * 8, t.sparse_col_indices.length * 8]
    w.head(0x12, parts.reduce((a, b) => a + (b === 0 ? 0 : delimited(b)), 0))
    if (parts[0]! > 0) {
      w.head(0x0a, parts[0]!)
      bad = writeValues(w, t.data, t.dtype, `${at}.data`)
    }
    if (bad === undefined && parts[1]! > 0) {
      w.head(0x12, parts[1]!)
      bad = w.int64(t.sparse_crow_indices, `${at}.sparse_crow_indices`)
    }
    if (bad === undefined && parts[2]! > 0) {
      w.head(0x1a, parts[2]!)
      bad = w.int64(t.sparse_col_indices, `${at}.sparse_col_indices`)
    }
  }
  w.byte(0x18)
  w.byte(DTYPE[t.dtype])
  if (p.shape.length > 0) {
    w.head(0x22, p.shapeBytes)
    for (const d of p.shape) w.varint(d)
  }
  return bad
}

const writeDatum = (w: Writer, p: DatumPlan, at: string): string | undefined => {
  w.head(0x1a, p.size)
  for (const [j, tokens] of p.chunks.entries()) {
    const bytes = tokens.length * 4
    const text = bytes === 0 ? 0 : delimited(bytes)
    w.head(0x0a, delimited(text))
    w.head(0x0a, text)
    if (bytes === 0) continue
    w.head(0x0a, bytes)
    const bad = w.int32(tokens, `${at}.model_input.chunks[${j}].tokens`)
    if (bad !== undefined) return bad
  }
  for (const t of p.tensors) {
    w.head(0x12, t.entry)
    w.head(0x0a, t.key.length)
    w.bytes(t.key)
    w.head(0x12, t.size)
    const bad = writeTensor(w, t, `${at}.loss_fn_inputs.${t.name}`)
    if (bad !== undefined) return bad
  }
  return undefined
}

// ---------------------------------------------------------------------------
// the request

/**
 * The request's bytes for any `seq_id`, or why protobuf cannot carry it (`Unsupported`
 * for `top_k_logprobs`, `Malformed` for a value that does not fit its type).
 * @since 0.1.0 @category encoding
 */
export const numbered = (req: Body): Result.Result<Numbered, ProtoError> => {
  const input = req.forward_backward_input
  if (input.top_k_logprobs !== undefined) return Result.fail(unsupported("top_k_logprobs has no field in the protobuf ForwardBackwardRequest; send this request as JSON"))
  const plans: Array<DatumPlan> = []
  let size = 0
  for (const [i, d] of input.data.entries()) {
    const plan = datumPlan(d, `forward_backward_input.data[${i}]`)
    if (Result.isFailure(plan)) return Result.fail(plan.failure)
    plans.push(plan.success)
    size += delimited(plan.success.size)
  }
  const lossFn = utf8.encode(input.loss_fn)
  const config = mapOrder(input.loss_fn_config ?? {}).map(([k, v]) => [utf8.encode(k), v] as const)
  const configSize = config.reduce((a, [k]) => a + delimited(delimited(k.length) + 9), 0)
  const tail = (lossFn.length > 0 ? delimited(lossFn.length) : 0) + configSize + (req.forward_only ? 2 : 0)
  const modelId = utf8.encode(req.model_id)
  const headMax = (modelId.length > 0 ? delimited(modelId.length) : 0) + 11
  const w = new Writer(headMax + size + tail, headMax)
  for (const [i, plan] of plans.entries()) {
    const bad = writeDatum(w, plan, `forward_backward_input.data[${i}]`)
    if (bad !== undefined) return Result.fail(malformed(bad))
  }
  if (lossFn.length > 0) {
    w.head(0x22, lossFn.length)
    w.bytes(lossFn)
  }
  for (const [k, v] of config) {
    w.head(0x2a, delimited(k.length) + 9)
    w.head(0x0a, k.length)
    w.bytes(k)
    w.byte(0x11)
    w.view.setFloat64(w.at, v, true)
    w.at += 8
  }
  if (req.forward_only) {
    w.byte(0x30)
    w.byte(1)
  }
  let lent = false
  return Result.succeed((seq: number) => {
    // the head goes just before the datums; a second seq_id gets a copy, the first one's bytes stay as they were
    const head = new Writer(headMax, 0)
    if (modelId.length > 0) {
      head.head(0x0a, modelId.length)
      head.bytes(modelId)
    }
    if (seq !== 0) {
      head.byte(0x10)
      head.varint(seq)
    }
    const start = headMax - head.at
    const target = lent ? w.out.slice() : w.out
    lent = true
    target.set(head.out.subarray(0, head.at), start)
    return target.subarray(start)
  })
}

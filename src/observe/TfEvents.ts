/**
 * TensorBoard's event files, written by hand: TFRecord framing (length, masked CRC-32C of
 * the length, data, masked CRC-32C of the data) around `Event` protobufs, as TensorFlow's
 * `event.proto` and `summary.proto` lay them out:
 *
 * - `Event { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5 }`
 * - `Summary { repeated Value value = 1 }`, `Value { string tag = 1; float simple_value = 2;
 *   HistogramProto histo = 5; TensorProto tensor = 8; SummaryMetadata metadata = 9 }`
 * - `HistogramProto { double min = 1, max = 2, num = 3, sum = 4, sum_squares = 5;
 *   repeated double bucket_limit = 6 [packed]; repeated double bucket = 7 [packed] }`
 * - text: a `TensorProto { dtype = 1 (DT_STRING = 7); tensor_shape = 2; string_val = 8 }`
 *   with `metadata.plugin_data.plugin_name = "text"`.
 *
 * @since 0.1.0
 */

// ===== CRC-32C (Castagnoli), as TFRecord frames use it =====

const CRC_TABLE = (() => {
  const table = new Uint32Array(256)
  for (let i = 0; i < 256; i++) {
    let c = i
    for (let k = 0; k < 8; k++) c = c & 1 ? 0x82f63b78 ^ (c >>> 1) : c >>> 1
    table[i] = c >>> 0
  }
  return table
})()

/** CRC-32C of `bytes`. @since 0.1.0 @category encoding */
export const crc32c = (bytes: Uint8Array): number => {
  let c = 0xffffffff
  for (const b of bytes) c = CRC_TABLE[(c ^ b) & 0xff]! ^ (c >>> 8)
  return (c ^ 0xffffffff) >>> 0
}

/** TFRecord's masked CRC: rotated right by 15 bits, plus a constant. @since 0.1.0 @category encoding */
export const maskedCrc = (bytes: Uint8Array): number => {
  const c = crc32c(bytes)
  return ((((c >>> 15) | (c << 17)) >>> 0) + 0xa282ead8) >>> 0
}

/** One TFRecord frame around `data`. @since 0.1.0 @category encoding */
export const record = (data: Uint8Array): Uint8Array => {
  const out = new Uint8Array(8 + 4 + data.length + 4)
  const view = new DataView(out.buffer)
  view.setBigUint64(0, BigInt(data.length), true)
  view.setUint32(8, maskedCrc(out.subarray(0, 8)), true)
  out.set(data, 12)
  view.setUint32(12 + data.length, maskedCrc(data), true)
  return out
}

// ===== protobuf, the few wire types events use =====

const varint = (n: number | bigint): Array<number> => {
  let v = BigInt.asUintN(64, BigInt(n))
  const out: Array<number> = []
  while (v >= 0x80n) {
    out.push(Number(v & 0x7fn) | 0x80)
    v >>= 7n
  }
  out.push(Number(v))
  return out
}
const key = (field: number, wire: number) => varint((field << 3) | wire)
const bytesField = (field: number, payload: Uint8Array): Array<number> => [...key(field, 2), ...varint(payload.length), ...payload]
const stringField = (field: number, text: string) => bytesField(field, new TextEncoder().encode(text))
const doubleBytes = (x: number) => {
  const b = new Uint8Array(8)
  new DataView(b.buffer).setFloat64(0, x, true)
  return [...b]
}
const doubleField = (field: number, x: number) => [...key(field, 1), ...doubleBytes(x)]
const floatField = (field: number, x: number) => {
  const b = new Uint8Array(4)
  new DataView(b.buffer).setFloat32(0, x, true)
  return [...key(field, 5), ...b]
}
const packedDoubles = (field: number, xs: ReadonlyArray<number>) => bytesField(field, new Uint8Array(xs.flatMap(doubleBytes)))

/** What one event holds: scalars, histograms and texts at a step. @since 0.1.0 @category models */
export interface Values {
  readonly scalars?: Readonly<Record<string, number>>
  readonly histograms?: Readonly<Record<string, ReadonlyArray<number>>>
  readonly texts?: Readonly<Record<string, string>>
}

/** A histogram of `xs` in up to 30 equal buckets, as `HistogramProto`. */
const histogram = (xs: ReadonlyArray<number>): Uint8Array => {
  const min = Math.min(...xs)
  const max = Math.max(...xs)
  const buckets = min === max ? 1 : Math.min(30, xs.length)
  const width = (max - min) / buckets || 1
  const limits = Array.from({ length: buckets }, (_, i) => (i === buckets - 1 ? max : min + width * (i + 1)))
  const counts = new Array<number>(buckets).fill(0)
  for (const x of xs) counts[Math.min(buckets - 1, Math.floor((x - min) / width))]!++
  return new Uint8Array([
    ...doubleField(1, min),
    ...doubleField(2, max),
    ...doubleField(3, xs.length),
    ...doubleField(4, xs.reduce((a, b) => a + b, 0)),
    ...doubleField(5, xs.reduce((a, b) => a + b * b, 0)),
    ...packedDoubles(6, limits),
    ...packedDoubles(7, counts),
  ])
}

/** A text as the text plugin reads it: a scalar string tensor. */
const textValue = (tag: string, text: string): Uint8Array => {
  const pluginData = new Uint8Array(stringField(1, "text"))
  const metadata = new Uint8Array(bytesField(1, pluginData))
  const tensor = new Uint8Array([...key(1, 0), ...varint(7), ...bytesField(2, new Uint8Array()), ...bytesField(8, new TextEncoder().encode(text))])
  return new Uint8Array([...stringField(1, tag), ...bytesField(8, tensor), ...bytesField(9, metadata)])
}

/**
 * One event's bytes: `file_version` for the first event of a file, else a summary of the
 * values at `step`.
 * @since 0.1.0 @category encoding
 */
export const event = (wallTime: number, step: number, values: Values | "file_version"): Uint8Array => {
  const head = [...doubleField(1, wallTime), ...key(2, 0), ...varint(step)]
  if (values === "file_version") return new Uint8Array([...head, ...stringField(3, "brain.Event:2")])
  const entries: Array<Uint8Array> = [
    ...Object.entries(values.scalars ?? {}).filter(([, v]) => Number.isFinite(v)).map(([tag, v]) => new Uint8Array([...stringField(1, tag), ...floatField(2, v)])),
    ...Object.entries(values.histograms ?? {}).filter(([, xs]) => xs.length > 0).map(([tag, xs]) => new Uint8Array([...stringField(1, tag), ...bytesField(5, histogram(xs))])),
    ...Object.entries(values.texts ?? {}).map(([tag, text]) => textValue(tag, text)),
  ]
  const summary = new Uint8Array(entries.flatMap((v) => bytesField(1, v)))
  return new Uint8Array([...head, ...bytesField(5, summary)])
}

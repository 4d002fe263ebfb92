/**
 * A small Parquet writer for tests, written from the Parquet format specification
 * (thrift compact metadata, v1 data pages, PLAIN values, RLE definition levels): string,
 * 64-bit integer and double columns, optional (null) values, several row groups, and the
 * UNCOMPRESSED, SNAPPY (literal-only blocks, which every snappy reader accepts) and GZIP
 * codecs. gyre reads Parquet with hyparquet; this only makes files for it to read.
 */
import * as Zlib from "node:zlib"

export type Column = { readonly name: string; readonly type: "string" | "int64" | "double"; readonly optional?: boolean }
export type Codec = "UNCOMPRESSED" | "SNAPPY" | "GZIP"

// ===== thrift compact protocol =====
class Thrift {
  bytes: Array<number> = []
  private last: Array<number> = [0]
  varint(n: bigint | number) {
    let v = BigInt(n)
    while (v >= 0x80n) {
      this.bytes.push(Number(v & 0x7fn) | 0x80)
      v >>= 7n
    }
    this.bytes.push(Number(v))
  }
  zigzag(n: bigint | number) {
    const v = BigInt(n)
    this.varint(v >= 0n ? v << 1n : ((-v) << 1n) - 1n)
  }
  field(id: number, type: number) {
    const delta = id - this.last[this.last.length - 1]!
    if (delta > 0 && delta <= 15) this.bytes.push((delta << 4) | type)
    else {
      this.bytes.push(type)
      this.zigzag(id)
    }
    this.last[this.last.length - 1] = id
  }
  i32(id: number, v: number) {
    this.field(id, 5)
    this.zigzag(v)
  }
  i64(id: number, v: number | bigint) {
    this.field(id, 6)
    this.zigzag(v)
  }
  binary(id: number, s: string) {
    this.field(id, 8)
    const b = Buffer.from(s)
    this.varint(b.length)
    this.bytes.push(...b)
  }
  struct(id: number | undefined, body: () => void) {
    if (id !== undefined) this.field(id, 12)
    this.last.push(0)
    body()
    this.bytes.push(0)
    this.last.pop()
  }
  list(id: number, type: number, n: number, each: (i: number) => void) {
    this.field(id, 9)
    if (n < 15) this.bytes.push((n << 4) | type)
    else {
      this.bytes.push(0xf0 | type)
      this.varint(n)
    }
    for (let i = 0; i < n; i++) each(i)
  }
}

// ===== pages =====
const TYPES = { string: 6, int64: 2, double: 5 } as const
const CODECS = { UNCOMPRESSED: 0, SNAPPY: 1, GZIP: 2 } as const

const snappy = (data: Buffer): Buffer => {
  const out: Array<Buffer> = []
  const length: Array<number> = []
  let n = data.length
  do {
    length.push((n & 0x7f) | (n > 0x7f ? 0x80 : 0))
    n >>>= 7
  } while (n > 0)
  out.push(Buffer.from(length))
  for (let at = 0; at < data.length; at += 65536) {
    const chunk = data.subarray(at, at + 65536)
    const len = chunk.length - 1
    out.push(len < 60 ? Buffer.from([len << 2]) : Buffer.from([62 << 2, len & 0xff, (len >> 8) & 0xff, (len >> 16) & 0xff]), chunk)
  }
  return Buffer.concat(out)
}

const compress = (codec: Codec, data: Buffer) => codec === "GZIP" ? Zlib.gzipSync(data) : codec === "SNAPPY" ? snappy(data) : data

/** RLE runs of definition levels (bit width 1), with their 4-byte length prefix. */
const levels = (defined: ReadonlyArray<boolean>): Buffer => {
  const runs: Array<number> = []
  for (let i = 0; i < defined.length;) {
    let j = i
    while (j < defined.length && defined[j] === defined[i]) j++
    let header = (j - i) << 1
    while (header >= 0x80) {
      runs.push((header & 0x7f) | 0x80)
      header >>>= 7
    }
    runs.push(header, defined[i] ? 1 : 0)
    i = j
  }
  const prefix = Buffer.alloc(4)
  prefix.writeUInt32LE(runs.length)
  return Buffer.concat([prefix, Buffer.from(runs)])
}

const plain = (column: Column, values: ReadonlyArray<unknown>): Buffer =>
  Buffer.concat(values.map((v) => {
    if (column.type === "string") {
      const b = Buffer.from(String(v))
      const len = Buffer.alloc(4)
      len.writeUInt32LE(b.length)
      return Buffer.concat([len, b])
    }
    const b = Buffer.alloc(8)
    if (column.type === "int64") b.writeBigInt64LE(BigInt(v as number))
    else b.writeDoubleLE(v as number)
    return b
  }))

/** Writes rows (objects keyed by column name) as a Parquet file, `rowGroupSize` rows a group. */
export const writeParquet = (columns: ReadonlyArray<Column>, rows: ReadonlyArray<Record<string, unknown>>, options: { readonly rowGroupSize?: number; readonly codec?: Codec } = {}): Buffer => {
  const codec = options.codec ?? "UNCOMPRESSED"
  const size = options.rowGroupSize ?? Math.max(1, rows.length)
  const parts: Array<Buffer> = [Buffer.from("PAR1")]
  let offset = 4
  const groups: Array<{ rows: number; chunks: Array<{ column: Column; offset: number; values: number; raw: number; packed: number }> }> = []
  for (let start = 0; start < rows.length; start += size) {
    const slice = rows.slice(start, start + size)
    const chunks = columns.map((column) => {
      const values = slice.map((r) => r[column.name])
      const defined = values.map((v) => v !== null && v !== undefined)
      const body = Buffer.concat([...(column.optional ? [levels(defined)] : []), plain(column, values.filter((_, i) => defined[i]))])
      const packed = compress(codec, body)
      const header = new Thrift()
      header.struct(undefined, () => {
        header.i32(1, 0)
        header.i32(2, body.length)
        header.i32(3, packed.length)
        header.struct(5, () => {
          header.i32(1, slice.length)
          header.i32(2, 0)
          header.i32(3, 3)
          header.i32(4, 3)
        })
      })
      const page = Buffer.concat([Buffer.from(header.bytes), packed])
      const chunk = { column, offset, values: slice.length, raw: header.bytes.length + body.length, packed: page.length }
      parts.push(page)
      offset += page.length
      return chunk
    })
    groups.push({ rows: slice.length, chunks })
  }
  const meta = new Thrift()
  meta.struct(undefined, () => {
    meta.i32(1, 1)
    meta.list(2, 12, columns.length + 1, (i) =>
      meta.struct(undefined, () => {
        if (i === 0) {
          meta.binary(4, "schema")
          meta.i32(5, columns.length)
          return
        }
        const c = columns[i - 1]!
        meta.i32(1, TYPES[c.type])
        meta.i32(3, c.optional ? 1 : 0)
        meta.binary(4, c.name)
        if (c.type === "string") meta.i32(6, 0)
      }))
    meta.i64(3, rows.length)
    meta.list(4, 12, groups.length, (g) =>
      meta.struct(undefined, () => {
        const group = groups[g]!
        meta.list(1, 12, group.chunks.length, (k) =>
          meta.struct(undefined, () => {
            const chunk = group.chunks[k]!
            meta.i64(2, chunk.offset)
            meta.struct(3, () => {
              meta.i32(1, TYPES[chunk.column.type])
              meta.list(2, 5, 2, (e) => meta.zigzag(e === 0 ? 0 : 3))
              meta.list(3, 8, 1, () => {
                const b = Buffer.from(chunk.column.name)
                meta.varint(b.length)
                meta.bytes.push(...b)
              })
              meta.i32(4, CODECS[codec])
              meta.i64(5, chunk.values)
              meta.i64(6, chunk.raw)
              meta.i64(7, chunk.packed)
              meta.i64(9, chunk.offset)
            })
          }))
        meta.i64(2, group.chunks.reduce((s, c) => s + c.raw, 0))
        meta.i64(3, group.rows)
      }))
    meta.binary(6, "gyre test writer")
  })
  const footer = Buffer.from(meta.bytes)
  const length = Buffer.alloc(4)
  length.writeUInt32LE(footer.length)
  parts.push(footer, length, Buffer.from("PAR1"))
  return Buffer.concat(parts)
}

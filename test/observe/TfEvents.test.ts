/**
 * TensorBoard event files, byte by byte: CRC-32C against its published check value,
 * TFRecord frames (lengths and masked CRCs read back independently), and the events'
 * protobuf fields where a reader finds them. TensorBoard's own reader reads a run's files
 * in `test/observe/TensorBoard.test.ts` (test:e2e).
 */
import { assert, describe, it } from "@effect/vitest"
import { crc32c, event, maskedCrc, record } from "../../src/observe/TfEvents.ts"

const bytes = (text: string) => new TextEncoder().encode(text)

/** The frames of a TFRecord file: each data payload, its length and both CRCs checked. */
const frames = (file: Uint8Array): Array<Uint8Array> => {
  const view = new DataView(file.buffer, file.byteOffset, file.byteLength)
  const out: Array<Uint8Array> = []
  for (let at = 0; at < file.length;) {
    const length = Number(view.getBigUint64(at, true))
    assert.strictEqual(view.getUint32(at + 8, true), maskedCrc(file.subarray(at, at + 8)), "length CRC")
    const data = file.subarray(at + 12, at + 12 + length)
    assert.strictEqual(view.getUint32(at + 12 + length, true), maskedCrc(data), "data CRC")
    out.push(data)
    at += 16 + length
  }
  return out
}

describe("TensorBoard events", () => {
  it("CRC-32C gives the Castagnoli check value; the mask is TFRecord's", () => {
    assert.strictEqual(crc32c(bytes("123456789")), 0xe3069283)
    const c = crc32c(bytes("abc"))
    assert.strictEqual(maskedCrc(bytes("abc")), ((((c >>> 15) | (c << 17)) >>> 0) + 0xa282ead8) >>> 0)
  })

  it("frames events one after another, each readable back with its length and CRCs", () => {
    const first = event(1.5, 0, "file_version")
    const second = event(2.5, 7, { scalars: { "a/b": 0.25, skipped: Number.NaN }, histograms: { h: [1, 2, 2, 3] }, texts: { t: "hi" } })
    const file = new Uint8Array([...record(first), ...record(second)])
    const [a, b] = frames(file)
    assert.deepStrictEqual([...a!], [...first])
    assert.deepStrictEqual([...b!], [...second])
    // wall_time (field 1, fixed64) leads every event, then step (field 2, varint)
    assert.deepStrictEqual([b![0], b![9], b![10]], [0x09, 0x10, 7])
    const text = new TextDecoder().decode(b!)
    assert.include(new TextDecoder().decode(a!), "brain.Event:2")
    for (const tag of ["a/b", "h", "t", "text"]) assert.include(text, tag)
    assert.notInclude(text, "skipped", "a non-finite scalar is left out")
  })
})

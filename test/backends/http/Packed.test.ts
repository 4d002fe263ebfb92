/**
 * int64 packing without a BigInt per value gives the bytes `DataView.setBigInt64` gives,
 * for every integer within ±2^53, and reads them back; a value beyond ±2^53 on the wire
 * is refused, naming it.
 */
import { assert, describe, it } from "@effect/vitest"
import { Result } from "effect"
import * as fc from "fast-check"
import { pack, unpack } from "../../../src/backends/http/wire/proto/Packed.ts"

const viaBigInt = (values: ReadonlyArray<number>) => {
  const out = new Uint8Array(values.length * 8)
  const view = new DataView(out.buffer)
  values.forEach((v, i) => view.setBigInt64(i * 8, BigInt(v), true))
  return out
}

const edges = [0, 1, -1, 2 ** 31, -(2 ** 31), 2 ** 32, -(2 ** 32), 2 ** 32 - 1, 2 ** 32 + 1, Number.MAX_SAFE_INTEGER, Number.MIN_SAFE_INTEGER, 151_669, -100]

describe("int64 packing", () => {
  it("equals setBigInt64 and reads back, for any safe integer", () => {
    fc.assert(
      fc.property(fc.array(fc.oneof(fc.maxSafeInteger(), fc.integer(), fc.constantFrom(...edges))), (values) => {
        const packed = Result.getOrThrow(pack(values, "int64", "v"))
        assert.deepStrictEqual(packed, viaBigInt(values))
        assert.deepStrictEqual(Result.getOrThrow(unpack(packed, "int64", "v")), values)
      }),
    )
  })

  it("refuses a value beyond ±2^53 both ways", () => {
    assert.isTrue(Result.isFailure(pack([2 ** 53], "int64", "v")))
    const bytes = new Uint8Array(8)
    new DataView(bytes.buffer).setBigInt64(0, 2n ** 53n, true)
    const read = unpack(bytes, "int64", "target_tokens")
    assert.isTrue(Result.isFailure(read))
    if (Result.isFailure(read)) assert.include(read.failure, "target_tokens[0] is 9007199254740992")
    new DataView(bytes.buffer).setBigInt64(0, -(2n ** 62n), true)
    assert.isTrue(Result.isFailure(unpack(bytes, "int64", "v")))
  })
})

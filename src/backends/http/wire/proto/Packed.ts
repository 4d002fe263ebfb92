/**
 * Number arrays as the little-endian bytes the protobuf wire carries them in
 * (`np.asarray(xs, dtype).tobytes()` on the Python side): int32 tokens, float32 and
 * int64 tensors, int64 offsets and indices, bfloat16 results.
 *
 * @since 0.1.0
 */
import { Result } from "effect"

/** Element types of the wire's byte arrays. @since 0.1.0 @category models */
export type Element = "int32" | "int64" | "float32" | "bfloat16"

/** Bytes per element. @since 0.1.0 @category constants */
export const SIZE: Readonly<Record<Element, number>> = { int32: 4, int64: 8, float32: 4, bfloat16: 2 }

const INT32_MIN = -2147483648
const INT32_MAX = 2147483647

const viewOf = (bytes: Uint8Array) => new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength)

const TWO_32 = 2 ** 32
/** The largest high word of a value within ±2^53. */
const HIGH_LIMIT = 2 ** 21

/**
 * Packs numbers as little-endian `element`s; fails naming the first value that does
 * not fit (a fraction or out of range for an integer type, anything for bfloat16,
 * which is only read).
 * @since 0.1.0 @category constructors
 */
export const pack = (values: ReadonlyArray<number>, element: Element, what: string): Result.Result<Uint8Array, string> => {
  const out = new Uint8Array(values.length * SIZE[element])
  const view = viewOf(out)
  for (let i = 0; i < values.length; i++) {
    const v = values[i]!
    switch (element) {
      case "float32":
        view.setFloat32(i * 4, v, true)
        break
      case "int32":
        if (!Number.isInteger(v) || v < INT32_MIN || v > INT32_MAX) return Result.fail(`${what}[${i}] is ${v}; it must be an int32`)
        view.setInt32(i * 4, v, true)
        break
      case "int64":
        if (!Number.isSafeInteger(v)) return Result.fail(`${what}[${i}] is ${v}; it must be an integer within ±2^53`)
        // two's complement in two words, no BigInt per value: the low word is v mod 2^32
        view.setUint32(i * 8, v >>> 0, true)
        view.setInt32(i * 8 + 4, Math.floor(v / TWO_32), true)
        break
      case "bfloat16":
        return Result.fail(`${what}: bfloat16 is read, never written`)
    }
  }
  return Result.succeed(out)
}

/**
 * Reads little-endian `element`s as numbers (int64 must stay within ±2^53, bfloat16
 * widens to float32 exactly); fails when the byte count is not a multiple of the
 * element size.
 * @since 0.1.0 @category combinators
 */
export const unpack = (bytes: Uint8Array, element: Element, what: string): Result.Result<Array<number>, string> => {
  const size = SIZE[element]
  if (bytes.byteLength % size !== 0) return Result.fail(`${what} has ${bytes.byteLength} bytes, not a whole number of ${element} values (${size} bytes each)`)
  const n = bytes.byteLength / size
  const view = viewOf(bytes)
  const out = new Array<number>(n)
  switch (element) {
    case "float32":
      for (let i = 0; i < n; i++) out[i] = view.getFloat32(i * 4, true)
      break
    case "int32":
      for (let i = 0; i < n; i++) out[i] = view.getInt32(i * 4, true)
      break
    case "int64":
      for (let i = 0; i < n; i++) {
        const high = view.getInt32(i * 8 + 4, true)
        // within ±2^21 for the high word the sum is exact; the bound is checked on it
        const v = high * TWO_32 + view.getUint32(i * 8, true)
        if (high > HIGH_LIMIT || high < -HIGH_LIMIT || !Number.isSafeInteger(v)) return Result.fail(`${what}[${i}] is ${view.getBigInt64(i * 8, true)}, beyond ±2^53`)
        out[i] = v
      }
      break
    case "bfloat16": {
      const widened = new DataView(new ArrayBuffer(4))
      for (let i = 0; i < n; i++) {
        widened.setUint32(0, view.getUint16(i * 2, true) << 16, false)
        out[i] = widened.getFloat32(0, false)
      }
      break
    }
  }
  return Result.succeed(out)
}

const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1

/**
 * Reads ranges of `element`s out of one byte array (`bytes.byteLength` a multiple of the
 * element size): float32 through one typed-array view of the whole (copied once if it is
 * not aligned), others as `unpack` reads them. A range's values are a fresh array.
 * @since 0.1.0 @category combinators
 */
export const reader = (bytes: Uint8Array, element: Element): ((from: number, to: number, what: string) => Result.Result<Array<number>, string>) => {
  if (element !== "float32" || !LITTLE_ENDIAN) {
    const size = SIZE[element]
    return (from, to, what) => unpack(bytes.subarray(from * size, to * size), element, what)
  }
  const aligned = bytes.byteOffset % 4 === 0 ? bytes : bytes.slice()
  const view = new Float32Array(aligned.buffer, aligned.byteOffset, aligned.byteLength / 4)
  return (from, to) => {
    const out = new Array<number>(to - from)
    for (let i = from; i < to; i++) out[i - from] = view[i]!
    return Result.succeed(out)
  }
}

/** A protobuf int64 (a bigint) as a number, if it stays within ±2^53. @since 0.1.0 @category combinators */
export const safeNumber = (v: bigint, what: string): Result.Result<number, string> =>
  v > BigInt(Number.MAX_SAFE_INTEGER) || v < BigInt(Number.MIN_SAFE_INTEGER) ? Result.fail(`${what} is ${v}, beyond ±2^53`) : Result.succeed(Number(v))

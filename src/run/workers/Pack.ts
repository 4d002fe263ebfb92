/**
 * Number arrays across threads: a group's tokens and log-probs are tens of thousands of
 * numbers, which `postMessage`'s structured clone copies one boxed number at a time. `pack`
 * puts each array of numbers in a `Float64Array` (every JS number exactly, -0 and NaN
 * included) whose buffer is transferred, not copied; `unpack` gives back the same arrays.
 * An array that several places share (a prompt's tokens, every first turn's input) stays
 * one array.
 *
 * @since 0.1.0
 */

/** The marker of a packed array: an object with this one key. */
const KEY = "\u0000gyre/f64"

/** Arrays shorter than this are cloned as they are: packing them costs more than it saves. */
const MIN_LENGTH = 16

const isNumbers = (xs: ReadonlyArray<unknown>): boolean => {
  if (xs.length < MIN_LENGTH) return false
  for (let i = 0; i < xs.length; i++) if (typeof xs[i] !== "number") return false
  return true
}

/** Plain loops: `Float64Array.from` and `Array.from` go through the iterator protocol, several times slower. */
const toFloat64 = (xs: ReadonlyArray<number>): Float64Array => {
  const data = new Float64Array(xs.length)
  for (let i = 0; i < xs.length; i++) data[i] = xs[i]!
  return data
}

const fromFloat64 = (data: Float64Array): Array<number> => {
  const xs: Array<number> = []
  for (let i = 0; i < data.length; i++) xs.push(data[i]!)
  return xs
}

const isPlain = (x: object): boolean => {
  const proto = Object.getPrototypeOf(x)
  return proto === Object.prototype || proto === null
}

/**
 * `value` with every array of numbers (of 16 or more) as a packed `Float64Array`, and the
 * buffers to transfer with it. Only plain objects and arrays are walked.
 * @since 0.1.0 @category utils
 */
export const pack = <A>(value: A): { readonly packed: unknown; readonly transfer: Array<ArrayBuffer> } => {
  const transfer: Array<ArrayBuffer> = []
  const seen = new Map<ReadonlyArray<number>, unknown>()
  const walk = (x: unknown): unknown => {
    if (typeof x !== "object" || x === null) return x
    if (Array.isArray(x)) {
      if (isNumbers(x)) {
        const known = seen.get(x as Array<number>)
        if (known !== undefined) return known
        const data = toFloat64(x as Array<number>)
        transfer.push(data.buffer as ArrayBuffer)
        const packed = { [KEY]: data }
        seen.set(x as Array<number>, packed)
        return packed
      }
      return x.map(walk)
    }
    // fromEntries defines keys ("__proto__" too) rather than assigning them
    return isPlain(x) ? Object.fromEntries(Object.entries(x).map(([k, v]) => [k, walk(v)])) : x
  }
  return { packed: walk(value), transfer }
}

/**
 * What `pack` packed, with its arrays of numbers back as arrays (one array for each one
 * packed, however many places hold it).
 * @since 0.1.0 @category utils
 */
export const unpack = <A>(packed: unknown): A => {
  const seen = new Map<Float64Array, Array<number>>()
  const walk = (x: unknown): unknown => {
    if (typeof x !== "object" || x === null) return x
    if (Array.isArray(x)) return x.map(walk)
    if (!isPlain(x)) return x
    const data = (x as Record<string, unknown>)[KEY]
    if (data instanceof Float64Array && Object.keys(x).length === 1) {
      const known = seen.get(data)
      if (known !== undefined) return known
      const xs = fromFloat64(data)
      seen.set(data, xs)
      return xs
    }
    return Object.fromEntries(Object.entries(x).map(([k, v]) => [k, walk(v)]))
  }
  return walk(packed) as A
}

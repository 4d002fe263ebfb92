/**
 * Number arrays across threads: a group's tokens and log-probs are tens of thousands of
 * numbers, which `postMessage`'s structured clone copies one boxed number at a time. `pack`
 * puts every array of numbers in one `Float64Array` (every JS number exactly, -0 and NaN
 * included) whose buffer is transferred, not copied; `unpack` gives back the same arrays.
 * An array that several places share (a prompt's tokens, every first turn's input) stays
 * one array.
 *
 * @since 0.1.0
 */

/** The marker of a packed array: an object with this one key, whose value is the array's index. */
const KEY = "\u0000gyre/f64"

/** Arrays shorter than this are cloned as they are: packing them costs more than it saves. */
const MIN_LENGTH = 16

const isNumbers = (xs: ReadonlyArray<unknown>): boolean => {
  if (xs.length < MIN_LENGTH) return false
  for (let i = 0; i < xs.length; i++) if (typeof xs[i] !== "number") return false
  return true
}

const isPlain = (x: object): boolean => {
  const proto = Object.getPrototypeOf(x)
  return proto === Object.prototype || proto === null
}

/** A plain object with each value mapped; a "__proto__" key is defined as an own key, never assigned (which would set the prototype). */
const mapValues = (x: object, f: (v: unknown) => unknown): Record<string, unknown> => {
  const out: Record<string, unknown> = {}
  for (const k of Object.keys(x)) {
    const v = f((x as Record<string, unknown>)[k])
    if (k === "__proto__") Object.defineProperty(out, k, { value: v, enumerable: true, writable: true, configurable: true })
    else out[k] = v
  }
  return out
}

/** What `pack` makes: the value with its arrays of numbers as markers, and their numbers end to end. */
interface Packed {
  readonly value: unknown
  readonly data: Float64Array
  /** where each packed array starts in `data`, and (last) where the data ends */
  readonly starts: ReadonlyArray<number>
}

/**
 * `value` with every array of numbers (of 16 or more) in one `Float64Array`, and its
 * buffer to transfer. Only plain objects and arrays are walked.
 * @since 0.1.0 @category utils
 */
export const pack = <A>(value: A): { readonly packed: unknown; readonly transfer: Array<ArrayBuffer> } => {
  const arrays: Array<ReadonlyArray<number>> = []
  const seen = new Map<ReadonlyArray<number>, unknown>()
  const walk = (x: unknown): unknown => {
    if (typeof x !== "object" || x === null) return x
    if (Array.isArray(x)) {
      if (!isNumbers(x)) return x.map(walk)
      const xs = x as ReadonlyArray<number>
      const known = seen.get(xs)
      if (known !== undefined) return known
      const marker = { [KEY]: arrays.length }
      arrays.push(xs)
      seen.set(xs, marker)
      return marker
    }
    return isPlain(x) ? mapValues(x, walk) : x
  }
  const walked = walk(value)
  const starts = [0]
  for (const xs of arrays) starts.push(starts[starts.length - 1]! + xs.length)
  const data = new Float64Array(starts[starts.length - 1]!)
  arrays.forEach((xs, a) => {
    const start = starts[a]!
    for (let i = 0; i < xs.length; i++) data[start + i] = xs[i]!
  })
  return { packed: { value: walked, data, starts } satisfies Packed, transfer: [data.buffer as ArrayBuffer] }
}

/**
 * What `pack` packed, with its arrays of numbers back as arrays (one array for each one
 * packed, however many places hold it).
 * @since 0.1.0 @category utils
 */
export const unpack = <A>(packed: unknown): A => {
  const { value, data, starts } = packed as Packed
  const made = new Map<number, Array<number>>()
  const array = (a: number) => {
    const known = made.get(a)
    if (known !== undefined) return known
    const start = starts[a]!
    // preallocated and filled: several times faster than push or Array.from
    const xs = new Array<number>(starts[a + 1]! - start)
    for (let i = 0; i < xs.length; i++) xs[i] = data[start + i]!
    made.set(a, xs)
    return xs
  }
  const walk = (x: unknown): unknown => {
    if (typeof x !== "object" || x === null) return x
    if (Array.isArray(x)) return x.map(walk)
    if (!isPlain(x)) return x
    const a = (x as Record<string, unknown>)[KEY]
    if (typeof a === "number" && Object.keys(x).length === 1) return array(a)
    return mapValues(x, walk)
  }
  return walk(value) as A
}

/**
 * The split hash of a problem (32-bit FNV-1a of `name:` and the problem's JSON, as
 * `hash32` computes it) without building the JSON text: strings, numbers, plain objects
 * and arrays are hashed as `JSON.stringify` would write them; anything else (a `toJSON`,
 * a class instance, an odd escape) is hashed from `JSON.stringify` itself. Separate from
 * `Split.ts` because this is how the same hash is computed fast, not which split it gives:
 * the row index hashes every row of a file with it before the first draw.
 *
 * @since 0.1.0
 */
import { hash32 } from "../util/Random.ts"

const PRIME = 0x01000193
const QUOTE = 0x22
/** nesting past this is hashed from `JSON.stringify` (which also reports cycles) */
const MAX_DEPTH = 64

/** `text`'s UTF-16 code units folded into `h` (FNV-1a, as `hash32`). */
const fold = (h: number, text: string): number => {
  const n = text.length
  for (let i = 0; i < n; i++) h = Math.imul(h ^ text.charCodeAt(i), PRIME)
  return h
}

/** 1 for the code units JSON escapes: control characters, quote, backslash, surrogates */
const ESCAPED = new Uint8Array(0x10000)
ESCAPED.fill(1, 0, 0x20).fill(1, 0xd800, 0xe000)
ESCAPED[QUOTE] = ESCAPED[0x5c] = 1

/** A string as JSON: a plain one is hashed in place, one with anything to escape from its JSON text. */
const foldString = (h: number, s: string): number => {
  let g = Math.imul(h ^ QUOTE, PRIME)
  let escaped = 0
  const n = s.length
  // a table lookup without a branch: the loop stays as tight as `fold`'s
  for (let i = 0; i < n; i++) {
    const c = s.charCodeAt(i)
    escaped |= ESCAPED[c]!
    g = Math.imul(g ^ c, PRIME)
  }
  return escaped === 0 ? Math.imul(g ^ QUOTE, PRIME) : fold(h, JSON.stringify(s))
}

/** what `JSON.stringify` leaves out of an object and writes as null in an array */
const omitted = (value: unknown) => value === undefined || typeof value === "function" || typeof value === "symbol"

/** `value`'s JSON folded into `h`, or undefined where `JSON.stringify` does more than this replicates. */
const foldValue = (h: number, value: unknown, depth: number): number | undefined => {
  switch (typeof value) {
    case "string":
      return foldString(h, value)
    case "number":
      return fold(h, Number.isFinite(value) ? String(value) : "null")
    case "boolean":
      return fold(h, value ? "true" : "false")
    case "object":
      break
    default:
      return undefined
  }
  if (value === null) return fold(h, "null")
  if (depth > MAX_DEPTH || "toJSON" in value) return undefined
  const proto = Object.getPrototypeOf(value)
  if (Array.isArray(value) && proto === Array.prototype) {
    h = Math.imul(h ^ 0x5b, PRIME) // [
    for (let i = 0; i < value.length; i++) {
      if (i > 0) h = Math.imul(h ^ 0x2c, PRIME) // ,
      const next: number | undefined = omitted(value[i]) ? fold(h, "null") : foldValue(h, value[i], depth + 1)
      if (next === undefined) return undefined
      h = next
    }
    return Math.imul(h ^ 0x5d, PRIME) // ]
  }
  if (proto !== Object.prototype && proto !== null) return undefined
  h = Math.imul(h ^ 0x7b, PRIME) // {
  let first = true
  for (const key of Object.keys(value)) {
    const field = (value as Record<string, unknown>)[key]
    if (omitted(field)) continue
    if (!first) h = Math.imul(h ^ 0x2c, PRIME) // ,
    first = false
    const next = foldValue(Math.imul(foldString(h, key) ^ 0x3a, PRIME), field, depth + 1) // :
    if (next === undefined) return undefined
    h = next
  }
  return Math.imul(h ^ 0x7d, PRIME) // }
}

/**
 * `hash32(prefix + JSON.stringify(value))`, the same number, computed without the JSON
 * text where the value is plain data.
 * @since 0.1.0 @category utils
 */
export const jsonHash = (prefix: string, value: unknown): number => {
  const start = fold(0x811c9dc5, prefix)
  const h = foldValue(start, value, 0)
  return h === undefined ? hash32(`${prefix}${JSON.stringify(value)}`) : h >>> 0
}

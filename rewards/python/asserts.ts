/**
 * Tests from MBPP-style assertions (`assert add(2, 3) == 5`): the function's name, its
 * arguments and the expected value, read as Python literals into JSON values. The
 * assertion is never run: results are compared on the host, so an object whose `__eq__`
 * is always true cannot pass it.
 *
 * @since 0.1.0
 */
import type { Schema } from "effect"

/** One function test read from an assertion. @since 0.1.0 @category models */
export interface AssertedTest {
  readonly entry: string
  readonly args: ReadonlyArray<Schema.Json>
  readonly expected: Schema.Json
}

class Unreadable extends Error {}

/** A reader of Python literals: numbers, strings, True/False/None, lists, tuples (as lists), dicts, sets (sorted lists). */
const reader = (text: string) => {
  let i = 0
  const space = () => {
    while (i < text.length && /\s/.test(text[i]!)) i++
  }
  const expect = (c: string) => {
    space()
    if (text[i] !== c) throw new Unreadable(`expected ${c} at ${i}`)
    i++
  }
  const string = (): string => {
    const m = /^([rRbBuU]{0,2})('''|"""|'|")/.exec(text.slice(i))
    if (m === null) throw new Unreadable(`no string at ${i}`)
    if (/[bB]/.test(m[1]!)) throw new Unreadable("bytes")
    const raw = /[rR]/.test(m[1]!)
    const quote = m[2]!
    i += m[0].length
    let out = ""
    while (i < text.length && !text.startsWith(quote, i)) {
      const c = text[i++]!
      if (c !== "\\" || raw) {
        out += c
        continue
      }
      const e = text[i++]!
      const simple: Record<string, string> = { n: "\n", t: "\t", r: "\r", "\\": "\\", "'": "'", '"': '"', "0": "\0", a: "\x07", b: "\b", f: "\f", v: "\v", "\n": "" }
      if (e in simple) out += simple[e]
      else if (e === "x" || e === "u") {
        const n = e === "x" ? 2 : 4
        out += String.fromCharCode(parseInt(text.slice(i, i + n), 16))
        i += n
      } else out += "\\" + e
    }
    if (!text.startsWith(quote, i)) throw new Unreadable("unclosed string")
    i += quote.length
    return out
  }
  const items = (close: string): Array<Schema.Json> => {
    const out: Array<Schema.Json> = []
    space()
    while (text[i] !== close) {
      out.push(value())
      space()
      if (text[i] === ",") i++
      else if (text[i] !== close) throw new Unreadable(`expected , or ${close} at ${i}`)
      space()
    }
    i++
    return out
  }
  const value = (): Schema.Json => {
    space()
    const c = text[i]
    if (c === "[") return (i++, items("]"))
    if (c === "(") {
      i++
      return items(")")
    }
    if (c === "{") {
      i++
      space()
      if (text[i] === "}") return (i++, {})
      const first = value()
      space()
      if (text[i] !== ":") {
        // a set: sorted, as the sandbox writes a returned set
        const rest = text[i] === "," ? (i++, items("}")) : (expect("}"), [])
        return [first, ...rest].sort((a, b) => (typeof a === "number" && typeof b === "number" ? a - b : String(a) < String(b) ? -1 : 1))
      }
      const out: Record<string, Schema.Json> = {}
      let key: Schema.Json = first
      for (;;) {
        expect(":")
        // defined, not assigned: a key "__proto__" is a key like any other
        Object.defineProperty(out, typeof key === "string" ? key : JSON.stringify(key), { value: value(), enumerable: true, writable: true, configurable: true })
        space()
        if (text[i] === ",") i++
        space()
        if (text[i] === "}") return (i++, out)
        key = value()
      }
    }
    if (c === "'" || c === '"' || /^[rRuU]['"]/.test(text.slice(i, i + 2))) return string()
    const word = /^(True|False|None)\b/.exec(text.slice(i))
    if (word !== null) return (i += word[0].length, word[1] === "True" ? true : word[1] === "False" ? false : null)
    const num = /^-?\s*(\d[\d_]*\.?\d*(e[-+]?\d+)?|\.\d+(e[-+]?\d+)?)/i.exec(text.slice(i))
    if (num !== null) {
      i += num[0].length
      const n = Number(num[0].replace(/[\s_]/g, ""))
      if (!Number.isFinite(n) || (Number.isInteger(n) && !Number.isSafeInteger(n))) throw new Unreadable("number out of range")
      return n
    }
    throw new Unreadable(`not a literal at ${i}`)
  }
  return {
    all: (): Schema.Json => {
      const v = value()
      space()
      if (i !== text.length) throw new Unreadable(`text after the literal at ${i}`)
      return v
    },
    args: (): Array<Schema.Json> => {
      const out = items(")")
      space()
      if (i !== text.length) throw new Unreadable("text after the call")
      return out
    },
  }
}

/**
 * A Python literal as a JSON value (tuples as lists, sets as sorted lists), or undefined
 * when the text is not a literal this reader knows.
 * @since 0.1.0 @category constructors
 */
export const pythonLiteral = (text: string): Schema.Json | undefined => {
  try {
    return reader(text.trim()).all()
  } catch (e) {
    if (e instanceof Unreadable) return undefined
    throw e
  }
}

/** `assert name(args) == expected`, the call's parentheses balanced by the reader. */
const ASSERT = /^\s*assert\s+([A-Za-z_]\w*)\s*\(([\s\S]*)\)\s*==\s*([\s\S]+?)\s*$/

/**
 * The test of an assertion `assert name(args) == expected` whose arguments and expected
 * value are literals; undefined for any other assertion (a `set(...)` around the call,
 * `math.isclose`, a keyword argument), which a caller drops.
 * @since 0.1.0 @category constructors
 */
export const testOfAssert = (line: string): AssertedTest | undefined => {
  const m = ASSERT.exec(line)
  if (m === null) return undefined
  // the last "==" at depth zero splits call and expected: try each split from the right
  const whole = `${m[2]})==${m[3]}`
  for (let at = whole.lastIndexOf("=="); at > 0; at = whole.lastIndexOf("==", at - 1)) {
    const call = whole.slice(0, at).trim()
    if (!call.endsWith(")")) continue
    try {
      const args = reader(`${call.slice(0, -1)})`).args()
      const expected = pythonLiteral(whole.slice(at + 2))
      if (expected !== undefined) return { entry: m[1]!, args, expected }
    } catch (e) {
      if (!(e instanceof Unreadable)) throw e
    }
  }
  return undefined
}

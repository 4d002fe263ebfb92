/**
 * Reading a normalized LaTeX answer into an `Answer`: the structure (lists, sets, tuples,
 * intervals, unions, relations, `\pm`, matrices) is read here from the top-level brackets
 * and separators; every expression inside is parsed by the computer-algebra engine.
 *
 * @since 0.1.0
 */
import type { Answer, RelationOp } from "./Answer.ts"
import { onlySymbols } from "./Answer.ts"
import type { Cas, Leaf } from "./Cas.ts"
import { readMatrix } from "./Matrix.ts"
import { splitTop, wrapped } from "./Split.ts"

const COMMA_NUMBER = /^\s*-?\d{1,3}(,\d{3})+(\.\d+)?\s*$/
const RELATIONS: Record<string, RelationOp | "approx" | "in"> = {
  "=": "=", "<": "<", ">": ">", "<=": "<=", ">=": ">=", "!=": "!=", "\\le": "<=", "\\leq": "<=", "\\leqslant": "<=",
  "\\ge": ">=", "\\geq": ">=", "\\geqslant": ">=", "\\lt": "<", "\\gt": ">", "\\neq": "!=", "\\ne": "!=", "≤": "<=",
  "≥": ">=", "≠": "!=", "\\approx": "approx", "\\in": "in",
}
// spacing commands (`\quad` even when a letter follows it, as in `\quadx_{2}`)
const SPACING = /\\(?:qquad|quad|thinspace|medspace|thickspace|negthinspace)|\\[,;:!]/g
const SET_OPS = ["\\cup", "\\cap", "\\setminus"]

const leafOf = (cas: Cas, latex: string): Leaf | undefined => {
  const t = latex.trim()
  return t === "" ? undefined : cas.parse(t)
}

const expr = (cas: Cas, latex: string): Answer | undefined => {
  const leaf = leafOf(cas, latex)
  return leaf === undefined ? undefined : { kind: "expr", leaf }
}

/** A word answer: `\text{Evelyn}`, `odd`, `(C)`; undefined when the text is not one word. */
const word = (latex: string): Answer | undefined => {
  const t = latex.trim()
  const text = /^\\(?:text|mbox)\{([^{}]*)\}$/.exec(t)?.[1] ?? (/^[a-zA-Z]{2,}$/.test(t) ? t : undefined)
  if (text === undefined || /^[\s\d.,-]+$/.test(text)) return undefined
  const w = text.replace(/[^\p{L}\p{N}\s]/gu, "").replace(/\s+/g, " ").trim()
  return w === "" ? undefined : { kind: "word", word: w }
}

/** An interval from `(a, b]`-style brackets, or a tuple when the ends are out of order. */
const interval = (cas: Cas, open: string, close: string, parts: ReadonlyArray<string>): Answer | undefined => {
  const lo = leafOf(cas, parts[0]!)
  const hi = leafOf(cas, parts[1]!)
  if (lo === undefined || hi === undefined) return undefined
  const loOpen = open === "("
  const hiOpen = close === ")"
  const a = lo.at({})?.re
  const b = hi.at({})?.re
  const infinite = (l: Leaf) => /infty/.test(l.latex)
  const lv = a ?? (infinite(lo) && lo.latex.includes("-") ? -Infinity : undefined)
  const hv = b ?? (infinite(hi) ? (hi.latex.includes("-") ? -Infinity : Infinity) : undefined)
  if (lv !== undefined && hv !== undefined && ((loOpen && hiOpen && hv <= lv) || (!loOpen && !hiOpen && hv < lv))) {
    return { kind: "tuple", items: [{ kind: "expr", leaf: lo }, { kind: "expr", leaf: hi }] }
  }
  return { kind: "interval", lo, hi, loOpen, hiOpen }
}

/** A bracketed group: a set, a tuple, an interval, or grouping parentheses. */
const bracketed = (cas: Cas, latex: string): Answer | undefined | null => {
  const found = wrapped(latex)
  if (found === undefined) return null
  // `\(...\)` is a pair of parentheses
  const w = { ...found, open: found.open === "\\(" ? "(" : found.open, close: found.close === "\\)" ? ")" : found.close }
  const isSet = w.open === "\\{" || w.open === "\\lbrace" || w.open === "{"
  if (w.inner.trim() === "" && isSet) return { kind: "set", items: [] }
  const groups = splitTop(w.inner, [";"]).parts.map((g) => splitTop(g, [","]).parts)
  const flat = groups.flat()
  if (isSet) {
    if (flat.length === 1 && w.open === "{") return readLatex(cas, w.inner)
    const items = elementsOf(cas, flat)
    return items === undefined ? undefined : { kind: "set", items }
  }
  if (w.open === "\\langle") {
    const items = elementsOf(cas, flat)
    return items === undefined ? undefined : { kind: "tuple", items }
  }
  if (flat.length === 1) return readLatex(cas, w.inner)
  if (flat.length === 2 && (w.open === "(" || w.open === "[") && (w.close === ")" || w.close === "]")) {
    return interval(cas, w.open, w.close, flat)
  }
  const items = elementsOf(cas, flat)
  return items === undefined ? undefined : { kind: "tuple", items }
}

/** A set expression: unions of sets and intervals, or one of them. */
const setOrExpr = (cas: Cas, latex: string): Answer | undefined => {
  const { parts, seps } = splitTop(latex, SET_OPS)
  if (parts.length > 1) {
    if (seps.some((s) => s !== "\\cup")) return undefined
    const read = parts.map((p) => setOrExpr(cas, p))
    return read.every((p) => p !== undefined) ? { kind: "union", parts: read as Array<Answer> } : undefined
  }
  const group = bracketed(cas, latex)
  if (group !== null) return group
  if (latex.includes("\\begin{")) return readMatrix(cas, latex)
  const w = word(latex)
  if (w !== undefined) return w
  const text = /^\s*\\text\{([^{}]*)\}\s*$/.exec(latex)?.[1]
  const ratio = splitTop(latex, [":"]).parts
  if (ratio.length === 2) return expr(cas, `\\frac{${ratio[0]}}{${ratio[1]}}`)
  return expr(cas, text ?? latex.replace(/\^\s*\{?\s*\\circ\s*\}?/g, ""))
}

/** A relation chain (`x = 5 + 6 = 11`, `1 < x \le 2`); `\approx` keeps its exact side. */
const relation = (cas: Cas, parts: ReadonlyArray<string>, seps: ReadonlyArray<string>): Answer | undefined => {
  let terms: Array<Answer> = []
  let ops: Array<RelationOp> = []
  const first = setOrExpr(cas, parts[0]!)
  if (first === undefined) return undefined
  terms.push(first)
  for (let i = 0; i < seps.length; i++) {
    const op = RELATIONS[seps[i]!]!
    const rhs = setOrExpr(cas, parts[i + 1]!)
    if (rhs === undefined) return undefined
    if (op === "approx") {
      // x \approx 3 is 3; anything else \approx 3 keeps what came before
      if (terms.length === 1 && onlySymbols(terms[0]!)) terms = [rhs]
      continue
    }
    if (op === "in" && terms.length === 1 && onlySymbols(terms[0]!)) {
      ops = ["="]
      terms.push(rhs)
      continue
    }
    if (op === "in") return undefined
    ops.push(op)
    terms.push(rhs)
  }
  return terms.length === 1 ? terms[0] : { kind: "relation", terms, ops }
}

/** One element of a list: a relation, a set, an expression, or two for `a \pm b`. */
const element = (cas: Cas, latex: string): Array<Answer> | undefined => {
  const pm = splitTop(latex, ["\\pm"]).parts
  if (pm.length === 2) {
    const [a, b] = pm as [string, string]
    const both = a.trim() === "" ? [`-(${b})`, `${b}`] : [`${a}+(${b})`, `${a}-(${b})`]
    const read = both.map((t) => expr(cas, t))
    return read.every((r) => r !== undefined) ? (read as Array<Answer>) : undefined
  }
  if (/\\[pm][mp](?![a-zA-Z])/.test(latex)) {
    // a \pm inside an expression (`x = \frac{-1 \pm \sqrt{13}}{4}`): both signs
    const signs = (s: string, m: string) => latex.replace(/\\pm(?![a-zA-Z])/g, s).replace(/\\mp(?![a-zA-Z])/g, m)
    const read = [signs("+", "-"), signs("-", "+")].map((t) => element(cas, t))
    return read.every((r) => r !== undefined) ? (read as Array<Array<Answer>>).flat() : undefined
  }
  const { parts, seps } = splitTop(latex, Object.keys(RELATIONS))
  const one = parts.length > 1 ? relation(cas, parts, seps) : setOrExpr(cas, latex)
  return one === undefined ? undefined : [one]
}

const elementsOf = (cas: Cas, parts: ReadonlyArray<string>): Array<Answer> | undefined => {
  const out: Array<Answer> = []
  for (const p of parts) {
    const e = element(cas, p)
    if (e === undefined) return undefined
    out.push(...e)
  }
  return out
}

/** `x = 1, 2, 3`: one variable given a list of values. */
const assignedList = (cas: Cas, groups: ReadonlyArray<ReadonlyArray<string>>): Answer | undefined => {
  const head = splitTop(groups[0]![0]!, ["=", "\\in"])
  if (head.parts.length !== 2) return undefined
  const lhs = setOrExpr(cas, head.parts[0]!)
  if (lhs === undefined || !onlySymbols(lhs)) return undefined
  const rest = groups.map((g, i) => (i === 0 ? [head.parts[1]!, ...g.slice(1)] : g))
  if (rest.flat().some((p) => splitTop(p, Object.keys(RELATIONS)).parts.length > 1)) return undefined
  const value = listOf(cas, rest)
  return value === undefined ? undefined : { kind: "relation", terms: [lhs, value], ops: ["="] }
}

/** Several elements: one, a set of them, or a set of tuples when groups have several. */
const listOf = (cas: Cas, groups: ReadonlyArray<ReadonlyArray<string>>): Answer | undefined => {
  const read = groups.map((g) => elementsOf(cas, g))
  if (read.some((r) => r === undefined)) return undefined
  const els = read as Array<Array<Answer>>
  if (els.length === 1) return els[0]!.length === 1 ? els[0]![0] : { kind: "set", items: els[0]! }
  if (els.every((e) => e.length === 1)) return { kind: "set", items: els.map((e) => e[0]!) }
  return { kind: "set", items: els.map((e) => ({ kind: "tuple", items: e })) }
}

/**
 * Reads a normalized LaTeX answer; undefined when some part of it cannot be read.
 * @since 0.1.0 @category utils
 */
export const readLatex = (cas: Cas, latex: string): Answer | undefined => {
  const s = latex.replace(SPACING, " ").trim()
  if (s === "") return undefined
  // 1,200 is a number, 0,111 a decimal; other lists with commas are lists
  if (COMMA_NUMBER.test(s)) return expr(cas, s.trim().startsWith("0") ? s.replace(",", ".") : s.replace(/,/g, ""))
  const groups = splitTop(s, [";"]).parts.map((g) => splitTop(g, [","]).parts)
  if (groups.flat().length > 1) {
    const assigned = assignedList(cas, groups)
    if (assigned !== undefined) return assigned
  }
  return listOf(cas, groups)
}

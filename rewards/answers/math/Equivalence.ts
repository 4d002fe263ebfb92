/**
 * When two read answers are the same, decided as Math-Verify decides it: numbers exactly,
 * decimals after rounding, expressions by their values at sample points (the same function
 * of the same variables), assignments by their value (`x = 3` is `3`), relations up to a
 * constant factor and flipping sides, sets without order, tuples with order, intervals
 * with their open and closed ends, matrices entry by entry, words by their letters.
 *
 * @since 0.1.0
 */
import type { Answer } from "./Answer.ts"
import { isAssignment, isEquation, lastTerm } from "./Answer.ts"
import type { Leaf, Value } from "./Cas.ts"
import { numberSet, relationSet, sameNumbers } from "./Sets.ts"

/** How strictly answers are compared. @since 0.1.0 @category models */
export interface EquivalenceOptions {
  /** decimals are compared after rounding to this many places (default 6) */
  readonly precision: number
  /** variables must have the same names (default true); false matches them by position */
  readonly strict: boolean
  /** a relation in the prediction may equal a set in the gold (`x \ge 1` vs `[1, \infty)`) */
  readonly allowSetRelation: boolean
}

type Relation = Extract<Answer, { kind: "relation" }>

// sample points: irrational-looking values of both signs (|x| and x differ), the same every run
const POINTS = [0.5772156649, -1.3247179572, 0.8346268417, -2.2360679775, 1.6180339887, -0.3678794412, 1.9021130326, 2.7182818285]

const close = (a: Value, b: Value, tol: number): boolean => {
  const scale = Math.max(1, Math.hypot(a.re, a.im), Math.hypot(b.re, b.im))
  return Math.hypot(a.re - b.re, a.im - b.im) <= tol * scale
}

const round = (x: number, places: number): number => Math.round(x * 10 ** places) / 10 ** places

/** A decimal equals a number when both round alike and are within 1% (two tiny numbers that round to 0 differ). */
const decimalsEqual = (a: Value, b: Value, places: number): boolean =>
  Math.abs(a.im - b.im) < 1e-12 && close({ re: round(a.re, places), im: 0 }, { re: round(b.re, places), im: 0 }, 1e-12) &&
  Math.abs(a.re - b.re) <= 1e-2 * Math.max(Math.abs(a.re), Math.abs(b.re))

/** The variables of the prediction renamed to the gold's, by position (non-strict mode). */
const renaming = (g: Leaf, p: Leaf, strict: boolean): Record<string, string> =>
  !strict && g.symbols.length === p.symbols.length ? Object.fromEntries(p.symbols.map((s, i) => [s, g.symbols[i]!])) : {}

/** Values of two leaves at the sample points (pairs where both are defined). */
const samples = (g: Leaf, p: Leaf, strict: boolean): Array<[Value, Value]> => {
  const rename = renaming(g, p, strict)
  const vars = [...new Set([...g.symbols, ...p.symbols.map((s) => rename[s] ?? s)])]
  const out: Array<[Value, Value]> = []
  for (let k = 0; k < POINTS.length; k++) {
    const point = Object.fromEntries(vars.map((v, i) => [v, POINTS[(k + 2 * i) % POINTS.length]! + 0.1 * i]))
    const pPoint = Object.fromEntries(p.symbols.map((s) => [s, point[rename[s] ?? s]!]))
    const a = g.at(point)
    const b = p.at(pPoint)
    // a point where a side is undefined (x^{2/3} at x < 0) says nothing; complex values must agree too
    if (a !== undefined && b !== undefined) out.push([a, b])
    if (vars.length === 0) break
  }
  return out
}

/**
 * Two expressions are equal: the same text; or numbers (a decimal on either side rounds);
 * or the same values, real or complex, at every sample point where both are defined (at
 * least 3 points when they have variables: `\ln(xy)` is not `\ln x + \ln y` at x, y < 0).
 * @since 0.1.0 @category utils
 */
export const leavesEqual = (g: Leaf, p: Leaf, o: EquivalenceOptions): boolean => {
  const undefinedConstant = (l: Leaf) => l.symbols.length === 0 && l.at({}) === undefined
  if (undefinedConstant(g) || undefinedConstant(p)) {
    const infinity = (l: Leaf) => l.json === '"PositiveInfinity"' || l.json === '"NegativeInfinity"'
    if (infinity(g) && infinity(p)) return g.json === p.json
    // 12:00 and 1:00 both divide by zero: only the same text is the same
    return g.latex.replace(/\s/g, "") === p.latex.replace(/\s/g, "")
  }
  if (g.json === p.json && (o.strict || g.symbols.length === 0)) return true
  const pairs = samples(g, p, o.strict)
  const vars = g.symbols.length + p.symbols.length
  if (pairs.length === 0 || (vars > 0 && pairs.length < 3)) return false
  if ((g.number === "float" || p.number === "float") && vars === 0) return decimalsEqual(pairs[0]![0], pairs[0]![1], o.precision)
  return pairs.every(([a, b]) => close(a, b, vars === 0 ? 1e-12 : 1e-9))
}

/** `lhs - rhs` of a relation as one leaf, built from the two sides' LaTeX. */
type Differ = (lhs: Leaf, rhs: Leaf) => Leaf | undefined

/** Relations are equal: the same operator (or the flipped one) between sides whose differences are proportional. */
const relationsEqual = (g: Relation, p: Relation, o: EquivalenceOptions, differ: Differ): boolean => {
  if (g.ops.length !== p.ops.length) return false
  return g.ops.every((op, i) => {
    const [gl, gr, pl, pr] = [g.terms[i], g.terms[i + 1], p.terms[i], p.terms[i + 1]].map((t) => (t?.kind === "expr" ? t.leaf : undefined))
    if (gl === undefined || gr === undefined || pl === undefined || pr === undefined) {
      return equal(g.terms[i]!, p.terms[i]!, o, differ) && equal(g.terms[i + 1]!, p.terms[i + 1]!, o, differ) && op === p.ops[i]
    }
    const gd = differ(gl, gr)
    const pd = differ(pl, pr)
    if (gd === undefined || pd === undefined) return false
    const pairs = samples(gd, pd, o.strict)
    if (pairs.length < Math.min(3, POINTS.length) && gd.symbols.length + pd.symbols.length > 0) return false
    const ratios = pairs.filter(([a]) => Math.hypot(a.re, a.im) > 1e-12).map(([a, b]) => (Math.abs(a.im) + Math.abs(b.im) > 1e-12 ? NaN : b.re / a.re))
    if (pairs.some(([a, b]) => Math.hypot(a.re, a.im) <= 1e-12 && Math.hypot(b.re, b.im) > 1e-12)) return false
    if (ratios.length === 0 || ratios.some((r) => !Number.isFinite(r) || r === 0 || Math.abs(r - ratios[0]!) > 1e-9 * Math.abs(ratios[0]!))) return false
    const flip: Record<string, string> = { "<": ">", ">": "<", "<=": ">=", ">=": "<=", "=": "=", "!=": "!=" }
    const pop = p.ops[i]!
    return ratios[0]! > 0 ? pop === op : pop === flip[op]
  })
}

const isSetLike = (a: Answer) => a.kind === "set" || a.kind === "tuple" || a.kind === "interval" || a.kind === "union"

/** Items matched without order (each gold item to a different prediction item). */
const unordered = (gs: ReadonlyArray<Answer>, ps: ReadonlyArray<Answer>, o: EquivalenceOptions, differ: Differ): boolean => {
  if (gs.length !== ps.length) return false
  const used = new Set<number>()
  return gs.every((g) => {
    const j = ps.findIndex((p, k) => !used.has(k) && equal(g, p, o, differ))
    if (j < 0) return false
    used.add(j)
    return true
  })
}

const ordered = (gs: ReadonlyArray<Answer>, ps: ReadonlyArray<Answer>, o: EquivalenceOptions, differ: Differ): boolean =>
  gs.length === ps.length && gs.every((g, i) => equal(g, ps[i]!, o, differ))

/** Duplicates removed, as a set keeps them once. */
const distinct = (items: ReadonlyArray<Answer>): Array<Answer> => {
  const seen = new Set<string>()
  return items.filter((a) => {
    const k = JSON.stringify(a, (key, v) => (key === "at" ? undefined : v))
    return seen.has(k) ? false : (seen.add(k), true)
  })
}

const itemsOf = (a: Answer): ReadonlyArray<Answer> | undefined =>
  a.kind === "set" ? distinct(a.items) : a.kind === "tuple" ? a.items : a.kind === "interval" && a.loOpen && a.hiOpen ? [{ kind: "expr", leaf: a.lo }, { kind: "expr", leaf: a.hi }] : undefined

/** Sets, tuples, intervals and unions (a lone answer on one side is a set of one). */
const setsEqual = (g0: Answer, p0: Answer, o: EquivalenceOptions, differ: Differ): boolean => {
  const g: Answer = isSetLike(g0) ? g0 : { kind: "set", items: [g0] }
  const p: Answer = isSetLike(p0) ? p0 : { kind: "set", items: [p0] }
  if (g.kind === "interval" && p.kind === "interval") {
    return g.loOpen === p.loOpen && g.hiOpen === p.hiOpen && leavesEqual(g.lo, p.lo, o) && leavesEqual(g.hi, p.hi, o)
  }
  const gi = itemsOf(g)
  const pi = itemsOf(p)
  if (gi !== undefined && pi !== undefined && (g.kind !== "interval" || pi.length === 2) && (p.kind !== "interval" || gi.length === 2)) {
    if (g.kind === "set" && p.kind !== "interval") return unordered(gi, pi, o, differ)
    if (g.kind === "set" || g.kind === "tuple" || p.kind === "interval") return ordered(gi, pi, o, differ) || (g.kind === "set" && unordered(gi, pi, o, differ))
    return ordered(gi, pi, o, differ)
  }
  const gn = numberSet(g)
  const pn = numberSet(p)
  return gn !== undefined && pn !== undefined && (g.kind !== "set" || p.kind !== "set") && sameNumbers(gn, pn)
}

/** Two words: the same letters (case aside when longer than one letter; `e` is Euler's `e`). */
const wordsEqual = (g: string, p: string): boolean =>
  g.length > 1 || p.length > 1 ? g.toLowerCase() === p.toLowerCase() : g === p || (g.toLowerCase() === "e" && p.toLowerCase() === "e")

const NAMED: Record<string, string> = { ExponentialE: "e", ImaginaryUnit: "i" }

/** A word, or the name of a lone variable (`x`, `E`, Euler's `e`). */
const wordOf = (a: Answer): string | undefined => {
  if (a.kind === "word") return a.word
  if (a.kind !== "expr") return undefined
  const json: unknown = JSON.parse(a.leaf.json)
  return typeof json === "string" ? (NAMED[json] ?? json.replace(/_upright$/, "")) : undefined
}

/**
 * Whether a prediction equals a gold answer. Not symmetric: an assignment in the gold
 * (`k = 1`) is compared by its value with a bare prediction, a relation in the gold with a
 * set in the prediction; see `EquivalenceOptions`.
 * @since 0.1.0 @category utils
 */
export const equal = (gold: Answer, pred: Answer, o: EquivalenceOptions, differ: Differ): boolean => {
  let g = gold
  let p = pred
  if (isAssignment(g)) g = { kind: "relation", terms: [g.terms[0]!, lastTerm(g)], ops: ["="] }
  if (isAssignment(p)) p = { kind: "relation", terms: [p.terms[0]!, lastTerm(p)], ops: ["="] }
  if (isEquation(p) && !isEquation(g)) p = lastTerm(p)
  else if (isAssignment(g) && !isEquation(p)) g = lastTerm(g)
  if (g.kind === "relation" && isSetLike(p)) {
    const gs = relationSet(g)
    const ps = numberSet(p)
    if (gs !== undefined && ps !== undefined) return sameNumbers(gs, ps)
  }
  if (o.allowSetRelation && p.kind === "relation" && isSetLike(g)) {
    const ps = relationSet(p)
    const gs = numberSet(g)
    if (gs !== undefined && ps !== undefined) return sameNumbers(gs, ps)
  }
  if (g.kind === "relation" && p.kind === "relation") return relationsEqual(g, p, o, differ)
  if (g.kind === "relation" || p.kind === "relation") return false
  if (isSetLike(g) || isSetLike(p)) return setsEqual(g, p, o, differ)
  if (g.kind === "word" || p.kind === "word") {
    const [gw, pw] = [wordOf(g), wordOf(p)]
    return gw !== undefined && pw !== undefined && wordsEqual(gw, pw)
  }
  if (g.kind === "matrix" && p.kind === "matrix") {
    return g.rows.length === p.rows.length && g.rows.every((row, i) => row.length === p.rows[i]!.length && row.every((x, j) => leavesEqual(x, p.rows[i]![j]!, o)))
  }
  if (g.kind === "expr" && p.kind === "expr") return leavesEqual(g.leaf, p.leaf, o)
  return g.kind === "text" && p.kind === "text" && g.text.trim() !== "" && g.text.trim() === p.text.trim()
}

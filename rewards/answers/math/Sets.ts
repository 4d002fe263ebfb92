/**
 * Sets of numbers compared by membership: intervals, unions, finite sets and one-variable
 * relations (`1 \le |z| \le 2`) are equal when the same numbers belong to both, checked at
 * every end point, just beside each, and on a grid across them.
 *
 * @since 0.1.0
 */
import type { Answer, RelationOp } from "./Answer.ts"
import type { Leaf } from "./Cas.ts"

/** A membership test and the points where it may change. @since 0.1.0 @category models */
export interface NumberSet {
  readonly has: (x: number) => boolean
  readonly ends: ReadonlyArray<number>
}

const constant = (l: Leaf): number | undefined => {
  if (l.symbols.length > 0) return undefined
  const v = l.at({})
  if (v !== undefined) return Math.abs(v.im) < 1e-12 ? v.re : undefined
  return /infty/.test(l.latex) ? (/-\s*\\infty/.test(l.latex) ? -Infinity : Infinity) : undefined
}

const same = (a: number, b: number) => a === b || Math.abs(a - b) <= 1e-12 * Math.max(1, Math.abs(a), Math.abs(b))

/**
 * The numbers an answer stands for, when it is a set of constants; undefined otherwise.
 * @since 0.1.0 @category utils
 */
export const numberSet = (a: Answer): NumberSet | undefined => {
  switch (a.kind) {
    case "interval": {
      const lo = constant(a.lo)
      const hi = constant(a.hi)
      if (lo === undefined || hi === undefined) return undefined
      return { ends: [lo, hi], has: (x) => (a.loOpen ? x > lo : x >= lo) && (a.hiOpen ? x < hi : x <= hi) }
    }
    case "set": {
      const values: Array<number> = []
      for (const item of a.items) {
        const v = item.kind === "expr" ? constant(item.leaf) : undefined
        if (v === undefined || !Number.isFinite(v)) return undefined
        values.push(v)
      }
      return { ends: values, has: (x) => values.some((v) => same(v, x)) }
    }
    case "union": {
      const parts = a.parts.map(numberSet)
      if (parts.some((p) => p === undefined)) return undefined
      const ok = parts as Array<NumberSet>
      return { ends: ok.flatMap((p) => p.ends), has: (x) => ok.some((p) => p.has(x)) }
    }
    default:
      return undefined
  }
}

const holds = (op: RelationOp, a: number, b: number): boolean =>
  op === "=" ? same(a, b) : op === "!=" ? !same(a, b) : op === "<" ? a < b && !same(a, b) : op === "<=" ? a <= b || same(a, b) : op === ">" ? a > b && !same(a, b) : a >= b || same(a, b)

/**
 * The numbers that satisfy a relation in one variable (`-2 \le x \le 7`, `|z| \ge 1`,
 * `0 < f(x) < 1`); undefined when it has several variables or no finite bounds.
 * @since 0.1.0 @category utils
 */
export const relationSet = (a: Extract<Answer, { kind: "relation" }>): NumberSet | undefined => {
  const leaves = a.terms.map((t) => (t.kind === "expr" ? t.leaf : undefined))
  if (leaves.some((l) => l === undefined)) return undefined
  const ls = leaves as Array<Leaf>
  const vars = new Set(ls.flatMap((l) => l.symbols))
  const moving = ls.filter((l) => l.symbols.length > 0)
  // one variable, or one term that stands for the variable (f(x) in 0 < f(x) < 1)
  const single = vars.size === 1 ? [...vars][0]! : undefined
  if (single === undefined && moving.length !== 1) return undefined
  const value = (l: Leaf, x: number): number | undefined => {
    if (l.symbols.length === 0) return constant(l)
    if (single === undefined) return x
    const v = l.at({ [single]: x })
    return v !== undefined && Math.abs(v.im) < 1e-9 ? v.re : undefined
  }
  const ends = ls.filter((l) => l.symbols.length === 0).map(constant).filter((v): v is number => v !== undefined && Number.isFinite(v))
  return {
    ends: ends.flatMap((e) => [e, -e]),
    has: (x) => {
      const vs = ls.map((l) => value(l, x))
      return vs.every((v) => v !== undefined) && a.ops.every((op, i) => holds(op, vs[i]!, vs[i + 1]!))
    },
  }
}

/**
 * Whether two sets of numbers hold the same numbers: at every end point of either, just
 * beside each, and at 400 points across them.
 * @since 0.1.0 @category utils
 */
export const sameNumbers = (a: NumberSet, b: NumberSet): boolean => {
  const ends = [...a.ends, ...b.ends].filter(Number.isFinite)
  const span = Math.max(10, ...ends.map((e) => 2 * Math.abs(e) + 1))
  const points = [...ends.flatMap((e) => [e, e - 1e-7 * Math.max(1, Math.abs(e)), e + 1e-7 * Math.max(1, Math.abs(e))])]
  for (let i = 0; i <= 400; i++) points.push(-span + (2 * span * i) / 400 + 1e-3 * Math.SQRT2)
  return points.every((x) => a.has(x) === b.has(x))
}

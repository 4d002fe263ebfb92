/**
 * The shapes a math answer takes once read: an expression, a word, a finite set, a tuple,
 * an interval, a union of sets, a relation (`x = 3`, `1 < x \le 2`), a matrix, or, when it
 * cannot be read, its normalized text.
 *
 * @since 0.1.0
 */
import type { Leaf } from "./Cas.ts"

/** A relation operator, as written between two terms. @since 0.1.0 @category models */
export type RelationOp = "=" | "<" | "<=" | ">" | ">=" | "!="

/**
 * A read answer.
 * @since 0.1.0 @category models
 */
export type Answer =
  | { readonly kind: "expr"; readonly leaf: Leaf }
  | { readonly kind: "word"; readonly word: string }
  | { readonly kind: "set"; readonly items: ReadonlyArray<Answer> }
  | { readonly kind: "tuple"; readonly items: ReadonlyArray<Answer> }
  | { readonly kind: "interval"; readonly lo: Leaf; readonly hi: Leaf; readonly loOpen: boolean; readonly hiOpen: boolean }
  | { readonly kind: "union"; readonly parts: ReadonlyArray<Answer> }
  | { readonly kind: "relation"; readonly terms: ReadonlyArray<Answer>; readonly ops: ReadonlyArray<RelationOp> }
  | { readonly kind: "matrix"; readonly rows: ReadonlyArray<ReadonlyArray<Leaf>> }
  | { readonly kind: "text"; readonly text: string }

/** Every operator in the chain is `=`. @since 0.1.0 @category utils */
export const isEquation = (a: Answer): a is Extract<Answer, { kind: "relation" }> => a.kind === "relation" && a.ops.every((op) => op === "=")

/** An expression made of variables only, no numbers (`x`, `AB`, `f(x)`, `(p, q)`). @since 0.1.0 @category utils */
export const onlySymbols = (a: Answer): boolean => {
  if (a.kind === "word") return /^[a-zA-Z]+$/.test(a.word)
  if (a.kind === "tuple" || a.kind === "set") return a.items.length > 0 && a.items.every(onlySymbols)
  if (a.kind === "interval") return onlySymbols({ kind: "expr", leaf: a.lo }) && onlySymbols({ kind: "expr", leaf: a.hi })
  if (a.kind !== "expr" || a.leaf.symbols.length === 0) return false
  const walk = (x: unknown): boolean =>
    typeof x === "string" ? true : Array.isArray(x) ? x.slice(1).every(walk) : false
  return walk(JSON.parse(a.leaf.json))
}

/** `x = ...` (an equation whose left side is only variables): an assignment, compared by its value. @since 0.1.0 @category utils */
export const isAssignment = (a: Answer): a is Extract<Answer, { kind: "relation" }> =>
  isEquation(a) && onlySymbols(a.terms[0]!)

/** The right side of the last relation in a chain. @since 0.1.0 @category utils */
export const lastTerm = (a: Extract<Answer, { kind: "relation" }>): Answer => a.terms.at(-1)!

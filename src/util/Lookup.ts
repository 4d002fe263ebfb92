/**
 * Reads whose miss would be a bug in gyre's own code, such as the element of an array
 * built parallel to another (one score per rollout, one advantage row per group): they
 * throw an Error naming what was missing rather than going on with `undefined`.
 *
 * @since 0.1.0
 */

/**
 * `xs[i]`, which must be there; `what` names the element in the error.
 *
 * @example
 * at(scores, i, "score of rollout") // throws "score of rollout 3 is missing (3 given)"
 * @since 0.1.0 @category combinators
 */
export const at = <A>(xs: ReadonlyArray<A>, i: number, what: string): A => {
  if (!(Number.isInteger(i) && i >= 0 && i < xs.length)) throw new Error(`${what} ${i} is missing (${xs.length} given)`)
  return xs[i] as A
}

/** `x`, which must be there (a map entry the same code filled); `what` names it in the error. @since 0.1.0 @category combinators */
export const present = <A>(x: A | undefined, what: string): A => {
  if (x === undefined) throw new Error(`${what} is missing`)
  return x
}

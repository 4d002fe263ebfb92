/**
 * Reads that must find a value: where the value's absence would be a bug in this
 * backend (arrays built in parallel, maps filled by the same code), they fail loudly
 * with an `Error` naming what was missing instead of letting `undefined` travel on.
 *
 * @since 0.1.0
 */

/** `xs[i]`, or an Error naming `what` when there is no such element. @since 0.1.0 @category combinators */
export const at = <A>(xs: ReadonlyArray<A>, i: number, what: string): A => {
  const x = xs[i]
  if (x === undefined) throw new Error(`${what} is missing (index ${i} of ${xs.length})`)
  return x
}

/** `x`, or an Error naming `what` when it is undefined. @since 0.1.0 @category combinators */
export const present = <A>(x: A | undefined, what: string): A => {
  if (x === undefined) throw new Error(`${what} is missing`)
  return x
}

/**
 * Reading an element that the run's own construction guarantees: a group's scores and
 * episodes are parallel to its rollouts, a datum's origin names a group of the batch, the
 * advantages have the batch's shape. A missing one is a bug in this code, so it fails at
 * once, naming what was missing, instead of flowing on as `undefined`.
 *
 * @since 0.1.0
 */

/**
 * `xs[i]`, or a thrown error naming `what` and the index when there is none (for arrays
 * whose elements are never `undefined`).
 * @since 0.1.0 @category utils
 */
export const at = <A>(xs: ReadonlyArray<A>, i: number, what: string): A => {
  const x = xs[i]
  if (x === undefined) throw new Error(`${what} ${i} is missing (${xs.length} present)`)
  return x
}

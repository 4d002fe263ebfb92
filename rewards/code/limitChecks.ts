/**
 * The checks both sandboxes make of their limits: a positive number, a work budget (a
 * positive integer) and a wall-clock backstop. Each error names the function the limits
 * were given to (`owner`), as its user wrote them.
 *
 * @since 0.1.0
 */
import { Duration } from "effect"

/** `n`, or a RangeError when it is not a positive finite number. @internal */
export const positiveLimit = (owner: string, name: string, n: number): number => {
  if (!(Number.isFinite(n) && n > 0)) throw new RangeError(`${owner}: limits.${name} must be a positive number, got ${n}`)
  return n
}

/** `work`, or a RangeError when it is not a positive integer (`unit` says what it counts). @internal */
export const workBudget = (owner: string, work: number, unit: string): number => {
  if (!Number.isSafeInteger(work) || work < 1) throw new RangeError(`${owner}: limits.work must be a positive integer (${unit}), got ${work}`)
  return work
}

/** The backstop in milliseconds, or a RangeError when it is not a positive duration. @internal */
export const backstopMillis = (owner: string, backstop: Duration.Input): number => {
  const millis = Duration.toMillis(Duration.fromInputUnsafe(backstop))
  if (!(millis > 0)) throw new RangeError(`${owner}: limits.backstop must be a positive duration, got ${String(backstop)}`)
  return millis
}

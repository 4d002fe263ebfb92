/**
 * The limits of one sandbox evaluation, their defaults and their checks.
 *
 * The program's work is limited by a count, not a clock: `work` is a budget of QuickJS
 * interrupt checks, so a program's verdict is the same on a quiet machine and a loaded
 * one. `backstop` is wall-clock time, and only ends a worker that stopped answering.
 *
 * @since 0.1.0
 */
import type { Duration } from "effect"
import { backstopMillis, positiveLimit, workBudget } from "./limitChecks.ts"
import type { WorkerRequest } from "./worker.ts"

/**
 * The limits of one evaluation.
 * @since 0.1.0 @category models
 */
export interface Limits {
  /**
   * the work budget of the whole evaluation (every test), in QuickJS interrupt checks
   * (default 2,000): QuickJS checks about once per 10,000 jumps back and function calls,
   * about 1,800 times a second of one core in a tight loop
   */
  readonly work: number
  /**
   * wall-clock time after which the evaluation's worker is terminated (default 30 seconds):
   * not a limit of the program's work (that is `work`), only a backstop for a worker stuck
   * in one long call inside QuickJS' own C code, so keep it well above what `work` takes
   * on a loaded machine
   */
  readonly backstop: Duration.Input
  /** QuickJS heap limit in MiB (default 32) */
  readonly memoryMb: number
  /** QuickJS stack limit in KiB (default 256, at most 1,024) */
  readonly stackKb: number
  /** characters a program may print (default 65,536); more ends it */
  readonly outputChars: number
  /** characters of each result's JSON (default 65,536); more ends it */
  readonly resultChars: number
}

/** @since 0.1.0 @category models */
export const defaultLimits: Limits = { work: 2_000, backstop: "30 seconds", memoryMb: 32, stackKb: 256, outputChars: 65_536, resultChars: 65_536 }
/** QuickJS' stack lives in the WebAssembly build's own stack, which holds about 1 MiB more. */
const MAX_STACK_KB = 1024

const atMost = (name: string, n: number, max: number) => {
  if (n > max) throw new RangeError(`Sandbox: limits.${name} must be at most ${max}, got ${n}`)
  return n
}

/** A wall-clock `time` limit made scores depend on the machine's load; it was replaced. */
const refuseTime = (limits: object) => {
  if ("time" in limits) {
    throw new RangeError("Sandbox: limits.time (a wall-clock limit, which made scores depend on the machine's load) is no longer read: set limits.work, a work budget in interrupt checks (default 2000), and limits.backstop only for a stuck worker")
  }
}

/** The limits as the worker takes them; throws a RangeError naming an invalid one. */
export const limitsOf = (limits: Limits): WorkerRequest["limits"] => {
  refuseTime(limits)
  const positive = (name: string, n: number) => positiveLimit("Sandbox", name, n)
  return {
    work: workBudget("Sandbox", limits.work, "interrupt checks"),
    memoryBytes: Math.round(positive("memoryMb", limits.memoryMb) * 1024 * 1024),
    stackBytes: Math.round(atMost("stackKb", positive("stackKb", limits.stackKb), MAX_STACK_KB) * 1024),
    outputChars: positive("outputChars", limits.outputChars),
    resultChars: positive("resultChars", limits.resultChars),
  }
}

/** The backstop in milliseconds; throws a RangeError when it is not positive. */
export const backstopOf = (limits: Limits): number => backstopMillis("Sandbox", limits.backstop)

/**
 * Checks limits (over the defaults); throws a RangeError naming an invalid one.
 * @since 0.1.0 @category constructors
 */
export const checkLimits = (limits: Partial<Limits>): void => {
  const all = { ...defaultLimits, ...limits }
  limitsOf(all)
  backstopOf(all)
}

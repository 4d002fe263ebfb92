/**
 * The limits of one Python evaluation, their defaults and their checks.
 *
 * On the embedded backend the program's work is limited by a count, not a clock: `work`
 * is a budget of jumps and Python function starts (counted by `sys.monitoring`), so a
 * verdict is the same on a quiet machine and a loaded one. `backstop` is wall-clock time
 * and only ends a worker that stopped answering (a long call inside C code, which the
 * count does not see). A service backend has no such count: `serviceTimeout` is its
 * wall-clock limit, applied on the service's machine.
 *
 * @since 0.1.0
 */
import type { Duration } from "effect"
import { backstopMillis, positiveLimit, workBudget } from "../code/limitChecks.ts"
import type { WorkerRequest } from "./worker.ts"

/**
 * The limits of one evaluation.
 * @since 0.1.0 @category models
 */
export interface PythonLimits {
  /**
   * the work budget of the whole evaluation (every test), in jumps and Python function
   * starts, each exception raised counting 100 (default 2,000,000: one to two seconds of
   * one core for a tight loop)
   */
  readonly work: number
  /** wall-clock time after which a stuck embedded worker is terminated (default 30 seconds) */
  readonly backstop: Duration.Input
  /** memory the program may use, in MiB (default 128): the interpreter's memory over its size after loading, files written included */
  readonly memoryMb: number
  /** characters a program may print (default 65,536); more ends it */
  readonly outputChars: number
  /** characters of each result's JSON (default 65,536); more ends it */
  readonly resultChars: number
  /** a service backend's wall-clock limit of one run, in seconds (default 10) */
  readonly serviceTimeout: number
}

/** @since 0.1.0 @category models */
export const defaultLimits: PythonLimits = { work: 2_000_000, backstop: "30 seconds", memoryMb: 128, outputChars: 65_536, resultChars: 65_536, serviceTimeout: 10 }

/** WebAssembly memory (32-bit) ends at 4 GiB, and the interpreter needs some of it. */
const MAX_MEMORY_MB = 2048

const positive = (name: string, n: number) => positiveLimit("pythonTests", name, n)

/** The limits as the worker takes them; throws a RangeError naming an invalid one. */
export const limitsOf = (limits: PythonLimits): WorkerRequest["limits"] => {
  const work = workBudget("pythonTests", limits.work, "jumps and calls")
  if (positive("memoryMb", limits.memoryMb) > MAX_MEMORY_MB) throw new RangeError(`pythonTests: limits.memoryMb must be at most ${MAX_MEMORY_MB}, got ${limits.memoryMb}`)
  positive("serviceTimeout", limits.serviceTimeout)
  return {
    work,
    memoryBytes: Math.round(limits.memoryMb * 1024 * 1024),
    outputChars: positive("outputChars", limits.outputChars),
    resultChars: positive("resultChars", limits.resultChars),
  }
}

/** The backstop in milliseconds; throws a RangeError when it is not positive. */
export const backstopOf = (limits: PythonLimits): number => backstopMillis("pythonTests", limits.backstop)

/**
 * Checks limits (over the defaults); throws a RangeError naming an invalid one.
 * @since 0.1.0 @category constructors
 */
export const checkLimits = (limits: Partial<PythonLimits>): PythonLimits => {
  const all = { ...defaultLimits, ...limits }
  limitsOf(all)
  backstopOf(all)
  return all
}

/**
 * What the Python sandbox service takes and answers, and its errors. Two implementations:
 * the embedded one (Pyodide in worker threads, `Embedded.ts`) and Sandbox Fusion over
 * HTTP (`SandboxFusion.ts`); `PythonSandbox.layer({ backend })` (in `../python.ts`) picks one.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"
import type { Effect } from "effect"
import type { PythonLimits } from "./Limits.ts"

// ===== Models =====

/**
 * One evaluation: a program and either calls of one of its functions or stdin cases.
 * @since 0.1.0 @category models
 */
export interface PythonRequest {
  /** the program (a module's source) */
  readonly source: string
  /** function tests: call the function named `entry` with each argument list (JSON values) */
  readonly calls?: { readonly entry: string; readonly args: ReadonlyArray<ReadonlyArray<Schema.Json>> }
  /** stdin/stdout cases: run the program as `__main__` once per input */
  readonly stdin?: ReadonlyArray<string>
  /** limits for this evaluation, over the sandbox's own */
  readonly limits?: Partial<PythonLimits>
}

/**
 * What an evaluation gave: each call's result as JSON, or each case's standard output.
 * @since 0.1.0 @category models
 */
export interface PythonEvaluation {
  readonly results: ReadonlyArray<Schema.Json>
  readonly outputs: ReadonlyArray<string>
  /** what the program printed (function tests), at most `outputChars` */
  readonly output: string
  /** the work it spent, in jumps and calls (embedded only: the same on every run) */
  readonly work: number | undefined
  /** wall-clock time the evaluation took (for information only) */
  readonly millis: number
}

// ===== Errors =====

/**
 * Why a program failed: the program's fault, never the sandbox's.
 * @since 0.1.0 @category errors
 */
export const PythonFailure = Schema.Literals(["Timeout", "OutOfMemory", "StackOverflow", "OutputLimit", "Threw", "NotAFunction", "Crashed", "ResultNotSerializable", "Exited"])
/** @since 0.1.0 @category errors */
export type PythonFailure = typeof PythonFailure.Type

/**
 * The program failed: it ran past its work budget, the backstop or the service's time
 * limit (`Timeout`), out of memory or stack, printed or returned too much, raised
 * (`Threw`; a syntax error too), defines no function of the tests' name
 * (`NotAFunction`), crashed the interpreter, returned what JSON cannot write
 * (`ResultNotSerializable`), or called `sys.exit` before its function tests ran, or with
 * a non-zero status in a stdin case (`Exited`).
 * @since 0.1.0 @category errors
 */
export class PythonProgramError extends Schema.TaggedError<PythonProgramError>()("PythonProgramError", {
  reason: PythonFailure,
  message: Schema.String,
  output: Schema.String,
}) {}

/**
 * The sandbox itself failed: it could not start or be reached (`Unavailable`: a worker
 * that does not start, a service that refuses the connection, answers 5xx, times out or
 * reports its own error), or it answered with something it should never send (`Protocol`).
 * @since 0.1.0 @category errors
 */
export class PythonSandboxError extends Schema.TaggedError<PythonSandboxError>()("PythonSandboxError", {
  reason: Schema.Literals(["Unavailable", "Protocol"]),
  message: Schema.String,
}) {}

// ===== Service =====

/** @since 0.1.0 @category models */
export interface PythonSandboxShape {
  /** Evaluates one program. */
  readonly run: (request: PythonRequest) => Effect.Effect<PythonEvaluation, PythonProgramError | PythonSandboxError>
}

/**
 * A program's message as it may be shown and logged: control, zero-width and
 * bidirectional characters written as `\\uXXXX` escapes.
 * @since 0.1.0 @category constructors
 */
export const printable = (s: string): string =>
  s.replace(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`)

/**
 * Python program rewards: the program in a completion (the last ```python block, else
 * the whole text) run against tests in the `PythonSandbox`, scored by the fraction passed.
 *
 * Two kinds of tests:
 * - function tests: `{ args: [2, 3], expected: 5 }`, calls of one named function
 *   (`entry`); each test loads the program afresh and calls the function once; its result
 *   is written as JSON in the sandbox and compared on the host;
 * - stdin/stdout cases: `{ stdin: "2 3\n", stdout: "5\n" }`; the program runs as
 *   `__main__` with the input; its output passes when it equals the expected one up to
 *   trailing whitespace on each line and trailing blank lines.
 *
 * The sandbox is a service with three backends, chosen by configuration:
 * `PythonSandbox.layer()` is the embedded one (Pyodide, CPython 3.14 in WebAssembly, in
 * warm worker threads; no network, no host files, a work budget); `PythonSandbox.layer({
 * backend: { sandboxFusion: { url } } })` sends programs to a Sandbox Fusion server and
 * `PythonSandbox.layer({ backend: { e2b: {} } })` to E2B cloud sandboxes (for scale, and
 * for packages the standard library lacks).
 *
 * A program that fails (work budget or time limit, memory, stack, output, an exception,
 * no such function, `sys.exit` before its tests, a result JSON cannot hold) scores
 * `penalty` (0) as a `ModelFault` whose message says why, noted with the rollout. A
 * sandbox that cannot start, or a service that is down (refused, 5xx, timeout, its own
 * error), is an `InfraFault`: retried (2 times by default), then the sample is masked.
 *
 * @since 0.1.0
 */
import { Config, Context, Effect, Layer, Schema } from "effect"
import { Reward } from "gyre"
import { sameJson } from "./code.ts"
import { checkEmbeddedOptions, type EmbeddedOptions, makeEmbedded } from "./python/Embedded.ts"
import { checkLimits, type PythonLimits } from "./python/Limits.ts"
import { type PythonEvaluation, PythonProgramError, PythonSandboxError, type PythonSandboxShape } from "./python/PythonSandbox.ts"
import { makeSandboxFusion, type SandboxFusionOptions } from "./python/SandboxFusion.ts"
import { checkE2bOptions, type E2bOptions, makeE2b } from "./python/E2b.ts"

export { type AssertedTest, pythonLiteral, testOfAssert } from "./python/asserts.ts"
export { defaultConcurrency, type EmbeddedOptions } from "./python/Embedded.ts"
export { defaultLimits, type PythonLimits } from "./python/Limits.ts"
export { pythonProgram } from "./python/program.ts"
export { type PythonEvaluation, PythonFailure, PythonProgramError, type PythonRequest, PythonSandboxError, type PythonSandboxShape } from "./python/PythonSandbox.ts"
export { sandboxFusionUrlConfig, type SandboxFusionOptions } from "./python/SandboxFusion.ts"
export { e2bApiKeyConfig, type E2bOptions } from "./python/E2b.ts"
import { pythonProgram } from "./python/program.ts"

// ===== Models =====

/** A function test: call the entry function with `args`; it passes when the result equals `expected` as JSON. @since 0.1.0 @category models */
export const CallTest = Schema.Struct({ args: Schema.Array(Schema.Json), expected: Schema.Json })
/** @since 0.1.0 @category models */
export type CallTest = typeof CallTest.Type

/** A stdin/stdout case: run the program with `stdin`; it passes when it prints `stdout`. @since 0.1.0 @category models */
export const IoTest = Schema.Struct({ stdin: Schema.String, stdout: Schema.String })
/** @since 0.1.0 @category models */
export type IoTest = typeof IoTest.Type

/**
 * A problem's tests: calls of one function, or stdin/stdout cases.
 * @since 0.1.0 @category models
 */
export type PythonTests =
  | { readonly entry: string; readonly calls: ReadonlyArray<CallTest> }
  | { readonly io: ReadonlyArray<IoTest> }

/** How a program did on its tests. @since 0.1.0 @category models */
export interface PythonReport {
  readonly passed: number
  readonly total: number
  readonly evaluation: PythonEvaluation
}

// ===== Running =====

/** Output as compared: trailing whitespace of each line and trailing blank lines dropped, `\r\n` as `\n`. */
export const normalizeOutput = (text: string): string => text.replace(/\r\n?/g, "\n").split("\n").map((l) => l.trimEnd()).join("\n").replace(/\n+$/, "")

const decodeCalls = Schema.decodeUnknownEffect(Schema.Array(CallTest))
const decodeIo = Schema.decodeUnknownEffect(Schema.Array(IoTest))
const ENTRY = /^[A-Za-z_][A-Za-z0-9_]*$/

/**
 * Runs a program against tests in the `PythonSandbox`. Fails with the
 * `PythonProgramError` of a program that could not be run to the end.
 * @since 0.1.0 @category operations
 */
export const runPythonTests = Effect.fn("python.runTests")(function* (source: string, tests: PythonTests, limits?: Partial<PythonLimits>) {
  const sandbox = yield* PythonSandbox
  const extra = limits === undefined ? {} : { limits }
  if ("io" in tests) {
    const cases = yield* decodeIo(tests.io).pipe(Effect.orDie)
    const evaluation = yield* sandbox.run({ source, stdin: cases.map((c) => c.stdin), ...extra })
    const passed = cases.filter((c, i) => evaluation.outputs[i] !== undefined && normalizeOutput(evaluation.outputs[i]!) === normalizeOutput(c.stdout)).length
    return { passed, total: cases.length, evaluation } satisfies PythonReport
  }
  if (!ENTRY.test(tests.entry)) return yield* Effect.die(new RangeError(`pythonTests: entry must be a Python identifier, got ${JSON.stringify(tests.entry)}`))
  const calls = yield* decodeCalls(tests.calls).pipe(Effect.orDie)
  const evaluation = yield* sandbox.run({ source, calls: { entry: tests.entry, args: calls.map((t) => t.args) }, ...extra })
  if (evaluation.results.length !== calls.length) {
    return yield* new PythonSandboxError({ reason: "Protocol", message: `the sandbox returned ${evaluation.results.length} results for ${calls.length} tests` })
  }
  const passed = calls.filter((t, i) => sameJson(evaluation.results[i], t.expected)).length
  return { passed, total: calls.length, evaluation } satisfies PythonReport
})

// ===== Rewards =====

/** Options of `pythonTests`. @since 0.1.0 @category models */
export interface PythonTestsOptions<P> extends Reward.LeafOptions {
  /** the component's name (default "tests") */
  readonly name?: string
  /** the program to run for a completion (default: `pythonProgram`, the last ```python block) */
  readonly program?: (completion: string, problem: P) => string
  /** limits of each evaluation, over the sandbox's own */
  readonly limits?: Partial<PythonLimits>
  /** what a program that fails to run scores (default 0) */
  readonly penalty?: number
}

/**
 * The fraction of `tests(problem)` the completion's Python program passes, run in the
 * `PythonSandbox`. A program that cannot run to the end scores `penalty` with the reason
 * in its `ModelFault`; a sandbox or service failure is an `InfraFault` (retried twice by
 * default, then masked); a problem with no tests is `NotApplicable`.
 *
 * @example
 * const reward = pythonTests((p: { a: number }) => ({ entry: "f", calls: [{ args: [2], expected: 2 * p.a }] }))
 * Env.make({ ..., reward, services: PythonSandbox.layer() })
 * @since 0.1.0 @category constructors
 */
export const pythonTests = <P>(tests: (problem: P) => PythonTests, options: PythonTestsOptions<P> = {}): Reward.Reward<P, PythonSandbox> => {
  const { name = "tests", program = pythonProgram, limits, penalty = 0, retries = 2, ...leaf } = options
  if (!Number.isFinite(penalty)) throw new RangeError(`pythonTests: penalty must be a finite number, got ${penalty}`)
  if (limits !== undefined) checkLimits(limits)
  return Reward.make<P, PythonSandbox>(name, (r, { note }) =>
    Effect.gen(function* () {
      const t = tests(r.problem)
      if (("io" in t ? t.io.length : t.calls.length) === 0) return yield* new Reward.NotApplicable({ message: "the problem has no tests" })
      const report = yield* runPythonTests(program(r.completion, r.problem), t, limits).pipe(
        Effect.catchTags({
          PythonProgramError: (e: PythonProgramError) => {
            const message = `${e.reason}: the program ${e.message}`
            note(message)
            return Effect.fail(new Reward.ModelFault({ penalty, message }))
          },
          PythonSandboxError: (e: PythonSandboxError) => Effect.fail(new Reward.InfraFault({ message: `${e.reason}: ${e.message}` })),
        }),
      )
      return report.passed / report.total
    }), { retries, ...leaf })
}

// ===== Backends =====

/**
 * Which sandbox runs the programs: `"embedded"` (Pyodide in worker threads), a Sandbox
 * Fusion server, or E2B cloud sandboxes (needs the optional `e2b` package).
 * @since 0.1.0 @category models
 */
export type PythonBackend = "embedded" | { readonly sandboxFusion: SandboxFusionOptions } | { readonly e2b: E2bOptions }

/** Options of `PythonSandbox.layer`. @since 0.1.0 @category models */
export interface PythonSandboxOptions extends EmbeddedOptions {
  /** default: `GYRE_PYTHON_BACKEND` (`embedded`, `sandbox-fusion`: the server at `SANDBOX_FUSION_URL`, or `e2b`: the key in `E2B_API_KEY`), else `"embedded"` */
  readonly backend?: PythonBackend
}

/** The backend setting read when `backend` is not given. @since 0.1.0 @category config */
export const backendConfig = Config.Literals(["embedded", "sandbox-fusion", "e2b"], "GYRE_PYTHON_BACKEND").pipe(Config.withDefault("embedded" as const))

/** The backend `GYRE_PYTHON_BACKEND` names, its settings read by the backend itself. */
const configuredBackend = Effect.gen(function* () {
  const name = yield* backendConfig.pipe(Effect.orDie)
  return name === "sandbox-fusion" ? { sandboxFusion: {} } : name === "e2b" ? { e2b: {} } : ("embedded" as PythonBackend)
})

/** The sandbox's layer for the chosen backend; invalid options throw a RangeError here, where the env is defined. */
const pythonSandboxLayer = (options: PythonSandboxOptions = {}): Layer.Layer<PythonSandbox> => {
  const { backend, ...embedded } = options
  checkEmbeddedOptions(embedded)
  if (typeof backend === "object" && "e2b" in backend) checkE2bOptions(backend.e2b)
  return Layer.effect(
    PythonSandbox,
    Effect.gen(function* () {
      const chosen = backend ?? (yield* configuredBackend)
      const limits = embedded.limits !== undefined ? { limits: embedded.limits } : {}
      if (chosen === "embedded") return yield* makeEmbedded(embedded)
      if ("e2b" in chosen) return yield* makeE2b({ ...limits, ...chosen.e2b })
      return yield* makeSandboxFusion({ ...limits, ...chosen.sandboxFusion })
    }),
  )
}

/**
 * The sandbox Python rewards run programs in. Provide `PythonSandbox.layer()` (the
 * embedded backend, or the one `GYRE_PYTHON_BACKEND` names) or
 * `PythonSandbox.layer({ backend: { sandboxFusion: { url } } })` or
 * `PythonSandbox.layer({ backend: { e2b: {} } })` through the env's `services`.
 * @since 0.1.0 @category services
 */
export class PythonSandbox extends Context.Service<PythonSandbox, PythonSandboxShape>()("gyre/rewards/PythonSandbox") {
  /** The layer of the chosen backend (see `PythonSandboxOptions`). */
  static readonly layer = (options: PythonSandboxOptions = {}): Layer.Layer<PythonSandbox> => pythonSandboxLayer(options)
}

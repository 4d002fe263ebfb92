/**
 * Code rewards: run model-written JavaScript against tests in the `Sandbox` (QuickJS in
 * WebAssembly, see `code/Sandbox.ts`) and score the fraction of tests passed.
 *
 * A test is a call and its expected result, both JSON values: `{ args: [2], expected: 7 }`.
 * The completion is made into a program (by default it must be a function expression,
 * `x=>3*x+1`, which is wrapped in parentheses), and for each test the program is evaluated
 * in a fresh context and its value called once with arguments built by the host, so no
 * test sees what an earlier one did. The results are compared with the expected values on
 * the host, as JSON, so a program can change nothing but its own answers: replacing
 * `JSON`, `Object.prototype` or anything else inside the sandbox does not change how it is
 * scored.
 *
 * A program that runs out of its work budget (a count of QuickJS' interrupt checks, not a
 * clock: the verdict does not depend on the machine's load), memory or stack, prints or
 * returns too much (or what JSON cannot read), throws (while loading or in any test), or
 * is not a function, scores `penalty` (0) as a
 * `ModelFault` whose message says why; the message is also noted with the rollout (the
 * `notes` of its row in `rollouts.jsonl`). A sandbox that cannot start is an `InfraFault`:
 * retried when the leaf asks for it, then the sample is masked.
 *
 * @example
 * const reward = passesTests((p: { a: number; b: number }) =>
 *   [0, 1, 2, 5].map((x) => ({ args: [x], expected: p.a * x + p.b })))
 * Env.make({ ..., reward, services: Sandbox.layer() })
 *
 * @since 0.1.0
 */
import { Effect, Schema } from "effect"
import { Reward } from "gyre"
import { checkLimits, type Limits, ProgramError, run, Sandbox, SandboxError } from "./code/Sandbox.ts"

export { defaultLimits, type Evaluation, type Limits, type Options as SandboxOptions, ProgramError, ProgramFailure, type Request, Sandbox, SandboxError, type SandboxShape } from "./code/Sandbox.ts"

// ===== Models =====

/**
 * One test: call the program with `args`; it passes when the result equals `expected` as JSON.
 * @since 0.1.0 @category models
 */
export const TestCase = Schema.Struct({ args: Schema.Array(Schema.Json), expected: Schema.Json })
/** @since 0.1.0 @category models */
export type TestCase = typeof TestCase.Type

/**
 * How a program did on its tests: which passed, and what each call returned.
 * @since 0.1.0 @category models
 */
export interface TestReport {
  readonly passed: number
  readonly total: number
  /** each test's result (undefined when it has no JSON value) */
  readonly results: ReadonlyArray<Schema.Json | undefined>
  /** what the program printed */
  readonly output: string
}

// ===== Running =====

/** Equality of two JSON values (object keys in any order). */
export const sameJson = (a: Schema.Json | undefined, b: Schema.Json | undefined): boolean => {
  if (a === b) return true
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false
  if (Array.isArray(a) || Array.isArray(b)) {
    if (!(Array.isArray(a) && Array.isArray(b)) || a.length !== b.length) return false
    return a.every((x, i) => sameJson(x, b[i]))
  }
  const ka = Object.keys(a), kb = Object.keys(b)
  const ra = a as Record<string, Schema.Json>, rb = b as Record<string, Schema.Json>
  return ka.length === kb.length && ka.every((k) => Object.hasOwn(rb, k) && sameJson(ra[k], rb[k]))
}

const decodeTests = Schema.decodeUnknownEffect(Schema.Array(TestCase))

/**
 * Runs a program (a script whose value is a function) against tests in the `Sandbox`.
 * Fails with the `ProgramError` of a program that could not be run to the end.
 * @since 0.1.0 @category operations
 */
export const runTests = Effect.fn("code.runTests")(function* (source: string, tests: ReadonlyArray<TestCase>, limits?: Partial<Limits>) {
  const valid = yield* decodeTests(tests).pipe(Effect.orDie)
  const evaluation = yield* run({ source, calls: valid.map((t) => t.args), ...(limits === undefined ? {} : { limits }) })
  const passed = valid.filter((t, i) => sameJson(evaluation.results[i], t.expected)).length
  return { passed, total: valid.length, results: evaluation.results, output: evaluation.output } satisfies TestReport
})

// ===== Rewards =====

/**
 * The default program of a completion: the completion is a function expression
 * (`x=>3*x+1`, `function (x) { return 3 * x + 1 }`), wrapped in parentheses.
 * @since 0.1.0 @category constructors
 */
export const functionExpression = (completion: string): string => `(${completion}\n)`

/** Options of `passesTests`. @since 0.1.0 @category models */
export interface PassesTestsOptions<P> extends Reward.LeafOptions {
  /** the component's name (default "tests") */
  readonly name?: string
  /** the program to run for a completion (default: `functionExpression`) */
  readonly program?: (completion: string, problem: P) => string
  /** limits of each evaluation, over the sandbox's own */
  readonly limits?: Partial<Limits>
  /** what a program that fails to run scores (default 0) */
  readonly penalty?: number
}

/**
 * The fraction of `tests(problem)` the completion's program passes, run in the `Sandbox`.
 * A program that cannot run to the end (work budget, memory, stack, output, a throw, not a
 * function) scores `penalty` with the reason in its `ModelFault`; a sandbox failure is an
 * `InfraFault`; a problem with no tests is `NotApplicable`.
 *
 * @example
 * const linear = passesTests((p: { a: number; b: number }) =>
 *   [0, 1, 2, 5].map((x) => ({ args: [x], expected: p.a * x + p.b })))
 * // "x=>3*x+1" on { a: 3, b: 1 } => 1; "x=>3*x" => 0 (each test is off by one); "x=>{while(1);}" => 0, "Timeout: ..."
 * @since 0.1.0 @category constructors
 */
export const passesTests = <P>(tests: (problem: P) => ReadonlyArray<TestCase>, options: PassesTestsOptions<P> = {}): Reward.Reward<P, Sandbox> => {
  const { name = "tests", program = functionExpression, limits, penalty = 0, ...leaf } = options
  if (!Number.isFinite(penalty)) throw new RangeError(`passesTests: penalty must be a finite number, got ${penalty}`)
  if (limits !== undefined) checkLimits(limits)
  return Reward.make<P, Sandbox>(name, (r, { note }) =>
    Effect.gen(function* () {
      const cases = tests(r.problem)
      if (cases.length === 0) return yield* new Reward.NotApplicable({ message: "the problem has no tests" })
      const report = yield* runTests(program(r.completion, r.problem), cases, limits).pipe(
        Effect.catchTags({
          ProgramError: (e: ProgramError) => {
            // the reason goes with the rollout (its row's notes) as well as in the fault
            const message = `${e.reason}: the program ${e.message}`
            note(message)
            return Effect.fail(new Reward.ModelFault({ penalty, message }))
          },
          SandboxError: (e: SandboxError) => Effect.fail(new Reward.InfraFault({ message: `${e.reason}: ${e.message}` })),
        }),
      )
      return report.passed / report.total
    }), leaf)
}

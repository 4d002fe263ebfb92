/**
 * A sandbox for model-written JavaScript: QuickJS compiled to WebAssembly, run in Node
 * worker threads.
 *
 * Each test of an evaluation runs in a fresh QuickJS runtime and context (nothing a program
 * does, prototype pollution or a counter included, reaches the next test or evaluation), with:
 * - no file system, network, process, timers, module loader or host objects: a program
 *   sees the ECMAScript built-ins and `print` / `console.log`, nothing else;
 * - a memory limit (`memoryMb`, default 32) and a stack limit (`stackKb`, default 256);
 * - a work budget (`work`, default 2,000 interrupt checks, about a second of one core for
 *   a tight loop), counted by QuickJS' interrupt handler: a count, not a clock, so the
 *   verdict of a program is the same however loaded the machine is;
 * - a wall-clock backstop (`backstop`, default 30 seconds), only for a worker that stops
 *   answering (one long call inside QuickJS' own C code, which never reaches the
 *   interrupt handler): the worker is terminated and replaced;
 * - an output cap (`outputChars`) on what it prints, and a cap (`resultChars`) on each
 *   result's JSON;
 * - bounded concurrency: at most `concurrency` evaluations at once (one worker each), the
 *   others wait in line. Evaluations run off the main thread, so a hostile program stalls
 *   neither the runner nor other rewards, only its own worker, until its budget or the
 *   backstop ends it.
 *
 * A program's own failure (work, memory, stack, output, a throw, a value that is not a
 * function) is a `ProgramError` with its `reason`; a sandbox that cannot start or stops
 * answering is a `SandboxError`. `Sandbox` is a service: provide `Sandbox.layer()` (or
 * your own implementation) through the env's `services`.
 *
 * @since 0.1.0
 */
import { createRequire } from "node:module"
import { Context, type Duration, Effect, Layer, Schema } from "effect"
import { backstopOf, defaultLimits, type Limits, limitsOf } from "./Limits.ts"
import { workerSource } from "./worker.ts"
import { makeWorkerPool } from "./WorkerPool.ts"

export { checkLimits, defaultLimits, type Limits } from "./Limits.ts"

// ===== Models =====


/**
 * One evaluation: a script, and optionally calls of the function it evaluates to.
 * @since 0.1.0 @category models
 */
export interface Request {
  /** a script (global code); its value is the value of its last expression statement */
  readonly source: string
  /** call the script's value with each of these argument lists (JSON values); absent: read the value itself */
  readonly calls?: ReadonlyArray<ReadonlyArray<Schema.Json>>
  /** limits for this evaluation, over the sandbox's own */
  readonly limits?: Partial<Limits>
}

/**
 * What an evaluation gave: the script's value (without `calls`) or each call's result, as
 * JSON values (`undefined` for one that has no JSON: a function, `undefined`).
 * @since 0.1.0 @category models
 */
export interface Evaluation {
  readonly value: Schema.Json | undefined
  readonly results: ReadonlyArray<Schema.Json | undefined>
  /** what the program printed, at most `outputChars` */
  readonly output: string
  /** the work it spent, in interrupt checks: the same on every run, whatever the machine's load */
  readonly work: number
  /** wall-clock time the evaluation took in its worker (for information only: it depends on the load) */
  readonly millis: number
}

// ===== Errors =====

/**
 * Why a program failed: the program's fault, never the sandbox's.
 * @since 0.1.0 @category errors
 */
export const ProgramFailure = Schema.Literals(["Timeout", "OutOfMemory", "StackOverflow", "OutputLimit", "Threw", "NotAFunction", "Crashed", "ResultNotSerializable", "NeverSettled"])

/**
 * The program failed: it ran past its work budget or its worker's backstop (`Timeout`),
 * out of memory or stack, printed or returned too much, threw, is not a function when it
 * was called, returned what JSON cannot read (`ResultNotSerializable`: a BigInt, a Symbol,
 * a `toJSON` or getter that throws), or returned a promise that never settled
 * (`NeverSettled`; a promise that rejects `Threw`). The reason comes from the engine's own
 * signals (the budget spent, QuickJS' own error), never from the text of what was thrown.
 * @since 0.1.0 @category errors
 */
export class ProgramError extends Schema.TaggedError<ProgramError>()("ProgramError", {
  reason: ProgramFailure,
  message: Schema.String,
  output: Schema.String,
}) {}

/**
 * The sandbox itself failed: it could not start (`Unavailable`), or it answered with
 * something it should never send (`Protocol`).
 * @since 0.1.0 @category errors
 */
export class SandboxError extends Schema.TaggedError<SandboxError>()("SandboxError", {
  reason: Schema.Literals(["Unavailable", "Protocol"]),
  message: Schema.String,
}) {}

// ===== Service =====

/** @since 0.1.0 @category models */
export interface SandboxShape {
  /** Evaluates one program, each test in a fresh context. */
  readonly run: (request: Request) => Effect.Effect<Evaluation, ProgramError | SandboxError>
}

/** Options of `Sandbox.layer`. @since 0.1.0 @category models */
export interface Options {
  /** evaluations at once, each in its own worker thread (default 2) */
  readonly concurrency?: number
  /** the default limits of every evaluation */
  readonly limits?: Partial<Limits>
  /** how long a worker may take to start (default 10 seconds) */
  readonly startTimeout?: Duration.Input
}

// ===== Workers =====

const Reply = Schema.Union([
  Schema.Struct({
    id: Schema.Number,
    ok: Schema.Literal(true),
    value: Schema.optional(Schema.String),
    results: Schema.Array(Schema.UndefinedOr(Schema.String)),
    output: Schema.String,
    work: Schema.Number,
    millis: Schema.Number,
    broken: Schema.Boolean,
  }),
  Schema.Struct({
    id: Schema.Number,
    ok: Schema.Literal(false),
    reason: ProgramFailure,
    message: Schema.String,
    output: Schema.String,
    millis: Schema.Number,
    broken: Schema.Boolean,
  }),
])
const decodeReply = Schema.decodeUnknownEffect(Reply)

const packagePaths = Effect.try({
  try: () => {
    const require = createRequire(import.meta.url)
    return { core: require.resolve("quickjs-emscripten-core"), variant: require.resolve("@jitl/quickjs-wasmfile-release-sync") }
  },
  catch: (e) => new SandboxError({ reason: "Unavailable", message: `QuickJS is not installed: ${e instanceof Error ? e.message : String(e)}` }),
})

/**
 * A program's message as it may be shown and logged: control, zero-width and
 * bidirectional characters and lone surrogates written as `\\uXXXX` escapes.
 */
const printable = (s: string): string =>
  s.replace(
    /[\u0000-\u001f\u007f-\u009f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
  )

/** Text with each lone surrogate replaced by U+FFFD (what a program printed, as it may be shown). */
const wellFormed = (s: string): string => s.replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, "\ufffd")

const parseJson = (text: string | undefined): Schema.Json | undefined => (text === undefined ? undefined : (JSON.parse(text) as Schema.Json))

/** The options with their defaults; throws a RangeError naming an invalid one. */
const checkOptions = (options: Options) => {
  const concurrency = options.concurrency ?? 2
  if (!(Number.isInteger(concurrency) && concurrency >= 1)) throw new RangeError(`Sandbox: concurrency must be a positive integer, got ${concurrency}`)
  const base = { ...defaultLimits, ...options.limits }
  limitsOf(base)
  backstopOf(base)
  return { concurrency, base, startTimeout: options.startTimeout ?? "10 seconds" }
}

/**
 * Builds a sandbox: workers are started on first use (so a sandbox that cannot start
 * fails its evaluations, not the layer) and kept while the scope lasts.
 * @since 0.1.0 @category constructors
 */
export const make = Effect.fnUntraced(function* (options: Options = {}) {
  const { concurrency, base, startTimeout } = checkOptions(options)
  const pool = yield* makeWorkerPool({
    concurrency,
    source: workerSource,
    workerData: packagePaths,
    resourceLimits: { maxOldGenerationSizeMb: 128, stackSizeMb: 4 },
    startTimeout,
    name: "the sandbox",
    engine: "QuickJS",
    decode: decodeReply,
    fail: (reason, message) => new SandboxError({ reason, message }),
    programError: (reason, message) => new ProgramError({ reason, message, output: "" }),
    uncounted: "QuickJS' own code",
  })

  const run = (request: Request): Effect.Effect<Evaluation, ProgramError | SandboxError> =>
    pool.evaluate(() => {
      const all = { ...base, ...request.limits }
      return { request: { source: request.source, calls: request.calls, limits: limitsOf(all) }, backstop: backstopOf(all) }
    }).pipe(
      Effect.flatMap((reply) => {
        if (!reply.ok) return Effect.fail(new ProgramError({ reason: reply.reason, message: printable(reply.message), output: wellFormed(reply.output) }))
        return Effect.succeed({ value: parseJson(reply.value), results: reply.results.map(parseJson), output: wellFormed(reply.output), work: reply.work, millis: reply.millis })
      }),
    )

  return Sandbox.of({ run })
})

/**
 * The sandbox that code rewards run programs in.
 * @since 0.1.0 @category services
 */
export class Sandbox extends Context.Service<Sandbox, SandboxShape>()("gyre/rewards/Sandbox") {
  /**
   * QuickJS in worker threads (see the module's documentation for the limits). Invalid
   * options throw a RangeError here, where the env is defined.
   */
  static readonly layer = (options: Options = {}): Layer.Layer<Sandbox> => {
    checkOptions(options)
    return Layer.effect(Sandbox, make(options))
  }
}

/**
 * Evaluates one program in the `Sandbox`.
 * @since 0.1.0 @category operations
 */
export const run = Effect.fn("Sandbox.run")(function* (request: Request) {
  const sandbox = yield* Sandbox
  return yield* sandbox.run(request)
})

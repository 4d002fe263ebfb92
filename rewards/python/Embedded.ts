/**
 * The embedded Python sandbox: Pyodide (CPython 3.14 in WebAssembly) in Node worker
 * threads, kept warm in a pool.
 *
 * - a pool of at most `concurrency` workers (default: the cores but one, at least 1, at
 *   most 8), each started on first use (about 3 to 8 seconds) and kept while the scope
 *   lasts; evaluations beyond the pool wait in line;
 * - each evaluation starts from the interpreter's baseline (see `harness.ts`): modules and
 *   builtins restored, `/tmp` and the home directory emptied, fresh globals per test;
 * - limits: a work budget (`work`, counted, not timed), memory (`memoryMb`), output
 *   (`outputChars`, `resultChars`), and a wall-clock `backstop` for a stuck worker only;
 * - a worker that dies under a program, or is stopped at the backstop, is replaced and its
 *   sample is the program's fault (`Crashed`, `Timeout`, `StackOverflow`); a worker that
 *   cannot start, or does not begin an evaluation it was sent, is the sandbox's
 *   (`Unavailable`: the sample is masked). The backstop counts from the moment the worker
 *   begins the evaluation, and a worker that ended while idle is never handed one: time a
 *   request waits for a busy, slow or dead thread is not charged to the program (the pool
 *   is `../code/WorkerPool.ts`, shared with the JavaScript sandbox).
 *
 * @since 0.1.0
 */
import { createRequire } from "node:module"
import { availableParallelism } from "node:os"
import { dirname } from "node:path"
import { pathToFileURL } from "node:url"
import { type Duration, Effect, Schema } from "effect"
import { makeWorkerPool } from "../code/WorkerPool.ts"
import { backstopOf, defaultLimits, limitsOf, type PythonLimits } from "./Limits.ts"
import { printable, type PythonEvaluation, PythonFailure, PythonProgramError, type PythonRequest, PythonSandboxError, type PythonSandboxShape } from "./PythonSandbox.ts"
import { workerData, type WorkerRequest, workerSource } from "./worker.ts"

/** Options of the embedded backend. @since 0.1.0 @category models */
export interface EmbeddedOptions {
  /** evaluations at once, each in its own warm worker (default: the cores but one, 1 to 8) */
  readonly concurrency?: number
  /** the default limits of every evaluation */
  readonly limits?: Partial<PythonLimits>
  /** how long a worker may take to load Pyodide (default 120 seconds: a loaded machine stretches the 3 to 8 s) */
  readonly startTimeout?: Duration.Input
}

const Reply = Schema.Union([
  Schema.Struct({
    id: Schema.Number,
    ok: Schema.Literal(true),
    results: Schema.optional(Schema.Array(Schema.String)),
    outputs: Schema.optional(Schema.Array(Schema.String)),
    output: Schema.String,
    work: Schema.Number,
    millis: Schema.Number,
    broken: Schema.Boolean,
  }),
  Schema.Struct({ id: Schema.Number, ok: Schema.Literal(false), reason: PythonFailure, message: Schema.String, output: Schema.String, millis: Schema.Number, broken: Schema.Boolean }),
])
const decodeReply = Schema.decodeUnknownEffect(Reply)

/** The default pool size: the cores but one (the runner needs one), 1 to 8. */
export const defaultConcurrency = (): number => Math.max(1, Math.min(8, availableParallelism() - 1))

const pyodidePaths = Effect.try({
  try: () => {
    const main = createRequire(import.meta.url).resolve("pyodide/pyodide.mjs")
    return workerData(pathToFileURL(main).href, `${dirname(main)}/`)
  },
  catch: (e) => new PythonSandboxError({ reason: "Unavailable", message: `Pyodide is not installed (npm install pyodide): ${e instanceof Error ? e.message : String(e)}` }),
})

/** The options with their defaults; throws a RangeError naming an invalid one. */
export const checkEmbeddedOptions = (options: EmbeddedOptions) => {
  const concurrency = options.concurrency ?? defaultConcurrency()
  if (!(Number.isInteger(concurrency) && concurrency >= 1)) throw new RangeError(`PythonSandbox: concurrency must be a positive integer, got ${concurrency}`)
  const base = { ...defaultLimits, ...options.limits }
  limitsOf(base)
  backstopOf(base)
  return { concurrency, base, startTimeout: options.startTimeout ?? "120 seconds" }
}

/** The worker's request for a sandbox request (the pool adds its id). */
const workerRequest = (request: PythonRequest, limits: WorkerRequest["limits"]): Omit<WorkerRequest, "id"> => ({
  source: request.source,
  entry: request.calls?.entry,
  calls: request.calls?.args,
  stdin: request.calls === undefined ? (request.stdin ?? []) : undefined,
  limits,
})

/** What one reply means: an evaluation or the program's error. */
const answerOf = (reply: typeof Reply.Type): Effect.Effect<PythonEvaluation, PythonProgramError> => {
  if (!reply.ok) return Effect.fail(new PythonProgramError({ reason: reply.reason, message: printable(reply.message), output: reply.output }))
  return Effect.succeed({
    results: (reply.results ?? []).map((text) => JSON.parse(text) as Schema.Json),
    outputs: reply.outputs ?? [],
    output: reply.output,
    work: reply.work,
    millis: reply.millis,
  })
}

/**
 * Builds the embedded sandbox: workers start on first use (a sandbox that cannot start
 * fails its evaluations, not the layer) and are kept while the scope lasts.
 * @since 0.1.0 @category constructors
 */
export const makeEmbedded = Effect.fnUntraced(function* (options: EmbeddedOptions = {}) {
  const { concurrency, base, startTimeout } = checkEmbeddedOptions(options)
  const pool = yield* makeWorkerPool({
    concurrency,
    source: workerSource,
    workerData: pyodidePaths,
    // the interpreter's calls nest on the thread's stack: 16 MB holds its default recursion limit with room
    resourceLimits: { maxOldGenerationSizeMb: 256, stackSizeMb: 16 },
    startTimeout,
    name: "the Python sandbox",
    engine: "Pyodide",
    decode: decodeReply,
    fail: (reason, message) => new PythonSandboxError({ reason, message }),
    programError: (reason, message) => new PythonProgramError({ reason, message, output: "" }),
    uncounted: "C code",
  })

  const run = (request: PythonRequest) =>
    pool.evaluate(() => {
      const all = { ...base, ...request.limits }
      return { request: workerRequest(request, limitsOf(all)), backstop: backstopOf(all) }
    }).pipe(Effect.flatMap(answerOf))

  return { run } satisfies PythonSandboxShape
})

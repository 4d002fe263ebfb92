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
 *   cannot start is the sandbox's (`Unavailable`: the sample is masked). A worker whose
 *   memory cap was reached is retired after its answer.
 *
 * @since 0.1.0
 */
import { createRequire } from "node:module"
import { availableParallelism } from "node:os"
import { dirname } from "node:path"
import { pathToFileURL } from "node:url"
import { Worker } from "node:worker_threads"
import { Duration, Effect, Schema, Semaphore } from "effect"
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

/** Starts one worker and waits until Pyodide is loaded in it. */
const startWorker = (startTimeout: Duration.Input) =>
  Effect.flatMap(pyodidePaths, (data) =>
    Effect.callback<Worker, PythonSandboxError>((resume) => {
      // the interpreter's calls nest on the thread's stack: 16 MB holds its default recursion limit with room
      const worker = new Worker(workerSource, { eval: true, workerData: data, resourceLimits: { maxOldGenerationSizeMb: 256, stackSizeMb: 16 } })
      worker.unref()
      const unavailable = (message: string) => {
        void worker.terminate()
        resume(Effect.fail(new PythonSandboxError({ reason: "Unavailable", message: `the Python sandbox could not start: ${message}` })))
      }
      const onMessage = (m: { ready?: boolean; message?: string }) => {
        cleanup()
        if (m.ready === true) resume(Effect.succeed(worker))
        else unavailable(m.message ?? "Pyodide did not load")
      }
      const onError = (e: Error) => (cleanup(), unavailable(e.message))
      const onExit = (code: number) => (cleanup(), unavailable(`its worker exited with code ${code}`))
      const cleanup = () => void worker.off("message", onMessage).off("error", onError).off("exit", onExit)
      worker.on("message", onMessage).on("error", onError).on("exit", onExit)
      return Effect.sync(() => (cleanup(), void worker.terminate()))
    }).pipe(
      Effect.timeoutOrElse({
        duration: startTimeout,
        orElse: () => Effect.fail(new PythonSandboxError({ reason: "Unavailable", message: `the Python sandbox did not start within ${Duration.format(Duration.fromInputUnsafe(startTimeout))}` })),
      }),
    ))

type Outcome = { readonly _tag: "Reply"; readonly reply: unknown } | { readonly _tag: "Died"; readonly message: string }

/** Sends one request and waits for its reply, or for the worker to die. */
const ask = (worker: Worker, request: WorkerRequest) =>
  Effect.callback<Outcome>((resume) => {
    const onMessage = (m: unknown) => (cleanup(), resume(Effect.succeed({ _tag: "Reply", reply: m })))
    const onError = (e: Error) => (cleanup(), resume(Effect.succeed({ _tag: "Died", message: e.message })))
    const onExit = (code: number) => (cleanup(), resume(Effect.succeed({ _tag: "Died", message: `its worker exited with code ${code}` })))
    const cleanup = () => void worker.off("message", onMessage).off("error", onError).off("exit", onExit)
    worker.on("message", onMessage).on("error", onError).on("exit", onExit)
    worker.postMessage(request)
    return Effect.sync(cleanup)
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

/** The worker's request for a sandbox request; throws a RangeError naming an invalid limit. */
const workerRequest = (id: number, request: PythonRequest, limits: WorkerRequest["limits"]): WorkerRequest => ({
  id,
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
  const permits = yield* Semaphore.make(concurrency)
  const idle: Array<Worker> = []
  let nextId = 0
  yield* Effect.addFinalizer(() => Effect.sync(() => idle.splice(0).forEach((w) => void w.terminate())))

  const evaluate = (worker: Worker, request: WorkerRequest, backstop: number) =>
    ask(worker, request).pipe(
      Effect.timeoutOption(backstop),
      Effect.flatMap((outcome): Effect.Effect<typeof Reply.Type, PythonProgramError | PythonSandboxError> => {
        if (outcome._tag === "None") {
          const message = `did not come back within the backstop of ${backstop} ms (a long call inside C code, which the work budget does not see) and its worker was stopped`
          return Effect.fail(new PythonProgramError({ reason: "Timeout", message, output: "" }))
        }
        const o = outcome.value
        if (o._tag === "Died") return Effect.fail(new PythonProgramError({ reason: "Crashed", message: `crashed its worker: ${o.message}`, output: "" }))
        return decodeReply(o.reply).pipe(
          Effect.mapError((e) => new PythonSandboxError({ reason: "Protocol", message: `the Python sandbox's worker sent an answer that does not decode: ${e.message}` })),
          Effect.filterOrFail(
            (reply) => reply.id === request.id,
            (reply) => new PythonSandboxError({ reason: "Protocol", message: `the Python sandbox's worker answered request ${reply.id} to request ${request.id}` }),
          ),
        )
      }),
    )

  const run = (request: PythonRequest) =>
    Effect.gen(function* () {
      const { limits, backstop } = yield* Effect.try({
        try: () => {
          const all = { ...base, ...request.limits }
          return { limits: limitsOf(all), backstop: backstopOf(all) }
        },
        catch: (e) => new PythonSandboxError({ reason: "Protocol", message: e instanceof Error ? e.message : String(e) }),
      })
      const worker = idle.pop() ?? (yield* startWorker(startTimeout))
      const reply = yield* evaluate(worker, workerRequest(nextId++, request, limits), backstop).pipe(
        // a worker whose evaluation was cut short, or whose memory cap was reached, is never reused
        Effect.onExit((exit) =>
          Effect.sync(() => {
            if (exit._tag === "Success" && !exit.value.broken) idle.push(worker)
            else void worker.terminate()
          })
        ),
      )
      return yield* answerOf(reply)
    }).pipe(Semaphore.withPermits(permits, 1))

  return { run } satisfies PythonSandboxShape
})

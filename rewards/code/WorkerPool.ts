/**
 * A pool of warm worker threads, each evaluating one request at a time: the part the
 * JavaScript sandbox (QuickJS) and the Python sandbox (Pyodide) have in common.
 *
 * - at most `concurrency` evaluations at once; a worker is started on first use and kept
 *   while the scope lasts; evaluations beyond the pool wait in line;
 * - a worker is handed an evaluation only when it is idle and alive: one that exits while
 *   idle (its thread ended between two evaluations) is dropped from the pool, so its death
 *   is never charged to the next program;
 * - each evaluation ends with the worker's reply, its death, or the wall-clock backstop,
 *   which counts from the worker's word that it began the evaluation: time the request
 *   spent waiting for a busy or slow thread is not the program's. A worker that never
 *   begins it (it died, or is stuck) fails the evaluation as the sandbox's `Unavailable`
 *   (the sample is masked, never scored), and a reply that came in when the backstop fell
 *   due still counts (a host too busy to read it in time does not turn it into a `Timeout`);
 * - a worker whose evaluation did not end with a sound reply, or whose reply says it is
 *   `broken`, is terminated and never reused.
 *
 * @since 0.1.0
 */
import type { ResourceLimits } from "node:worker_threads"
import { Worker } from "node:worker_threads"
import { Duration, Effect, Semaphore } from "effect"
import type { Schema } from "effect"

/** What every worker reply carries. @internal */
export interface PooledReply {
  readonly id: number
  readonly broken: boolean
}

/** @internal */
export interface PoolOptions<R extends PooledReply, E, P> {
  /** evaluations at once */
  readonly concurrency: number
  /** the worker's source (CommonJS, run with `eval: true`), its data and its resource limits */
  readonly source: string
  readonly workerData: Effect.Effect<unknown, E>
  readonly resourceLimits: ResourceLimits
  /** how long a worker may take to start */
  readonly startTimeout: Duration.Input
  /** the sandbox as messages name it ("the sandbox", "the Python sandbox") and the engine it loads */
  readonly name: string
  readonly engine: string
  /** reads a worker's reply */
  readonly decode: (reply: unknown) => Effect.Effect<R, Schema.SchemaError>
  /** the sandbox's own failure: it could not start, or it answered what it should never send */
  readonly fail: (reason: "Unavailable" | "Protocol", message: string) => E
  /** the program's failure: its worker did not answer within the backstop, or died under it */
  readonly programError: (reason: "Timeout" | "Crashed", message: string) => P
  /** where a program spends time the work budget does not count ("C code") */
  readonly uncounted: string
}

/** Starts one worker and waits until it says it is ready. */
const startWorker = <R extends PooledReply, E, P>(o: PoolOptions<R, E, P>) =>
  Effect.flatMap(o.workerData, (data) =>
    Effect.callback<Worker, E>((resume) => {
      const worker = new Worker(o.source, { eval: true, workerData: data, resourceLimits: o.resourceLimits })
      worker.unref()
      const unavailable = (message: string) => {
        void worker.terminate()
        resume(Effect.fail(o.fail("Unavailable", `${o.name} could not start: ${message}`)))
      }
      const onMessage = (m: { ready?: boolean; message?: string }) => {
        cleanup()
        if (m.ready === true) resume(Effect.succeed(worker))
        else unavailable(m.message ?? `${o.engine} did not load`)
      }
      const onError = (e: Error) => (cleanup(), unavailable(e.message))
      const onExit = (code: number) => (cleanup(), unavailable(`its worker exited with code ${code}`))
      const cleanup = () => void worker.off("message", onMessage).off("error", onError).off("exit", onExit)
      worker.on("message", onMessage).on("error", onError).on("exit", onExit)
      return Effect.sync(() => (cleanup(), void worker.terminate()))
    }).pipe(
      Effect.timeoutOrElse({
        duration: o.startTimeout,
        orElse: () => Effect.fail(o.fail("Unavailable", `${o.name} did not start within ${Duration.format(Duration.fromInputUnsafe(o.startTimeout))}`)),
      }),
    ))

type Outcome =
  | { readonly _tag: "Reply"; readonly reply: unknown }
  | { readonly _tag: "Died"; readonly message: string }
  | { readonly _tag: "Backstop" }
  | { readonly _tag: "NotTaken" }

/**
 * Sends one request and waits for its reply, the worker's death, or the backstop.
 *
 * The backstop counts from the worker's word that it took the request up, not from the
 * sending: a worker that is slow to read it (a loaded machine, work of its own between two
 * evaluations) spends none of the program's time, and one that never takes it up within
 * `takeUp` is the sandbox's failure (`NotTaken`), not the program's. When the backstop
 * falls due, messages already delivered to the host are read first (the check runs after
 * the event loop's poll phase), so a reply is never lost to a host that was busy when it
 * came in.
 */
const ask = (worker: Worker, request: PooledRequest, backstop: number, takeUp: number) =>
  Effect.callback<Outcome>((resume) => {
    let immediate: ReturnType<typeof setImmediate> | undefined
    const finish = (outcome: Outcome) => (cleanup(), resume(Effect.succeed(outcome)))
    const after = (millis: number, outcome: Outcome) => setTimeout(() => void (immediate = setImmediate(() => finish(outcome))), millis)
    let timer = after(takeUp, { _tag: "NotTaken" })
    const onMessage = (m: unknown) => {
      if (typeof m === "object" && m !== null && "started" in m && m.started === request.id) {
        clearTimeout(timer)
        if (immediate !== undefined) clearImmediate(immediate)
        immediate = undefined
        timer = after(backstop, { _tag: "Backstop" })
        return
      }
      finish({ _tag: "Reply", reply: m })
    }
    const onError = (e: Error) => finish({ _tag: "Died", message: e.message })
    const onExit = (code: number) => finish({ _tag: "Died", message: `its worker exited with code ${code}` })
    const cleanup = () => {
      clearTimeout(timer)
      if (immediate !== undefined) clearImmediate(immediate)
      worker.off("message", onMessage).off("error", onError).off("exit", onExit)
    }
    worker.on("message", onMessage).on("error", onError).on("exit", onExit)
    worker.postMessage(request)
    return Effect.sync(cleanup)
  })

/** What the pool sends: the request with the id its reply must carry. @internal */
export interface PooledRequest {
  readonly id: number
}

/**
 * A pool of workers. `evaluate(prepare)` runs one request in an idle worker, or a new one:
 * `prepare` gives the request (the pool adds its id) and its backstop in milliseconds, or
 * throws a RangeError naming an invalid limit (the sandbox's `Protocol` failure).
 * @internal
 */
export const makeWorkerPool = Effect.fnUntraced(function* <R extends PooledReply, E, P>(options: PoolOptions<R, E, P>) {
  const permits = yield* Semaphore.make(options.concurrency)
  const idle = new Set<Worker>()
  let nextId = 0
  yield* Effect.addFinalizer(() =>
    Effect.sync(() => {
      for (const w of idle) void w.terminate()
      idle.clear()
    })
  )

  /** Keeps a worker until its next evaluation; one that exits meanwhile leaves the pool. */
  const park = (worker: Worker) => {
    idle.add(worker)
    const gone = () => void idle.delete(worker)
    worker.once("exit", gone)
    // an error while idle ends the thread: its exit removes it
    worker.on("error", gone)
    return () => void worker.off("exit", gone).off("error", gone)
  }
  const unpark = new Map<Worker, () => void>()
  const take = (): Worker | undefined => {
    for (const worker of idle) {
      idle.delete(worker)
      unpark.get(worker)?.()
      unpark.delete(worker)
      // a thread that ended is given -1 as its id, even before its exit event is read
      if (worker.threadId >= 0) return worker
    }
    return undefined
  }

  const evaluate = (prepare: () => { readonly request: object; readonly backstop: number }): Effect.Effect<R, E | P> =>
    Effect.gen(function* () {
      const { request, backstop } = yield* Effect.try({
        try: prepare,
        catch: (e) => options.fail("Protocol", e instanceof Error ? e.message : String(e)),
      })
      const worker = take() ?? (yield* startWorker(options))
      const id = nextId++
      // a live worker takes a request up at once: it is given as long as a start, or the backstop, may take
      const takeUp = Math.max(backstop, Duration.toMillis(Duration.fromInputUnsafe(options.startTimeout)))
      return yield* ask(worker, { ...request, id }, backstop, takeUp).pipe(
        Effect.flatMap((outcome): Effect.Effect<R, E | P> => {
          if (outcome._tag === "NotTaken") return Effect.fail(options.fail("Unavailable", `${options.name}'s worker did not take up the evaluation within ${takeUp} ms, and was stopped`))
          if (outcome._tag === "Backstop") {
            const message = `did not come back within the backstop of ${backstop} ms (a long call inside ${options.uncounted}, which the work budget does not see) and its worker was stopped`
            return Effect.fail(options.programError("Timeout", message))
          }
          if (outcome._tag === "Died") return Effect.fail(options.programError("Crashed", `crashed its worker: ${outcome.message}`))
          return options.decode(outcome.reply).pipe(
            Effect.mapError((e) => options.fail("Protocol", `${options.name}'s worker sent an answer that does not decode: ${e.message}`)),
            Effect.filterOrFail(
              (reply) => reply.id === id,
              (reply) => options.fail("Protocol", `${options.name}'s worker answered request ${reply.id} to request ${id}`),
            ),
          )
        }),
        // a worker whose evaluation was cut short, or that says it is broken, is never reused
        Effect.onExit((exit) =>
          Effect.sync(() => {
            if (exit._tag === "Success" && !exit.value.broken) unpark.set(worker, park(worker))
            else void worker.terminate()
          })
        ),
      )
    }).pipe(Semaphore.withPermits(permits, 1))

  return { evaluate }
})

/**
 * The worker's side of the pool (JavaScript source, run in the worker after its engine
 * loaded): `serve(evaluate, overflowed, output)` answers each request with
 * `evaluate(request)` (the reply with `broken`), its id and the milliseconds it took. A
 * JavaScript error under the program (the thread's own stack ran out, or the engine
 * failed) leaves the engine in an unknown state: the reply is `StackOverflow` or
 * `Crashed`, and the worker is retired.
 * @internal
 */
export const serveSource = String.raw`
function serve(evaluate, overflowed, output) {
  parentPort.on("message", (request) => {
    // the backstop counts from here
    parentPort.postMessage({ started: request.id })
    const started = Date.now()
    let reply
    try {
      reply = evaluate(request)
    } catch (e) {
      const overflow = e instanceof RangeError && /call stack/.test(String(e.message))
      const text = String(e && e.name) + ": " + String(e && e.message)
      reply = overflow
        ? { ok: false, reason: "StackOverflow", message: overflowed, output: output(), broken: true }
        : { ok: false, reason: "Crashed", message: "crashed the sandbox: " + (text.length > 300 ? text.slice(0, 300) + "..." : text), output: output(), broken: true }
    }
    parentPort.postMessage({ id: request.id, millis: Date.now() - started, ...reply })
  })
  parentPort.postMessage({ ready: true })
}
`

/**
 * One engine worker thread seen from the main thread: `spawn` starts a worker running
 * `EngineWorker.ts` and waits until its engine is ready; `EngineThread.call` sends one
 * request and waits for its reply. An error thrown inside the worker comes back as a
 * `BackendError` with its message; a worker that dies fails every call waiting on it
 * (`Unavailable`), and later calls fail at once. The worker is terminated when the
 * scope closes.
 *
 * The worker script is TypeScript; a worker cannot inherit the tsx loader on Node 20,
 * so each worker first registers tsx's ESM hooks itself.
 *
 * @since 0.1.0
 */
import { Worker } from "node:worker_threads"
import { Effect, type Scope } from "effect"
import type { BackendError } from "../../contract/Contract.ts"
import type { LocalOptions } from "./Engines.ts"
import { fail, messageOf } from "./Errors.ts"
import type { WorkerInfo, WorkerInit, WorkerMessage, WorkerRequest, WorkerRole } from "./WorkerProtocol.ts"

type Args<F> = F extends (...args: infer A) => unknown ? A : never
type Result<F> = F extends (...args: never) => infer R ? Awaited<R> : never

type Outcome = { readonly ok: true; readonly value: unknown } | { readonly ok: false; readonly reason: BackendError["reason"]; readonly message: string }

/**
 * One engine worker seen from the main thread: calls are matched to replies by id.
 * @since 0.1.0 @category models
 */
export class EngineThread<Ops> {
  private nextId = 0
  private readonly pending = new Map<number, (outcome: Outcome) => void>()
  /** why the worker can no longer answer, once it cannot */
  private down: string | undefined = undefined

  constructor(
    readonly role: WorkerRole,
    readonly worker: Worker,
    readonly info: WorkerInfo,
  ) {}

  /** @internal routes one message from the worker */
  receive(message: WorkerMessage) {
    if (message.type !== "reply") return
    const resume = this.pending.get(message.id)
    if (!resume) return
    this.pending.delete(message.id)
    resume(message.ok ? { ok: true, value: message.value } : { ok: false, reason: message.reason ?? "Internal", message: message.message })
  }

  /** @internal fails every waiting call; later calls fail at once */
  stop(why: string) {
    this.down ??= why
    const waiting = [...this.pending.values()]
    this.pending.clear()
    for (const resume of waiting) resume({ ok: false, reason: "Unavailable", message: this.down })
  }

  /** Whether the worker still answers. */
  get alive(): boolean {
    return this.down === undefined
  }

  /**
   * Sends one request and waits for its reply. Errors thrown by the worker fail with
   * `reason` (default `Internal`); a dead worker fails with `Unavailable`.
   */
  call<K extends keyof Ops & string>(
    operation: string,
    op: K,
    args: Args<Ops[K]>,
    options: { readonly reason?: BackendError["reason"]; readonly transfer?: ReadonlyArray<ArrayBuffer> } = {},
  ): Effect.Effect<Result<Ops[K]>, BackendError> {
    return Effect.callback<Result<Ops[K]>, BackendError>((resume) => {
      if (this.down !== undefined) return resume(Effect.fail(fail(operation, "Unavailable", this.down)))
      const id = this.nextId++
      this.pending.set(id, (outcome) =>
        resume(
          outcome.ok
            ? Effect.succeed(outcome.value as Result<Ops[K]>)
            : Effect.fail(fail(operation, outcome.reason === "Internal" ? options.reason ?? "Internal" : outcome.reason, outcome.message)),
        ))
      const request: WorkerRequest = { id, op, args }
      try {
        this.worker.postMessage(request, [...(options.transfer ?? [])])
      } catch (e) {
        this.pending.delete(id)
        return resume(Effect.fail(fail(operation, "InvalidInput", `cannot send the request to the ${this.role} worker: ${messageOf(e)}`)))
      }
      // interrupted: the worker still finishes the call, its reply is dropped
      return Effect.sync(() => {
        this.pending.delete(id)
      })
    })
  }
}

const entry = new URL("./EngineWorker.ts", import.meta.url)

/** Starts a worker running `EngineWorker.ts`, registering tsx's hooks in it when the script is TypeScript. */
const startWorker = (init: WorkerInit): Worker => {
  if (!entry.pathname.endsWith(".ts")) return new Worker(entry, { workerData: init })
  const tsx = import.meta.resolve("tsx/esm/api")
  const code = `import(${JSON.stringify(tsx)}).then((api) => { api.register(); return import(${JSON.stringify(entry.href)}) })`
  return new Worker(code, { eval: true, workerData: init })
}

/**
 * Starts one engine worker and waits until its engine is ready; the worker is
 * terminated when the scope closes.
 * @since 0.1.0 @category constructors
 */
export const spawn = <Ops>(role: WorkerRole, options: LocalOptions): Effect.Effect<EngineThread<Ops>, BackendError, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.callback<EngineThread<Ops>, BackendError>((resume) => {
      const operation = "LocalWorkers.make"
      let worker: Worker
      try {
        worker = startWorker({ role, options })
      } catch (e) {
        return resume(Effect.fail(fail(operation, "Unavailable", `cannot start the ${role} worker: ${messageOf(e)}`)))
      }
      let thread: EngineThread<Ops> | undefined
      let lastError: string | undefined
      const failStart = (message: string) => resume(Effect.fail(fail(operation, "Unavailable", message)))
      worker.on("message", (message: WorkerMessage) => {
        if (thread) return thread.receive(message)
        if (message.type === "ready") {
          thread = new EngineThread<Ops>(role, worker, message.info)
          resume(Effect.succeed(thread))
        } else if (message.type === "failed") {
          failStart(`the ${role} worker cannot load the model: ${message.message}`)
          void worker.terminate()
        }
      })
      worker.on("error", (e) => {
        lastError = messageOf(e)
      })
      worker.on("exit", (code) => {
        const why = `the ${role} worker exited (code ${code})${lastError === undefined ? "" : `: ${lastError}`}`
        if (thread) thread.stop(why)
        else failStart(why)
      })
      return Effect.promise(() => worker.terminate())
    }),
    (thread) =>
      Effect.promise(async () => {
        thread.stop(`the ${role} worker was closed`)
        await thread.worker.terminate()
      }),
  )

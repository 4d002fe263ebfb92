/**
 * Starting one episode worker thread (`Thread.ts`) and waiting until it has loaded the env
 * and the tokenizer. The worker is terminated when the scope closes.
 *
 * The script is TypeScript when gyre runs from source: a worker does not inherit the tsx
 * loader, so it registers tsx's hooks itself first (as the embedded engine's workers do).
 *
 * @since 0.1.0
 */
import { Worker } from "node:worker_threads"
import { Effect, type Scope } from "effect"
import type { FromWorker, Init } from "./Protocol.ts"

const entry = new URL(import.meta.url.endsWith(".ts") ? "./Thread.ts" : "./Thread.js", import.meta.url)

const startWorker = (init: Init): Worker => {
  if (!entry.pathname.endsWith(".ts")) return new Worker(entry, { workerData: init })
  const tsx = import.meta.resolve("tsx/esm/api")
  const code = `import(${JSON.stringify(tsx)}).then((api) => { api.register(); return import(${JSON.stringify(entry.href)}) })`
  return new Worker(code, { eval: true, workerData: init })
}

/** A started worker: what it loaded, and its thread. @since 0.1.0 @category models */
export interface Started {
  readonly worker: Worker
  readonly ready: Extract<FromWorker, { type: "ready" }>
}

const messageOf = (e: unknown) => (e instanceof Error ? e.message : String(e))

/**
 * Starts worker `init.index` and waits for it to say it is ready; fails with the reason it
 * could not start (its env or tokenizer did not load, or it exited).
 * @since 0.1.0 @category constructors
 */
export const spawn = (init: Init): Effect.Effect<Started, string, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.callback<Started, string>((resume) => {
      let worker: Worker
      try {
        worker = startWorker(init)
      } catch (e) {
        return resume(Effect.fail(`cannot start worker ${init.index}: ${messageOf(e)}`))
      }
      let settled = false
      let lastError: string | undefined
      const onMessage = (message: FromWorker) => {
        if (message.type === "ready" || message.type === "failed") {
          settled = true
          worker.off("message", onMessage)
          resume(message.type === "ready" ? Effect.succeed({ worker, ready: message }) : Effect.fail(message.message))
          if (message.type === "failed") void worker.terminate()
        }
      }
      worker.on("message", onMessage)
      worker.on("error", (e) => {
        lastError = messageOf(e)
      })
      worker.once("exit", (code) => {
        if (!settled) resume(Effect.fail(`worker ${init.index} exited (code ${code}) before it was ready${lastError === undefined ? "" : `: ${lastError}`}`))
      })
      return Effect.promise(() => worker.terminate())
    }),
    (started) => Effect.promise(() => started.worker.terminate()),
  )

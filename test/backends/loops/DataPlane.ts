/**
 * Test helpers: a gyre `serve` on loopback as the data plane behind the fake control
 * plane (a tiny random-init model), and a logger that keeps every line.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { Context, type Duration, Effect, Exit, Layer, Logger, References, Scope } from "effect"
import * as Server from "../../../src/backends/http/server/Server.ts"
import * as Serve from "../../../src/backends/local/Serve.ts"
import * as LoopsServer from "../../../src/backends/loops/server/Server.ts"
import { TINY } from "../../envs/vowels.ts"

/** The model name a random-init `serve` reports (the base model of its runs). */
export const RANDOM_MODEL = "local:random"

/** Starts a `serve` of a tiny random model; `close` stops it. */
export const startDataPlane = async () => {
  const stateDir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-loops-dp-"))
  const scope = Effect.runSync(Scope.make())
  const ctx = await Effect.runPromise(
    Layer.buildWithScope(Serve.layer({ config: TINY, lora: { rank: 4, alpha: 8, targets: ["q", "k", "v", "o", "w1", "w2"] }, seed: 0, stateDir }), scope).pipe(
      Effect.provide(Layer.succeed(References.MinimumLogLevel, "Warn")),
    ),
  )
  const server = Context.get(ctx, Server.Running)
  return { url: server.url, close: () => Effect.runPromise(Scope.close(scope, Exit.void)) }
}

/**
 * Starts gyre's Loops data-plane server over a tiny random model (the embedded trainer
 * and sampler), as run `runId`; `close` stops it.
 */
export const startLoopsDataPlane = async (options: { readonly runId?: string; readonly pollWait?: Duration.Input; readonly resultTtl?: Duration.Input; readonly maxBodyBytes?: number } = {}) => {
  const stateDir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-loops-ldp-"))
  const scope = Effect.runSync(Scope.make())
  const server = await Effect.runPromise(
    Effect.gen(function* () {
      const backend = yield* Serve.embedded({ config: TINY, lora: { rank: 4, alpha: 8, targets: ["q", "k", "v", "o", "w1", "w2"] }, seed: 0, stateDir })
      return yield* LoopsServer.make({ trainer: backend.trainer, sampler: backend.sampler, modelName: backend.modelName, runId: options.runId, pollWait: options.pollWait ?? "2 seconds", resultTtl: options.resultTtl, maxBodyBytes: options.maxBodyBytes, vocabSize: backend.vocabSize })
    }).pipe(Scope.provide(scope), Effect.provide(Layer.succeed(References.MinimumLogLevel, "Warn"))),
  )
  return { ...server, close: () => Effect.runPromise(Scope.close(scope, Exit.void)) }
}

/** Every log line at every level, as `LEVEL message`, with any cause. */
export const capture = () => {
  const lines: Array<string> = []
  const logger = Logger.make((options) => {
    const message = Array.isArray(options.message) ? options.message.map(String).join(" ") : String(options.message)
    lines.push(`${options.logLevel.toUpperCase()} ${message}${options.cause === undefined ? "" : ` ${String(options.cause)}`}`)
  })
  return { lines, layer: Layer.mergeAll(Logger.layer([logger]), Layer.succeed(References.MinimumLogLevel, "All")) }
}

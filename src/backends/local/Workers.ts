/**
 * The embedded backend on two threads: the trainer and the sampler each run in their
 * own worker thread, with their own tfjs-wasm instance, so a 2-core machine trains and
 * samples at the same time (tfjs-wasm uses one thread per instance). The main thread
 * only validates requests and passes messages. `LocalWorkers.layer(options)` (or
 * `Local.layer({ ...options, workers: true })`) provides the same `Trainer`, `Sampler`,
 * `Tokenizer` and `Reference` services as `Local.layer`, with the same seeds and the same
 * results. The reference log-probs (base model, adapter off) are computed on the sampler
 * thread.
 *
 * - With `trainerThreads: n` (default 1), n trainer threads share every forward(-backward)
 *   call (data parallel, split by token count, pooled over the whole call); the first
 *   holds the optimizer, adds the others' gradients at `optimStep` and sends them the
 *   new weights.
 * - `saveWeightsForSampler` moves the adapter from the trainer thread to the sampler
 *   thread (its buffers are transferred, not copied) and returns once the sampler
 *   serves the new version; `minPolicyVersion` waits for that.
 * - An error thrown inside a worker comes back as a `BackendError` with its message;
 *   a worker that dies fails every call waiting on it (`Unavailable`), and later calls
 *   fail at once.
 * - The workers are terminated when the layer's scope closes.
 *
 * The worker script is TypeScript (`EngineWorker.ts`); a worker cannot inherit the
 * tsx loader on Node 20, so each worker first registers tsx's ESM hooks itself.
 *
 * On 2 cores, V8's parallel GC helper threads compete with the engine threads; starting
 * node with `--single-threaded-gc` (`npx tsx --single-threaded-gc ...`; it is not
 * accepted in NODE_OPTIONS) gave about 8% more steps per second in `bench/pipeline.ts`.
 *
 * @since 0.1.0
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { Worker } from "node:worker_threads"
import { Context, Effect, Exit, Layer, SubscriptionRef } from "effect"
import type { Scope } from "effect"
import {
  type AdamParams,
  BackendError,
  type Datum,
  type ForwardBackwardResult,
  type ForwardOptions,
  type LossFn,
  type LossFnOutput,
  type ModelInput,
  modelInputTokens,
  type SampleOptions,
  type SamplingParams,
} from "../../Contract.ts"
import { validateLoss } from "../../Loss.ts"
import { Reference, type ReferenceShape } from "../../Reference.ts"
import { awaitVersion as awaitVersionOf, Sampler, type SamplerShape } from "../../Sampler.ts"
import { Tokenizer, type TokenizerShape } from "../../Tokenizer.ts"
import { Trainer, type TrainerShape } from "../../Trainer.ts"
import * as CharTokenizer from "./CharTokenizer.ts"
import type { SamplerOps, TrainerOps, WorkerInfo, WorkerInit, WorkerMessage, WorkerRequest, WorkerRole } from "./EngineWorker.ts"
import type { LocalOptions } from "./index.ts"
import { checkLora, defaultLora, type Weights } from "./Model.ts"
import type { SamplerStats } from "./SamplerEngine.ts"
import { activeCount } from "../../Datum.ts"
import { fail, messageOf } from "./Errors.ts"
import { checkAdam, checkData, checkLogprobsInput, checkSample, checkTopK } from "./Validate.ts"


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

const NAME = /^[A-Za-z0-9._-]+$/

/** The services over a pair of worker threads, and the threads (for tests and tools). @since 0.1.0 @category models */
export interface WorkerServices {
  readonly trainer: TrainerShape
  readonly sampler: SamplerShape
  readonly tokenizer: TokenizerShape
  /** log-probs under the base model with the adapter off, on the sampler thread */
  readonly reference: ReferenceShape
  readonly threads: {
    /** the trainer thread that holds the optimizer state and publishes */
    readonly trainer: EngineThread<TrainerOps>
    /** every trainer thread, the first one included */
    readonly trainers: ReadonlyArray<EngineThread<TrainerOps>>
    readonly sampler: EngineThread<SamplerOps>
  }
  /** the sampler engine's batching statistics */
  readonly samplerStats: Effect.Effect<SamplerStats, BackendError>
}

const buffersOf = (weights: Weights): Array<ArrayBuffer> => Object.values(weights).map((w) => w.buffer as ArrayBuffer)

/** Splits data into at most `n` parts of about equal token counts (indices into `data`). */
const split = (data: ReadonlyArray<Datum>, n: number): Array<Array<number>> => {
  const parts = Array.from({ length: Math.min(n, data.length) }, () => ({ indices: [] as Array<number>, tokens: 0 }))
  const lengths = data.map((d) => modelInputTokens(d.modelInput).length)
  const order = data.map((_, i) => i).sort((a, b) => lengths[b]! - lengths[a]! || a - b)
  for (const i of order) {
    const least = parts.reduce((m, p) => (p.tokens < m.tokens ? p : m), parts[0]!)
    least.indices.push(i)
    least.tokens += lengths[i]!
  }
  return parts.map((p) => p.indices.sort((a, b) => a - b))
}

/** Joins the results of a split call, in the caller's order, with metrics over the whole call. */
const merge = (
  count: number,
  parts: ReadonlyArray<ReadonlyArray<number>>,
  results: ReadonlyArray<ForwardBackwardResult>,
  active: number,
): ForwardBackwardResult => {
  const outputs: Array<LossFnOutput> = new Array(count)
  parts.forEach((indices, j) => indices.forEach((i, k) => (outputs[i] = results[j]!.lossFnOutputs[k]!)))
  const total = (key: string) => results.reduce((s, r) => s + (r.metrics[key] ?? 0), 0)
  const lossSum = total("loss:sum")
  const metrics: Record<string, number> = { loss: active > 0 ? lossSum / active : 0, "loss:sum": lossSum, active_tokens: active }
  if (results.some((r) => "clip_fraction" in r.metrics)) {
    const clipped = results.reduce((s, r) => s + (r.metrics["clip_fraction"] ?? 0) * (r.metrics["active_tokens"] ?? 0), 0)
    metrics["clip_fraction"] = active > 0 ? clipped / active : 0
  }
  return { lossFnOutputs: outputs, metrics }
}

/**
 * Starts a trainer worker and a sampler worker on one base model (each loads it) and
 * builds the services over them; the workers are terminated with the scope.
 * @since 0.1.0 @category constructors
 */
export const make = Effect.fn("LocalWorkers.make")(function* (options: LocalOptions = {}) {
  const lora = options.lora ?? defaultLora
  const loraError = checkLora(lora)
  if (loraError) return yield* fail("LocalWorkers.make", "InvalidInput", loraError)
  const trainerCount = options.trainerThreads ?? 1
  if (!Number.isInteger(trainerCount) || trainerCount < 1) {
    return yield* fail("LocalWorkers.make", "InvalidInput", `trainerThreads must be a positive integer, got ${trainerCount}`)
  }
  const { workers: _workers, trainerThreads: _trainerThreads, readyTimeout, ...engineOptions } = options
  const [trainers, samplerThread] = yield* Effect.all(
    [
      Effect.all(Array.from({ length: trainerCount }, () => spawn<TrainerOps>("trainer", engineOptions)), { concurrency: "unbounded" }),
      spawn<SamplerOps>("sampler", engineOptions),
    ],
    { concurrency: 2 },
  )
  const trainerThread = trainers[0]!
  const helpers = trainers.slice(1)
  const stateDir = options.stateDir ?? "runs/local-state"
  const { config, modelName } = trainerThread.info
  yield* Effect.logDebug(
    `local backend ready on worker threads: ${modelName}, ${config.nLayers} layers, d ${config.dModel}, LoRA rank ${lora.rank}, ${trainerCount} trainer thread(s)`,
  )

  /** Copies the first trainer's weights to the others (which also clears their gradients). */
  const syncHelpers = Effect.fnUntraced(function* (operation: string) {
    if (helpers.length === 0) return
    const params = yield* trainerThread.call(operation, "params", [])
    yield* Effect.forEach(helpers, (h) => h.call(operation, "setParams", [params]), { concurrency: "unbounded", discard: true })
  })
  yield* syncHelpers("LocalWorkers.make")

  let trainerVersion = trainerThread.info.version
  const published = yield* SubscriptionRef.make(samplerThread.info.version)

  const runLoss = (operation: string, backward: boolean) =>
    Effect.fn(operation)(function* (data: ReadonlyArray<Datum>, lossFn: LossFn, options?: ForwardOptions) {
      const loss = yield* validateLoss(operation, lossFn, options?.lossFnConfig)
      const topKError = checkTopK(options?.topKLogprobs)
      if (topKError) return yield* fail(operation, "InvalidInput", topKError)
      const dataError = checkData(data, lossFn, config)
      if (dataError) return yield* fail(operation, "InvalidInput", dataError)
      const topK = options?.topKLogprobs
      const run = topK === undefined ? { backward } : { backward, topK }
      const parts = split(data, trainers.length)
      if (parts.length <= 1) return yield* trainerThread.call(operation, "run", [data, loss, run])
      // data parallel: each thread takes a share, pooled over the whole call
      const denominator = activeCount(data, loss.lossFn)
      // Each thread holds its share's gradient until every share succeeded: all or nothing.
      const exits = yield* Effect.forEach(
        parts,
        (indices, j) => Effect.exit(trainers[j]!.call(operation, "run", [indices.map((i) => data[i]!), loss, { ...run, denominator, defer: true }])),
        { concurrency: "unbounded" },
      )
      const settle = (op: "commit" | "discard") =>
        Effect.forEach(parts, (_, j) => trainers[j]!.call(operation, op, []), { concurrency: "unbounded", discard: true })
      const results: Array<ForwardBackwardResult> = []
      for (const exit of exits) {
        if (Exit.isFailure(exit)) {
          yield* settle("discard")
          return yield* Effect.failCause(exit.cause)
        }
        results.push(exit.value)
      }
      yield* settle("commit")
      return merge(data.length, parts, results, denominator)
    })

  const awaitVersion = (operation: string, min: number | undefined) => awaitVersionOf(published, operation, min, readyTimeout)

  const trainer: TrainerShape = Trainer.of({
    forwardBackward: runLoss("LocalWorkers.forwardBackward", true),
    forward: runLoss("LocalWorkers.forward", false),
    optimStep: Effect.fn("LocalWorkers.optimStep")(function* (adam: AdamParams) {
      const bad = checkAdam(adam)
      if (bad) return yield* fail("LocalWorkers.optimStep", "InvalidInput", bad)
      const operation = "LocalWorkers.optimStep"
      const extra = yield* Effect.forEach(helpers, (h) => h.call(operation, "takeGradients", []), { concurrency: "unbounded" })
      const result = yield* trainerThread.call(operation, "optimStep", [adam, extra], { transfer: extra.flatMap(buffersOf) })
      yield* syncHelpers(operation)
      trainerVersion = result.version
      return result
    }),
    saveWeightsForSampler: Effect.fn("LocalWorkers.saveWeightsForSampler")(function* (name: string) {
      const operation = "LocalWorkers.saveWeightsForSampler"
      const adapter = yield* trainerThread.call(operation, "publish", [])
      const version = yield* samplerThread.call(operation, "setAdapter", [adapter], { transfer: buffersOf(adapter.weights) })
      yield* SubscriptionRef.set(published, version)
      return { version, path: `local://sampler_weights/${name}` }
    }),
    saveState: Effect.fn("LocalWorkers.saveState")(function* (name: string) {
      if (!NAME.test(name)) return yield* fail("LocalWorkers.saveState", "InvalidInput", `state name ${JSON.stringify(name)} must match ${NAME.source}`)
      const file = path.join(stateDir, `${name}.ckpt`)
      yield* trainerThread.call("LocalWorkers.saveState", "saveState", [file])
      return { path: file }
    }),
    loadState: Effect.fn("LocalWorkers.loadState")(function* (file: string, options?: { readonly withOptimizer?: boolean }) {
      const candidates = [file, path.join(stateDir, `${file}.ckpt`)]
      const found = candidates.find((c) => fs.existsSync(c))
      if (!found) return yield* fail("LocalWorkers.loadState", "InvalidInput", `no state file at ${candidates.join(" or ")}`)
      trainerVersion = yield* trainerThread.call("LocalWorkers.loadState", "loadState", [found, options?.withOptimizer ?? false], { reason: "InvalidInput" })
      yield* syncHelpers("LocalWorkers.loadState")
    }),
    info: Effect.sync(() => ({
      modelName,
      loraRank: trainerThread.info.loraRank,
      version: trainerVersion,
      maxSequenceLength: config.contextLength,
    })),
  })

  const sampler: SamplerShape = Sampler.of({
    sample: Effect.fn("LocalWorkers.sample")(function* (prompt: ModelInput, params: SamplingParams, options: SampleOptions) {
      const tokens = modelInputTokens(prompt)
      const bad = checkSample(tokens, params, options.numSamples, config)
      if (bad) return yield* fail("LocalWorkers.sample", "InvalidInput", bad)
      yield* awaitVersion("LocalWorkers.sample", options.minPolicyVersion)
      return yield* samplerThread.call("LocalWorkers.sample", "sample", [
        tokens,
        params,
        { numSamples: options.numSamples, ...(options.includePromptLogprobs ? { includePromptLogprobs: true } : {}) },
      ])
    }),
    computeLogprobs: Effect.fn("LocalWorkers.computeLogprobs")(function* (input: ModelInput, options?: { readonly minPolicyVersion?: number }) {
      const tokens = modelInputTokens(input)
      const bad = checkLogprobsInput(tokens, config)
      if (bad) return yield* fail("LocalWorkers.computeLogprobs", "InvalidInput", bad)
      yield* awaitVersion("LocalWorkers.computeLogprobs", options?.minPolicyVersion)
      return yield* samplerThread.call("LocalWorkers.computeLogprobs", "computeLogprobs", [tokens])
    }),
    version: SubscriptionRef.get(published),
  })

  const reference: ReferenceShape = Reference.of({
    logprobs: Effect.fn("LocalWorkers.reference")(function* (inputs: ReadonlyArray<ModelInput>) {
      const seqs = inputs.map(modelInputTokens)
      for (let i = 0; i < seqs.length; i++) {
        const bad = checkLogprobsInput(seqs[i]!, config)
        if (bad) return yield* fail("LocalWorkers.reference", "InvalidInput", `inputs[${i}]: ${bad}`)
      }
      if (seqs.length === 0) return []
      return yield* samplerThread.call("LocalWorkers.reference", "referenceLogprobs", [seqs])
    }),
    check: Effect.suspend(() =>
      samplerThread.alive ? Effect.void : Effect.fail(fail("LocalWorkers.reference", "Unavailable", "the sampler worker, which computes the reference log-probs, is down"))
    ),
  })

  return {
    trainer,
    sampler,
    tokenizer: CharTokenizer.make(),
    reference,
    threads: { trainer: trainerThread, trainers, sampler: samplerThread },
    samplerStats: samplerThread.call("LocalWorkers.samplerStats", "stats", []),
  } satisfies WorkerServices
})

/**
 * `Trainer`, `Sampler`, `Tokenizer` and `Reference` on the embedded model, trainer and
 * sampler in their own worker threads.
 * @since 0.1.0 @category layers
 */
export const layer = (options: LocalOptions = {}): Layer.Layer<Trainer | Sampler | Tokenizer | Reference, BackendError> =>
  Layer.effectContext(
    Effect.map(make(options), (s) =>
      Context.make(Trainer, s.trainer).pipe(Context.add(Sampler, s.sampler), Context.add(Tokenizer, s.tokenizer), Context.add(Reference, s.reference)),
    ),
  )

/** @since 0.1.0 @category models */
export const LocalWorkers = { layer, make, spawn } as const

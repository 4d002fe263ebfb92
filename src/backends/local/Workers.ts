/**
 * The embedded backend on two threads: the trainer and the sampler each run in their
 * own worker thread, with their own tfjs-wasm instance, so a 2-core machine trains and
 * samples at the same time (tfjs-wasm uses one thread per instance). The main thread
 * only checks requests (the services of `Embedded.ts`, as in-process) and passes
 * messages (`EngineThread.ts`). `LocalWorkers.layer(options)` (or
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
 * On 2 cores, V8's parallel GC helper threads compete with the engine threads; starting
 * node with `--single-threaded-gc` (`npx tsx --single-threaded-gc ...`; it is not
 * accepted in NODE_OPTIONS) gave about 8% more steps per second in `bench/pipeline.ts`.
 *
 * @since 0.1.0
 */
import { Array as Arr, Context, Effect, Exit, Layer } from "effect"
import { type BackendError, type Datum, type ForwardBackwardResult, type LossFnOutput, modelInputTokens } from "../../contract/Contract.ts"
import { activeCount } from "../../loss/Loss.ts"
import { Reference } from "../../services/Reference.ts"
import { Sampler } from "../../services/Sampler.ts"
import { Tokenizer } from "../../services/Tokenizer.ts"
import { Trainer } from "../../services/Trainer.ts"
import { type EmbeddedServices, type EngineCalls, services } from "./Embedded.ts"
import { DEFAULT_STATE_DIR, type LocalOptions } from "./Engines.ts"
import { type EngineThread, spawn } from "./EngineThread.ts"
import { fail } from "./Errors.ts"
import { checkLora, defaultLora, type Weights } from "./Model.ts"
import { at } from "../../util/Lookup.ts"
import type { SamplerStats } from "./SamplerEngine.ts"
import type { SamplerOps, TrainerOps } from "./WorkerProtocol.ts"

export { EngineThread, spawn } from "./EngineThread.ts"

/** The services over a pair of worker threads, and the threads (for tests and tools). @since 0.1.0 @category models */
export interface WorkerServices extends EmbeddedServices {
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

/** A datum of a call with its position in the call. */
interface Indexed {
  readonly index: number
  readonly datum: Datum
}

/** A trainer thread's share of a call: data in the call's order. */
interface Share {
  readonly trainer: EngineThread<TrainerOps>
  readonly items: ReadonlyArray<Indexed>
}

/** A share's data and what its thread returned for them. */
interface ShareResult {
  readonly items: ReadonlyArray<Indexed>
  readonly result: ForwardBackwardResult
}

/** Splits data among at most all of `trainers`, in parts of about equal token counts (each datum keeps its index). */
const split = (data: ReadonlyArray<Datum>, trainers: ReadonlyArray<EngineThread<TrainerOps>>): Array<Share> => {
  const parts = trainers.slice(0, Math.min(trainers.length, data.length)).map((trainer) => ({ trainer, items: [] as Array<Indexed>, tokens: 0 }))
  const sized = data.map((datum, index) => ({ index, datum, length: modelInputTokens(datum.modelInput).length }))
  sized.sort((a, b) => b.length - a.length || a.index - b.index)
  for (const item of sized) {
    // parts is not empty while there are data
    const least = parts.reduce((m, p) => (p.tokens < m.tokens ? p : m))
    least.items.push(item)
    least.tokens += item.length
  }
  return parts.map((p) => ({ trainer: p.trainer, items: p.items.sort((a, b) => a.index - b.index) }))
}

/** Joins the results of a split call (each share with its result), in the caller's order, with metrics over the whole call. */
const merge = (count: number, done: ReadonlyArray<ShareResult>, active: number): ForwardBackwardResult => {
  const outputs: Array<LossFnOutput> = new Array(count)
  for (const { items, result } of done) items.forEach((item, k) => (outputs[item.index] = at(result.lossFnOutputs, k, "the loss output of a datum of a share")))
  const results = done.map((d) => d.result)
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
 * One forward(-backward) call on the trainer threads: on one thread as it is; on several,
 * data parallel, each thread a share, pooled over the whole call. Each thread holds its
 * share's gradient until every share succeeded: all or nothing.
 */
const runOn = (trainers: Arr.NonEmptyReadonlyArray<EngineThread<TrainerOps>>): EngineCalls["run"] =>
  Effect.fnUntraced(function* (operation, data, loss, run) {
    const shares = split(data, trainers)
    if (shares.length <= 1) return yield* trainers[0].call(operation, "run", [data, loss, run])
    const denominator = activeCount(data, loss.lossFn)
    const exits = yield* Effect.forEach(
      shares,
      ({ trainer, items }) =>
        Effect.exit(trainer.call(operation, "run", [items.map((item) => item.datum), loss, { ...run, denominator, defer: true }])).pipe(
          Effect.map((exit) => ({ items, exit })),
        ),
      { concurrency: "unbounded" },
    )
    const settle = (op: "commit" | "discard") =>
      Effect.forEach(shares, ({ trainer }) => trainer.call(operation, op, []), { concurrency: "unbounded", discard: true })
    const done: Array<ShareResult> = []
    for (const { items, exit } of exits) {
      if (Exit.isFailure(exit)) {
        yield* settle("discard")
        return yield* Effect.failCause(exit.cause)
      }
      done.push({ items, result: exit.value })
    }
    yield* settle("commit")
    return merge(data.length, done, denominator)
  })

/**
 * Calls to the engines on worker threads: the first trainer thread holds the optimizer,
 * adds the others' gradients at `optimStep` and sends them the new weights.
 */
const threadCalls = (
  trainers: Arr.NonEmptyReadonlyArray<EngineThread<TrainerOps>>,
  samplerThread: EngineThread<SamplerOps>,
  syncHelpers: (operation: string) => Effect.Effect<void, BackendError>,
): EngineCalls => {
  const trainerThread = trainers[0]
  const helpers = trainers.slice(1)
  let trainerVersion = trainerThread.info.version
  return {
    config: trainerThread.info.config,
    loraRank: trainerThread.info.loraRank,
    trainerVersion: () => trainerVersion,
    samplerVersion: samplerThread.info.version,
    run: runOn(trainers),
    optimStep: Effect.fnUntraced(function* (operation, adam) {
      const extra = yield* Effect.forEach(helpers, (h) => h.call(operation, "takeGradients", []), { concurrency: "unbounded" })
      const result = yield* trainerThread.call(operation, "optimStep", [adam, extra], { transfer: extra.flatMap(buffersOf) })
      yield* syncHelpers(operation)
      trainerVersion = result.version
      return result
    }),
    // the adapter's buffers move from the trainer thread to the sampler thread, not copied
    publish: Effect.fnUntraced(function* (operation) {
      const adapter = yield* trainerThread.call(operation, "publish", [])
      return yield* samplerThread.call(operation, "setAdapter", [adapter], { transfer: buffersOf(adapter.weights) })
    }),
    saveState: (operation, file) => trainerThread.call(operation, "saveState", [file]),
    loadState: Effect.fnUntraced(function* (operation, file, withOptimizer) {
      trainerVersion = yield* trainerThread.call(operation, "loadState", [file, withOptimizer], { reason: "InvalidInput" })
      yield* syncHelpers(operation)
    }),
    samplers: [{
      sample: (operation, tokens, params, options) => samplerThread.call(operation, "sample", [tokens, params, options]),
      computeLogprobs: (operation, tokens) => samplerThread.call(operation, "computeLogprobs", [tokens]),
    }],
    referenceLogprobs: (operation, seqs) => samplerThread.call(operation, "referenceLogprobs", [seqs]),
    referenceCheck: Effect.suspend(() =>
      samplerThread.alive ? Effect.void : Effect.fail(fail("LocalWorkers.reference", "Unavailable", "the sampler worker, which computes the reference log-probs, is down"))
    ),
  }
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
  const { workers: _workers, trainerThreads: _trainerThreads, replicas: _replicas, readyTimeout, ...engineOptions } = options
  const [trainers, samplerThread] = yield* Effect.all(
    [
      Effect.all(Arr.makeBy(trainerCount, () => spawn<TrainerOps>("trainer", engineOptions)), { concurrency: "unbounded" }),
      spawn<SamplerOps>("sampler", engineOptions),
    ],
    { concurrency: 2 },
  )
  const trainerThread = trainers[0]
  const { config, modelName } = trainerThread.info
  yield* Effect.logDebug(
    `local backend ready on worker threads: ${modelName}, ${config.nLayers} layers, d ${config.dModel}, LoRA rank ${lora.rank}, ${trainerCount} trainer thread(s)`,
  )
  /** Copies the first trainer's weights to the others (which also clears their gradients). */
  const syncHelpers = Effect.fnUntraced(function* (operation: string) {
    if (trainers.length === 1) return
    const params = yield* trainerThread.call(operation, "params", [])
    yield* Effect.forEach(trainers.slice(1), (h) => h.call(operation, "setParams", [params]), { concurrency: "unbounded", discard: true })
  })
  yield* syncHelpers("LocalWorkers.make")
  const built = yield* services(threadCalls(trainers, samplerThread, syncHelpers), {
    prefix: "LocalWorkers",
    modelName,
    stateDir: options.stateDir ?? DEFAULT_STATE_DIR,
    readyTimeout,
  })
  return {
    ...built,
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

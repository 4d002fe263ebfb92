/**
 * The script of an engine worker thread: it loads the base model into its own tfjs-wasm
 * instance and serves one engine (the trainer or the sampler) over the thread's
 * message port. `Workers.ts` starts it and talks to it; this module also defines the
 * messages they exchange.
 *
 * Requests are `{ id, op, args }`; every request gets one reply `{ id, ok, value }` or
 * `{ id, ok: false, message }`. Replies may come out of order: sample requests are
 * queued and batched by the engine while other requests are answered.
 *
 * @since 0.1.0
 */
import { parentPort, workerData } from "node:worker_threads"
import type { AdamParams, Datum, ForwardBackwardResult, OptimStepResult, SampleResult, SamplingParams } from "../../Contract.ts"
import type { ResolvedLoss } from "../../Loss.ts"
import { NonFiniteError } from "./Errors.ts"
import { loadModel, type LocalOptions } from "./index.ts"
import { cloneWeights, defaultLora, type ModelConfig, type Weights } from "./Model.ts"
import { LocalSamplerEngine, type SampleRequestOptions, type SamplerStats } from "./SamplerEngine.ts"
import { LocalTrainerEngine, type PublishedAdapter } from "./TrainerEngine.ts"

/** What the trainer worker does, by operation name. @since 0.1.0 @category models */
export type TrainerOps = {
  readonly run: (
    data: ReadonlyArray<Datum>,
    loss: ResolvedLoss,
    options: { readonly backward: boolean; readonly topK?: number; readonly denominator?: number; readonly defer?: boolean },
  ) => ForwardBackwardResult
  /** adds the last deferred `run`'s gradient to the buffer */
  readonly commit: () => void
  /** drops the last deferred `run`'s gradient */
  readonly discard: () => void
  /** adds `extra` gradients (from other trainer threads) to the buffer, then steps */
  readonly optimStep: (adam: AdamParams, extra: ReadonlyArray<Weights>) => OptimStepResult
  /** the accumulated gradients (transferred), leaving the buffer at zero */
  readonly takeGradients: () => Weights
  /** a copy of the trainable weights (transferred) */
  readonly params: () => Weights
  /** replaces the trainable weights and clears the gradients */
  readonly setParams: (weights: Weights) => void
  /** a copy of the adapter; its buffers are transferred, not copied, to the caller */
  readonly publish: () => PublishedAdapter
  readonly saveState: (file: string) => Promise<void>
  /** returns the version of the loaded state */
  readonly loadState: (file: string, withOptimizer: boolean) => Promise<number>
}

/** What the sampler worker does, by operation name. @since 0.1.0 @category models */
export type SamplerOps = {
  readonly sample: (prompt: ReadonlyArray<number>, params: SamplingParams, options: SampleRequestOptions) => Promise<SampleResult>
  readonly computeLogprobs: (tokens: ReadonlyArray<number>) => Array<number>
  /** per sequence, its log-probs under the base model with the adapter off (the KL reference) */
  readonly referenceLogprobs: (seqs: ReadonlyArray<ReadonlyArray<number>>) => Array<Array<number>>
  /** installs a published adapter; returns the version served from now on */
  readonly setAdapter: (adapter: PublishedAdapter) => number
  readonly stats: () => SamplerStats
}

/** @since 0.1.0 @category models */
export type WorkerRole = "trainer" | "sampler"

/** The `workerData` a worker is started with. @since 0.1.0 @category models */
export interface WorkerInit {
  readonly role: WorkerRole
  readonly options: LocalOptions
}

/** What a worker reports once its engine is ready. @since 0.1.0 @category models */
export interface WorkerInfo {
  readonly modelName: string
  readonly config: ModelConfig
  readonly loraRank: number
  readonly version: number
}

/** @since 0.1.0 @category models */
export type WorkerRequest = { readonly id: number; readonly op: string; readonly args: ReadonlyArray<unknown> }

/** @since 0.1.0 @category models */
export type WorkerMessage =
  | { readonly type: "ready"; readonly info: WorkerInfo }
  | { readonly type: "failed"; readonly message: string }
  | { readonly type: "reply"; readonly id: number; readonly ok: true; readonly value: unknown }
  | { readonly type: "reply"; readonly id: number; readonly ok: false; readonly message: string; readonly reason?: "InvalidInput" }

const messageOf = (e: unknown) => (e instanceof Error ? e.message : String(e))

/** The buffers of a set of weights, to transfer instead of copying. */
const buffersOf = (weights: Weights): Array<ArrayBuffer> => Object.values(weights).map((w) => w.buffer as ArrayBuffer)

const start = async (port: NonNullable<typeof parentPort>, init: WorkerInit) => {
  const { model, name } = await loadModel(init.options)
  const seed = init.options.seed ?? 0
  let handlers: Record<string, (...args: Array<never>) => unknown>
  let info: WorkerInfo
  let transferOf: (op: string, value: unknown) => Array<ArrayBuffer> = () => []
  if (init.role === "trainer") {
    const lora = init.options.lora ?? defaultLora
    const engine = new LocalTrainerEngine(model, { lora, seed: seed + 1 })
    const ops: TrainerOps = {
      run: (data, loss, options) => engine.run(data, loss, options),
      commit: () => engine.commit(),
      discard: () => engine.discard(),
      optimStep: (adam, extra) => {
        for (const w of extra) engine.addGrads(w)
        return engine.optimStep(adam)
      },
      takeGradients: () => {
        const g = engine.gradients()
        engine.zeroGrad()
        return g
      },
      params: () => cloneWeights(engine.params),
      setParams: (weights) => {
        engine.setParams(weights)
        engine.zeroGrad()
      },
      publish: () => engine.publish(),
      saveState: (file) => engine.saveState(file),
      loadState: async (file, withOptimizer) => {
        await engine.loadState(file, withOptimizer)
        return engine.version
      },
    }
    handlers = ops
    transferOf = (op, value) =>
      op === "publish" ? buffersOf((value as PublishedAdapter).weights) : op === "takeGradients" || op === "params" ? buffersOf(value as Weights) : []
    info = { modelName: name, config: model.config, loraRank: lora.rank, version: engine.version }
  } else {
    const engine = new LocalSamplerEngine(model, {
      seed: seed + 2,
      ...(init.options.prefixCacheSize === undefined ? {} : { prefixCacheSize: init.options.prefixCacheSize }),
    })
    // the KL reference: an engine on the same frozen base that never gets an adapter (its
    // weights are the base tensors themselves, no copy; no prompt cache), built on first use
    let reference: LocalSamplerEngine | undefined
    const ops: SamplerOps = {
      sample: (prompt, params, options) => engine.sample(prompt, params, options),
      computeLogprobs: (tokens) => engine.computeLogprobs(tokens),
      referenceLogprobs: (seqs) => {
        reference ??= new LocalSamplerEngine(model, { prefixCacheSize: 0 })
        return seqs.map((tokens) => reference!.computeLogprobs(tokens))
      },
      setAdapter: (adapter) => {
        engine.setAdapter(adapter)
        return engine.version
      },
      stats: () => ({ ...engine.stats }),
    }
    handlers = ops
    info = { modelName: name, config: model.config, loraRank: 0, version: engine.version }
  }

  const reply = (message: WorkerMessage, transfer: Array<ArrayBuffer> = []) => port.postMessage(message, transfer)
  port.on("message", (request: WorkerRequest) => {
    const { id, op, args } = request
    const handler = handlers[op]
    if (!handler) return reply({ type: "reply", id, ok: false, message: `unknown operation ${op}` })
    // sample requests must not wait for each other: the engine batches the ones queued together
    new Promise<unknown>((resolve) => resolve(handler(...(args as Array<never>))))
      .then((value) => reply({ type: "reply", id, ok: true, value }, transferOf(op, value)))
      .catch((e: unknown) =>
        reply({ type: "reply", id, ok: false, message: messageOf(e), ...(e instanceof NonFiniteError ? { reason: "InvalidInput" as const } : {}) })
      )
  })
  reply({ type: "ready", info })
}

if (parentPort) {
  const port = parentPort
  start(port, workerData as WorkerInit).catch((e: unknown) => port.postMessage({ type: "failed", message: messageOf(e) } satisfies WorkerMessage))
}

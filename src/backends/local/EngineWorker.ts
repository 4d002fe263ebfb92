/**
 * The script of an engine worker thread: it loads the base model into its own tfjs-wasm
 * instance and serves one engine (the trainer or the sampler) over the thread's
 * message port, answering the messages of `WorkerProtocol.ts`. `EngineThread.ts` starts
 * it and talks to it.
 *
 * @since 0.1.0
 */
import { parentPort, workerData } from "node:worker_threads"
import * as Engines from "./Engines.ts"
import { NonFiniteError } from "./Errors.ts"
import { cloneWeights, defaultLora, type Weights } from "./Model.ts"
import type { LocalSamplerEngine } from "./SamplerEngine.ts"
import type { PublishedAdapter } from "./TrainerEngine.ts"
import type { SamplerOps, TrainerOps, WorkerInfo, WorkerInit, WorkerMessage, WorkerRequest } from "./WorkerProtocol.ts"

const messageOf = (e: unknown) => (e instanceof Error ? e.message : String(e))

/** The buffers of a set of weights, to transfer instead of copying. */
const buffersOf = (weights: Weights): Array<ArrayBuffer> => Object.values(weights).map((w) => w.buffer as ArrayBuffer)

const start = async (port: NonNullable<typeof parentPort>, init: WorkerInit) => {
  const { model, name } = await Engines.loadModel(init.options)
  const seed = init.options.seed ?? 0
  let handlers: Record<string, (...args: Array<never>) => unknown>
  let info: WorkerInfo
  let transferOf: (op: string, value: unknown) => Array<ArrayBuffer> = () => []
  if (init.role === "trainer") {
    const lora = init.options.lora ?? defaultLora
    const engine = Engines.trainerEngine(model, lora, seed)
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
    const engine = Engines.samplerEngine(model, seed, init.options.prefixCacheSize)
    // the KL reference, built on first use
    let reference: LocalSamplerEngine | undefined
    const ops: SamplerOps = {
      sample: (prompt, params, options) => engine.sample(prompt, params, options),
      computeLogprobs: (tokens) => engine.computeLogprobs(tokens),
      referenceLogprobs: (seqs) => {
        const base = (reference ??= Engines.referenceEngine(model))
        return seqs.map((tokens) => base.computeLogprobs(tokens))
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

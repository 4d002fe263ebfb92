/**
 * Where the embedded engines come from: the options of the embedded backend, the base
 * model they share (loaded from a folder, or random for tests), and the one place the
 * trainer and sampler engines are built with their seeds. In-process backends, worker
 * threads and `serve`'s per-model adapters all build their engines here.
 *
 * @since 0.1.0
 */
import * as tf from "@tensorflow/tfjs"
import "@tensorflow/tfjs-backend-wasm"
import * as Checkpoint from "./Checkpoint.ts"
import { initBase, LocalModel, type LoraConfig, type Weights } from "./Model.ts"
import type { LocalOptions } from "./Options.ts"
import { LocalSamplerEngine } from "./SamplerEngine.ts"
import { LocalTrainerEngine } from "./TrainerEngine.ts"

export type { LocalOptions } from "./Options.ts"

/** Where `saveState` writes when no `stateDir` is given. @since 0.1.0 @category constants */
export const DEFAULT_STATE_DIR = "runs/local-state"

let ready: Promise<void> | undefined

/** Selects the wasm backend once per process. @since 0.1.0 @category constructors */
export const initTf = (): Promise<void> => {
  ready ??= (async () => {
    if (tf.getBackend() !== "wasm") await tf.setBackend("wasm")
    await tf.ready()
  })()
  return ready
}

/** Loads or creates the base model named by the options. @since 0.1.0 @category constructors */
export const loadModel = async (options: LocalOptions): Promise<{ readonly model: LocalModel; readonly name: string }> => {
  await initTf()
  if (options.config && !options.modelDir) {
    const weights: Weights = initBase(options.config, options.seed ?? 0)
    return { model: new LocalModel(options.config, weights), name: "local:random" }
  }
  const dir = options.modelDir ?? "models/base"
  const { config, weights } = await Checkpoint.loadBaseModel(dir)
  return { model: new LocalModel(config, weights), name: `local:${dir}` }
}

/** The trainer engine of an adapter seeded by `seed` (its init stream is `seed + 1`). @since 0.1.0 @category constructors */
export const trainerEngine = (model: LocalModel, lora: LoraConfig, seed: number): LocalTrainerEngine =>
  new LocalTrainerEngine(model, { lora, seed: seed + 1 })

/**
 * Sampler engine number `replica` (0 first) of an adapter seeded by `seed`: its stream is
 * `seed + 2 + 1000 · replica`.
 * @since 0.1.0 @category constructors
 */
export const samplerEngine = (model: LocalModel, seed: number, prefixCacheSize: number | undefined, replica = 0): LocalSamplerEngine =>
  new LocalSamplerEngine(model, { seed: seed + 2 + 1000 * replica, ...(prefixCacheSize === undefined ? {} : { prefixCacheSize }) })

/**
 * The reference policy's engine: a sampler on the frozen base that is never given an
 * adapter (its merged weights are the base tensors themselves, so it holds no copy of
 * them) and keeps no prompt cache.
 * @since 0.1.0 @category constructors
 */
export const referenceEngine = (model: LocalModel): LocalSamplerEngine => new LocalSamplerEngine(model, { prefixCacheSize: 0 })

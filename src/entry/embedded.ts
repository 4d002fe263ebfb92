/**
 * gyre/embedded: the in-process backend, a small transformer with LoRA in TensorFlow.js,
 * as `Trainer | Sampler | Tokenizer` layers.
 *
 * @since 0.1.0
 */
import * as Local from "../backends/local/index.ts"
import { defaultModelDir } from "../Paths.ts"

export type {
  /** Options of the embedded backend: model folder or config, LoRA, seed, state folder, workers. */
  LocalOptions,
  /** A LoRA adapter: rank, alpha and the matrices it adapts. */
  LoraConfig,
  /** The shape of a model: vocabulary, context, layers, width, heads. */
  ModelConfig,
} from "../backends/local/index.ts"
/** The embedded backend: `Local.layer(options)` provides Trainer, Sampler and Tokenizer. */
export { Local } from "../backends/local/index.ts"
/** The folder of the base model shipped with gyre; a shipped model's folder by name; the shipped names. */
export { defaultModelDir, shippedModel, shippedModels } from "../Paths.ts"
/** The embedded backend behind the Tinker-protocol server, as `gyre serve` runs it (`Serve.layer(options)`, sampler replicas, one adapter per model). */
export * as Serve from "../backends/local/Serve.ts"

/** The embedded backend's layer, on gyre's shipped base model unless `modelDir` or `config` is given. */
export const layer = (options: Local.LocalOptions = {}) =>
  Local.layer(options.modelDir === undefined && options.config === undefined ? { ...options, modelDir: defaultModelDir } : options)

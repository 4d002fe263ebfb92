/**
 * gyre/embedded: the in-process backend, a small transformer with LoRA in TensorFlow.js,
 * as `Trainer | Sampler | Tokenizer` layers.
 *
 * Its declarations name only gyre's and Effect's types, never TensorFlow.js's: a project
 * that typechecks its dependencies (`skipLibCheck: false`) does not check tfjs, WebGPU or
 * DOM declarations because it imports this module.
 *
 * @since 0.1.0
 */
import type { Layer } from "effect"
import * as LocalBackend from "../backends/local/index.ts"
import type { LocalOptions } from "../backends/local/Options.ts"
import type { BackendError } from "../contract/Contract.ts"
import { defaultModelDir } from "../Paths.ts"
import type { Reference } from "../services/Reference.ts"
import type { Sampler } from "../services/Sampler.ts"
import type { Tokenizer } from "../services/Tokenizer.ts"
import type { Trainer } from "../services/Trainer.ts"

/** Options of the embedded backend: model folder or config, LoRA, seed, state folder, workers. */
export type { LocalOptions } from "../backends/local/Options.ts"
export type {
  /** A LoRA adapter: rank, alpha and the matrices it adapts. */
  LoraConfig,
  /** The shape of a model: vocabulary, context, layers, width, heads. */
  ModelConfig,
} from "../backends/local/Config.ts"
/** The folder of the base model shipped with gyre; a shipped model's folder by name; the shipped names. */
export { defaultModelDir, shippedModel, shippedModels } from "../Paths.ts"
/** The embedded backend behind the Tinker-protocol server, as `gyre serve` runs it (`Serve.layer(options)`, sampler replicas, one adapter per model). */
export * as Serve from "../backends/local/Serve.ts"

/** What the embedded backend provides. */
export type Services = Trainer | Sampler | Tokenizer | Reference

/** The embedded backend: `Local.layer(options)` provides Trainer, Sampler, Tokenizer and Reference. */
export const Local: {
  readonly layer: (options?: LocalOptions) => Layer.Layer<Services, BackendError>
} = { layer: LocalBackend.layer }

/** The embedded backend's layer, on gyre's shipped base model unless `modelDir` or `config` is given. */
export const layer = (options: LocalOptions = {}): Layer.Layer<Services, BackendError> =>
  LocalBackend.layer(options.modelDir === undefined && options.config === undefined ? { ...options, modelDir: defaultModelDir } : options)

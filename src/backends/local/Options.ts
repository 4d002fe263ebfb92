/**
 * The options of the embedded backend, apart from its engines (which load TensorFlow.js):
 * the public declarations of `gyre/embedded` name only these and other gyre types.
 *
 * @since 0.1.0
 */
import type { Duration } from "effect"
import type { LoraConfig, ModelConfig } from "./Config.ts"

/** @since 0.1.0 @category models */
export interface LocalOptions {
  /** directory with `config.json` + `weights.bin` (default "models/base"; ignored when `config` is given without it) */
  readonly modelDir?: string
  /** a model config for random initialisation (tests); used when no `modelDir` is given */
  readonly config?: ModelConfig
  readonly lora?: LoraConfig
  /** seeds the adapter init, the random base (with `config`) and the sampler's stream */
  readonly seed?: number
  /** where `saveState` writes (default "runs/local-state") */
  readonly stateDir?: string
  /** K/V entries the sampler keeps: prompts and finished turns (default 256; 0 disables) */
  readonly prefixCacheSize?: number
  /**
   * in this thread only: sampler engines (default 1), each with its own KV and prefix
   * cache on the shared base weights, all given every publication
   */
  readonly replicas?: number | undefined
  /** `layer` only: run the trainer and the sampler in their own worker threads (see `Workers.ts`) */
  readonly workers?: boolean
  /** with `workers`: threads that share each forward(-backward) call (default 1) */
  readonly trainerThreads?: number
  /**
   * how long a request pinned to a policy version (`minPolicyVersion`) waits for it to be
   * published before failing with reason `Timeout` (default 1 hour, as Loops' `ready_timeout`)
   */
  readonly readyTimeout?: Duration.Input
}

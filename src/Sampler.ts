/**
 * The Sampler service: samples completions from the latest published policy version.
 *
 * @since 0.1.0
 */
import { Context, type Effect } from "effect"
import type { BackendError, ModelInput, SampleOptions, SampleResult, SamplingParams } from "./Contract.ts"

/** @since 0.1.0 @category models */
export interface SamplerShape {
  /**
   * Samples `options.numSamples` completions of `prompt`. With `minPolicyVersion` it
   * waits until the sampler serves at least that version (a pinned sampling client).
   */
  readonly sample: (
    prompt: ModelInput,
    params: SamplingParams,
    options: SampleOptions,
  ) => Effect.Effect<SampleResult, BackendError>
  /** log p(x_i | x_<i) for every position (position 0 is 0), under the served version */
  readonly computeLogprobs: (
    input: ModelInput,
    options?: { readonly minPolicyVersion?: number },
  ) => Effect.Effect<Array<number>, BackendError>
  /** the policy version served now */
  readonly version: Effect.Effect<number, BackendError>
}

/** @since 0.1.0 @category services */
export class Sampler extends Context.Service<Sampler, SamplerShape>()("gyre/Sampler") {}

/**
 * The Sampler service: samples completions from the latest published policy version, and
 * the wait for a published policy version that every backend's pinned sampling shares.
 *
 * @since 0.1.0
 */
import { Context, Duration, Effect, Option, Stream, SubscriptionRef } from "effect"
import { BackendError, type ModelInput, type SampleOptions, type SampleResult, type SamplingParams } from "../contract/Contract.ts"

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

/**
 * How long a request pinned to a policy version waits for that version to be published
 * before it fails with reason `Timeout`: one hour, as the Loops trainer's `ready_timeout`.
 * @since 0.1.0 @category constants
 */
export const DEFAULT_READY_TIMEOUT: Duration.Duration = Duration.hours(1)

/**
 * Waits until `published` reaches `min` (a pinned sampling client); returns at once when it
 * already has, or when no version is asked for. Fails with reason `Timeout`, naming the
 * version waited for and the version served, once `readyTimeout` passes.
 * @since 0.1.0 @category combinators
 */
export const awaitVersion = Effect.fnUntraced(function* (
  published: SubscriptionRef.SubscriptionRef<number>,
  operation: string,
  min: number | undefined,
  readyTimeout: Duration.Input = DEFAULT_READY_TIMEOUT,
) {
  if (min === undefined || (yield* SubscriptionRef.get(published)) >= min) return
  yield* Effect.logDebug(`${operation}: waiting for policy version ${min}`)
  const reached = yield* SubscriptionRef.changes(published).pipe(
    Stream.filter((v) => v >= min),
    Stream.take(1),
    Stream.runDrain,
    Effect.timeoutOption(readyTimeout),
  )
  if (Option.isNone(reached)) {
    const served = yield* SubscriptionRef.get(published)
    return yield* new BackendError({
      reason: "Timeout",
      operation,
      message:
        `waited ${Duration.format(Duration.fromInputUnsafe(readyTimeout))} for policy version ${min}, but the sampler still serves version ${served}: ` +
        "the trainer never published it (raise the ready timeout if publishing is just slow)",
    })
  }
})

/**
 * An episode worker's own sampling on a Tinker-protocol service: the worker samples the
 * sampler weights the run last published (their `tinker://` path, which the main thread
 * sends with each job) over its own connection, so the sample requests, their polling and
 * the decoding of their answers run on the worker, not on the main thread. The requests
 * are the main thread's own (`ClientSampler`): the same seed, affinity key and pinned
 * policy version, addressed by `model_path` instead of the main client's sampling session.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { HttpClient } from "effect/http"
import * as Calls from "../../backends/http/client/Calls.ts"
import { apiKeyConfig } from "../../backends/http/client/Client.ts"
import * as ClientSampler from "../../backends/http/client/ClientSampler.ts"
import type { State } from "../../backends/http/client/ClientTrainer.ts"
import * as Retry from "../../backends/http/client/Retry.ts"
import * as Transport from "../../backends/http/client/Transport.ts"
import { DEFAULT_READY_TIMEOUT, type SamplerShape } from "../../services/Sampler.ts"

/** The service a worker samples from itself. @since 0.1.0 @category models */
export interface DirectSampling {
  readonly baseUrl: string
  /** the `X-Gyre-Wait-Ms` of each sample request (0: none, as on Tinker); default 20 s, as the client's */
  readonly submitWaitMillis?: number | undefined
}

/** Published sampler weights: their policy version and `tinker://` path. @since 0.1.0 @category models */
export interface Target {
  readonly version: number
  readonly path: string
}

/**
 * Connects to the service; returns the sampler of a published target (one per target,
 * kept). Needs an `HttpClient`.
 * @since 0.1.0 @category constructors
 */
export const make = Effect.fn("EpisodeWorkers.direct")(function* (options: DirectSampling) {
  const http = yield* HttpClient.HttpClient
  const transport = Transport.make({ http, base: new URL(options.baseUrl), apiKey: yield* apiKeyConfig })
  const calls = yield* Calls.make(transport, {
    policy: Retry.standard,
    requestTimeout: "60 seconds",
    pollTimeout: "45 seconds",
    submitWaitMillis: options.submitWaitMillis ?? 20_000,
  })
  const samplers = new Map<string, SamplerShape>()
  return (target: Target): SamplerShape => {
    const known = samplers.get(target.path)
    if (known !== undefined) return known
    // only `published` is read when sampling: the model path to sample, and its version
    const state: State = {
      modelId: "",
      baseModel: "",
      loraRank: undefined,
      maxContext: undefined,
      trainerVersion: target.version,
      published: { version: target.version, modelPath: target.path },
      samplerSeq: 0,
      samplerIds: 0,
    }
    const sampler = ClientSampler.make(calls, state, { readyTimeout: DEFAULT_READY_TIMEOUT })
    samplers.set(target.path, sampler)
    return sampler
  }
})

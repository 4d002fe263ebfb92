/**
 * The Loops data plane: how gyre trains and samples on a provisioned run. This is the
 * one module that holds an assumption rather than documentation.
 *
 * Documented: a run's `base_url` serves its trainer and the paired sampler's
 * `base_url` serves the sampler (`LoopsRunV1`, `LoopsSamplerV1`); the SDK binds to a
 * trainer and a sampler by those two URLs (`ServiceClient.local(trainer_url,
 * sampler_url)`), and its forward pass, backward pass, optimizer step and sampling are
 * "identical" to Tinker's at the SDK level.
 *
 * Assumed (not documented by Loops): the wire under those URLs is Tinker's HTTP
 * protocol (JSON routes under `/api/v1`, futures polled with `retrieve_future`, the
 * key in `X-API-Key`, a future that expired answered with 410), spoken by gyre's
 * Tinker-protocol client (`backends/http/Client.ts`) with the trainer at the run's URL
 * and the sampler at the sampler's. When Loops documents its own wire, this module is
 * what changes: it maps a run to a `Trainer`, `Sampler` and `Reference`.
 *
 * @since 0.1.0
 */
import type { Duration, Redacted } from "effect"
import * as Http from "../http/Client.ts"
import type * as Retry from "../http/Retry.ts"
import type { ReadyRun } from "./Provision.ts"

/** @since 0.1.0 @category models */
export interface Options {
  /** the Baseten API key; the data plane gets the same key as the control plane */
  readonly apiKey: Redacted.Redacted<string>
  /** LoRA rank of the trained adapter (the run's `lora_rank`) */
  readonly loraRank?: number | undefined
  /** the data plane's retry policy (default the Tinker SDK's) */
  readonly retry?: Retry.Policy | undefined
  /** how long a sample pinned to a policy version waits for it */
  readonly readyTimeout?: Duration.Input | undefined
}

/**
 * The Tinker-protocol client options for a run: the trainer at `run.base_url`, the
 * sampler at the paired sampler's `base_url`.
 *
 * @example
 * ```ts
 * clientOptions(run, { apiKey })
 * // => { baseUrl: run.trainerUrl, samplerBaseUrl: run.samplerUrl, baseModel: run.baseModel, ... }
 * ```
 * @since 0.1.0 @category combinators
 */
export const clientOptions = (run: ReadyRun, options: Options): Http.Options => ({
  baseUrl: run.trainerUrl,
  samplerBaseUrl: run.samplerUrl,
  baseModel: run.baseModel,
  loraRank: options.loraRank,
  apiKey: options.apiKey,
  tags: [`loops-run:${run.id}`],
  ...(options.retry !== undefined ? { retry: options.retry } : {}),
  ...(options.readyTimeout !== undefined ? { readyTimeout: options.readyTimeout } : {}),
})

/**
 * `Trainer | Sampler | Reference` on a run's data plane, given an `HttpClient` (the
 * client's session heartbeat lives as long as the layer).
 * @since 0.1.0 @category layers
 */
export const layer = (run: ReadyRun, options: Options) => Http.layerNoDeps(clientOptions(run, options))

/** The data plane's services and their session, in a scope. @since 0.1.0 @category constructors */
export const make = (run: ReadyRun, options: Options) => Http.make(clientOptions(run, options))

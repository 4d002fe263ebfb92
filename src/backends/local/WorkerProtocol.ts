/**
 * The messages between the main thread and an engine worker thread: what each worker
 * does by operation name, how it is started, what it reports, and the request and reply
 * shapes. `EngineWorker.ts` serves them, `EngineThread.ts` sends them.
 *
 * Requests are `{ id, op, args }`; every request gets one reply `{ id, ok, value }` or
 * `{ id, ok: false, message }`. Replies may come out of order: sample requests are
 * queued and batched by the engine while other requests are answered.
 *
 * @since 0.1.0
 */
import type { AdamParams, Datum, ForwardBackwardResult, OptimStepResult, SampleResult, SamplingParams } from "../../contract/Contract.ts"
import type { ResolvedLoss } from "../../loss/Loss.ts"
import type { LocalOptions } from "./Engines.ts"
import type { ModelConfig, Weights } from "./Model.ts"
import type { SampleRequestOptions, SamplerStats } from "./SamplerEngine.ts"
import type { PublishedAdapter } from "./TrainerEngine.ts"

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

/**
 * The Trainer service: a Loops/Tinker-style training client for one LoRA model.
 *
 * `forwardBackward` accumulates gradients, `optimStep` applies them and bumps the
 * policy version, `saveWeightsForSampler` publishes the adapter to the paired sampler.
 *
 * @since 0.1.0
 */
import { Context, type Effect } from "effect"
import type {
  AdamParams,
  BackendError,
  Datum,
  ForwardBackwardResult,
  ForwardOptions,
  LossFn,
  OptimStepResult,
} from "./Contract.ts"

/** @since 0.1.0 @category models */
export interface TrainerInfo {
  readonly modelName: string
  readonly loraRank: number
  /** policy version: the number of optimizer steps applied */
  readonly version: number
  readonly maxSequenceLength: number
}

/** @since 0.1.0 @category models */
export interface TrainerShape {
  readonly forwardBackward: (
    data: ReadonlyArray<Datum>,
    lossFn: LossFn,
    options?: ForwardOptions,
  ) => Effect.Effect<ForwardBackwardResult, BackendError>
  /** the same loss without gradients; the accumulated gradients are left alone */
  readonly forward: (
    data: ReadonlyArray<Datum>,
    lossFn: LossFn,
    options?: ForwardOptions,
  ) => Effect.Effect<ForwardBackwardResult, BackendError>
  /**
   * applies the accumulated gradients and clears them. A step the backend refuses
   * (reason `InvalidInput`: a non-finite gradient, an update that overflows float32)
   * changes no weight and no optimizer state, and drops the accumulated gradient, so
   * the next `forwardBackward` + `optimStep` trains
   */
  readonly optimStep: (adam: AdamParams) => Effect.Effect<OptimStepResult, BackendError>
  /** publishes the current weights to the sampler; returns the version it will serve */
  readonly saveWeightsForSampler: (name: string) => Effect.Effect<{ readonly version: number; readonly path: string }, BackendError>
  /** writes adapter + optimizer state; returns where */
  readonly saveState: (name: string) => Effect.Effect<{ readonly path: string }, BackendError>
  readonly loadState: (path: string, options?: { readonly withOptimizer?: boolean }) => Effect.Effect<void, BackendError>
  readonly info: Effect.Effect<TrainerInfo, BackendError>
}

/** @since 0.1.0 @category services */
export class Trainer extends Context.Service<Trainer, TrainerShape>()("gyre/Trainer") {}

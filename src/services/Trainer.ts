/**
 * The Trainer service: a Loops/Tinker-style training client for one LoRA model.
 *
 * `forwardBackward` accumulates gradients, `optimStep` applies them and bumps the
 * policy version, `saveWeightsForSampler` publishes the adapter to the paired sampler.
 *
 * A remote trainer that queues work (Tinker's clock cycles, Loops' operations) also
 * offers `submit`: the same calls, each succeeding once the call is queued with the
 * effect that awaits its result, so a step's calls travel back to back and run in one
 * cycle. `submitter` gives every trainer that shape: one without `submit` runs each call
 * when it is submitted.
 *
 * @since 0.1.0
 */
import { Context, Effect } from "effect"
import type {
  AdamParams,
  BackendError,
  Datum,
  ForwardBackwardResult,
  ForwardOptions,
  LossFn,
  OptimStepResult,
} from "../contract/Contract.ts"

/** @since 0.1.0 @category models */
export interface TrainerInfo {
  readonly modelName: string
  readonly loraRank: number
  /** policy version: the number of optimizer steps applied */
  readonly version: number
  readonly maxSequenceLength: number
  /** the model's vocabulary size, when the backend knows it: token ids from it up are outside the model */
  readonly vocabSize?: number | undefined
  /** the model's tokenizer as the backend names it (Tinker's `model_data.tokenizer_id`), when it does */
  readonly tokenizerId?: string | undefined
}

/** @since 0.1.0 @category models */
export interface TrainerShape {
  /**
   * the losses this trainer computes itself; absent: every loss but `gspo`, which the
   * runner then trains as a custom loss (`CustomLoss.gspo`) through the others
   */
  readonly losses?: ReadonlyArray<LossFn> | undefined
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
  /** the training calls, submitted without awaiting them (a backend that queues work) */
  readonly submit?: Submitter | undefined
}

/**
 * A call that was submitted: running it awaits the call's result (running it again gives
 * the same result). Calls run in the order they were submitted, awaited or not.
 * @since 0.1.0 @category models
 */
export type Pending<A> = Effect.Effect<A, BackendError>

/** The training calls of a step, submitted in order and awaited later. @since 0.1.0 @category models */
export interface Submitter {
  readonly forwardBackward: (data: ReadonlyArray<Datum>, lossFn: LossFn, options?: ForwardOptions) => Effect.Effect<Pending<ForwardBackwardResult>, BackendError>
  readonly optimStep: (adam: AdamParams) => Effect.Effect<Pending<OptimStepResult>, BackendError>
  readonly saveWeightsForSampler: (name: string) => Effect.Effect<Pending<{ readonly version: number; readonly path: string }>, BackendError>
}

/**
 * A submitting call as one awaited at once: what a backend with `submit` gives as its
 * plain `forwardBackward`, `optimStep` and `saveWeightsForSampler`.
 * @since 0.1.0 @category combinators
 */
export const awaitingEach =
  <Args extends ReadonlyArray<unknown>, A>(submit: (...args: Args) => Effect.Effect<Pending<A>, BackendError>) =>
  (...args: Args): Effect.Effect<A, BackendError> =>
    Effect.flatten(submit(...args))

/**
 * The trainer's `submit`, or, for a trainer that runs each call when asked (the embedded
 * one), calls that run at submission and hand back their result: the same order, and
 * the same numbers.
 * @since 0.1.0 @category combinators
 */
export const submitter = (trainer: TrainerShape): Submitter =>
  trainer.submit ?? {
    forwardBackward: (data, lossFn, options) => Effect.map(trainer.forwardBackward(data, lossFn, options), Effect.succeed),
    optimStep: (adam) => Effect.map(trainer.optimStep(adam), Effect.succeed),
    saveWeightsForSampler: (name) => Effect.map(trainer.saveWeightsForSampler(name), Effect.succeed),
  }

/** @since 0.1.0 @category services */
export class Trainer extends Context.Service<Trainer, TrainerShape>()("gyre/Trainer") {}

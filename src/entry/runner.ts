/**
 * gyre/runner: run a training, or score a model, from code. The same code path as
 * `gyre run` and `gyre eval`.
 *
 * @example
 * import { runTraining } from "gyre/runner"
 * import myEnv from "./envs/mine.ts"
 *
 * const summary = await runTraining({ env: myEnv, steps: 20, name: "try" })
 * console.log(summary.outDir, summary.heldOut)
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { evaluateModel, type EvalOptions, type EvalSummary } from "../app/Evaluation.ts"
import { type RunOptions, type RunSummary, train } from "../app/Training.ts"

export type {
  /** Scores a model on an env: which checkpoint, which problems, how many samples. */
  EvalOptions,
  /** What an evaluation returns: the eval.jsonl written and an interval per component. */
  EvalSummary,
  /** A component's mean with its 95% interval (Wilson for 0/1 scores, else normal). */
  Interval,
  /** Which problems an evaluation scores: held-out, training, or both. */
  EvalSplit,
  /** pass@k and maj@k of one env's problems, each with its 95% bootstrap interval. */
  EnvAttempts,
} from "../app/Evaluation.ts"
export type {
  /** One scored sample as pass@k and maj@k read it: correct or not, and its answer. */
  Sample,
  /** A pass@k or maj@k mean over problems with its 95% bootstrap interval. */
  Estimate,
} from "../metrics/PassAtK.ts"
/** pass@k (the unbiased estimator), maj@k (majority vote) and their means over problems with bootstrap intervals. */
export { bootstrapMean, estimates, majAtK, normalizeAnswer, passAtK } from "../metrics/PassAtK.ts"
export type {
  /** Every `gyre run` flag as a field of an object, plus the env itself. */
  RunOptions,
  /** What a finished run returns: its folder, settings, metrics and last held-out score. */
  RunSummary,
} from "../app/Training.ts"
/** Runs a training (RL, or SFT with `sft: true`) as an Effect; what `gyre run` does. */
export { train } from "../app/Training.ts"
/** Scores the base model or a run's checkpoint as an Effect; what `gyre eval` does. */
export { evaluateModel } from "../app/Evaluation.ts"
/** A 95% interval of a mean: Wilson's for 0/1 values, else the normal approximation. */
export { interval } from "../app/Evaluation.ts"
/** The settings a run is configured with (`config.json`), its defaults, its error, and the loop itself. */
export { defaults, Progress, run, RunError, RunSettings } from "../Runner.ts"

/** Runs a training and resolves to its summary; rejects with the run's error (its `message` says what to do). */
export const runTraining = (options: RunOptions): Promise<RunSummary> => Effect.runPromise(train(options))

/** Scores a model and resolves to the evaluation's summary; rejects with the error. */
export const runEvaluation = (options: EvalOptions): Promise<EvalSummary> => Effect.runPromise(evaluateModel(options))

/**
 * Observers of a run: what the runner tells besides its own files. Each metrics row as
 * `metrics.jsonl` gets it (step 0: the base evaluation), and each step's scored samples.
 * The default observes nothing; `--tensorboard` writes them as TensorBoard events
 * (`observe/TensorBoard.ts`).
 *
 * @since 0.1.0
 */
import { Context, Effect } from "effect"
import type { MetricRecord } from "../Metrics.ts"

/** One scored sample, as an observer sees it. @since 0.1.0 @category models */
export interface ObservedSample {
  readonly prompt: unknown
  readonly completion: string
  /** null when masked */
  readonly reward: number | null
}

/** @since 0.1.0 @category models */
export interface RunObserverShape {
  readonly onMetrics: (row: MetricRecord & { readonly step: number }) => Effect.Effect<void>
  /** step `step`'s samples (1-based, as rollouts.jsonl numbers steps) */
  readonly onSamples: (step: number, samples: ReadonlyArray<ObservedSample>) => Effect.Effect<void>
}

/** The run's observer (default: none). @since 0.1.0 @category services */
export const RunObserver = Context.Reference<RunObserverShape>("gyre/run/Observer", {
  defaultValue: () => ({ onMetrics: () => Effect.void, onSamples: () => Effect.void }),
})

/** Several observers as one: each hears everything, in order. @since 0.1.0 @category combinators */
export const combine = (observers: ReadonlyArray<RunObserverShape>): RunObserverShape => ({
  onMetrics: (row) => Effect.forEach(observers, (o) => o.onMetrics(row), { discard: true }),
  onSamples: (step, samples) => Effect.forEach(observers, (o) => o.onSamples(step, samples), { discard: true }),
})

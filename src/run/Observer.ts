/**
 * Observers of a run: what the runner tells besides its own files. Each metrics row as
 * `metrics.jsonl` gets it (step 0: the base evaluation), each step's scored samples, and
 * the end of each step. The default observes nothing; the CLI adds the HTML report
 * (`Report.observer`), and with `--tensorboard` and `--otlp` their writers.
 *
 * @since 0.1.0
 */
import { Context, Effect } from "effect"
import type { MetricRecord } from "../metrics/Metrics.ts"

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
  /** step `step`'s samples (1-based, as rollouts.jsonl numbers steps); absent: the runner does not gather them */
  readonly onSamples?: ((step: number, samples: ReadonlyArray<ObservedSample>) => Effect.Effect<void>) | undefined
  /** step `step` (1-based) is done: logged, evaluated when `evaluated`, checkpointed when due */
  readonly onStepEnd?: ((end: { readonly step: number; readonly steps: number; readonly evaluated: boolean }) => Effect.Effect<void>) | undefined
}

/** The run's observer (default: none). @since 0.1.0 @category services */
export const RunObserver = Context.Reference<RunObserverShape>("gyre/run/Observer", {
  defaultValue: () => ({ onMetrics: () => Effect.void }),
})

/** Several observers as one: each hears everything, in order. @since 0.1.0 @category combinators */
export const combine = (observers: ReadonlyArray<RunObserverShape>): RunObserverShape => ({
  onMetrics: (row) => Effect.forEach(observers, (o) => o.onMetrics(row), { discard: true }),
  ...(observers.some((o) => o.onSamples !== undefined)
    ? { onSamples: (step, samples) => Effect.forEach(observers, (o) => o.onSamples?.(step, samples) ?? Effect.void, { discard: true }) }
    : {}),
  onStepEnd: (end) => Effect.forEach(observers, (o) => o.onStepEnd?.(end) ?? Effect.void, { discard: true }),
})

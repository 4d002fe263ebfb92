/**
 * What a run's spans say about where they belong, so a trace collector can group them: the
 * step a span works for (`gyre.step`: 1-based, 0 the base evaluation) and the phase of the
 * run it is part of (`gyre.phase`). The runner sets the step around each step's work
 * (`atStep`); the phase of a span is that of the nearest phase span above it (`PHASES`),
 * which the OTLP tracer fills in (`observe/SpanAttributes.ts`).
 *
 * @since 0.1.0
 */
import { Effect } from "effect"

/** The attribute naming the step a span works for. @since 0.1.0 @category constants */
export const STEP = "gyre.step"

/** The attribute naming the phase of the run a span is part of. @since 0.1.0 @category constants */
export const PHASE = "gyre.phase"

/**
 * Every span `effect` makes, and those of the fibers it starts, carries `gyre.step` = `step`
 * (1-based; 0 for the base evaluation).
 * @since 0.1.0 @category combinators
 */
export const atStep = (step: number) => <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> => Effect.annotateSpans(effect, STEP, step)

/**
 * The phase each of the runner's spans begins, by span name; the spans below one inherit
 * it until another phase begins. A step's own span is its sampling (`Steps.startStep`) or
 * the wait for its training (`Steps.completeStep`) until a narrower phase begins.
 * @since 0.1.0 @category constants
 */
export const PHASES: Readonly<Record<string, string>> = {
  "Settings.check": "open",
  "Runner.open": "open",
  "Runner.evaluateBase": "evaluate",
  "Steps.startStep": "sample",
  "Pipeline.take": "sample",
  "Pipeline.ahead": "sample",
  "Collect.collect": "sample",
  "Steps.submitTraining": "train",
  "Train.advantages": "train",
  "Train.datums": "train",
  "Train.submitOptimize": "train",
  "Train.submitOptimStep": "train",
  "Train.submitPublish": "train",
  "Steps.completeStep": "train",
  "HackWatch.observe": "hack_watch",
  "Evaluate.evaluate": "evaluate",
  "Steps.logStep": "log",
  "Steps.checkpoint": "checkpoint",
}

/**
 * What the runner reports while it runs: one summary per step, and phases within a step.
 *
 * @since 0.1.0
 */
import { Context, Effect } from "effect"
import * as Metrics from "../Metrics.ts"

/** What the runner reports after each step (the CLI renders it). @since 0.1.0 @category models */
export interface StepSummary {
  readonly step: number
  readonly steps: number
  readonly metrics: Metrics.MetricRecord
}

/** Hooks for progress output; the default logs one line per step. @since 0.1.0 @category services */
export const Progress = Context.Reference<{
  readonly onStep: (summary: StepSummary) => Effect.Effect<void>
  readonly onPhase: (phase: { readonly step: number; readonly steps: number; readonly phase: string; readonly done: number; readonly total: number }) => Effect.Effect<void>
}>("gyre/Runner/Progress", {
  defaultValue: () => ({
    onStep: (s) => Effect.logInfo(formatStep(s)),
    onPhase: () => Effect.void,
  }),
})

/**
 * One progress line: train reward (and train `correct` where the env has it), mixed
 * groups, throughput, step time, and on evaluation steps the held-out score named for
 * what it is (`held-out correct`, else `held-out reward`).
 * @since 0.1.0 @category formatting
 */
export const formatStep = ({ step, steps, metrics: m }: StepSummary): string => {
  const f = (k: string, digits = 3) => (m[k] === undefined ? "-" : m[k]!.toFixed(digits))
  const acc = m["env/all/correct"] !== undefined ? ` correct ${f("env/all/correct")}` : ""
  const held = Metrics.heldOutScore(m)
  const evalPart = held !== undefined ? ` | ${held.label} ${held.value.toFixed(3)}` : ""
  return `step ${step + 1}/${steps} | reward ${f("env/all/reward/total")}${acc} | mixed ${f("by_group/frac_mixed", 2)} | ${Math.round(m["throughput/tokens_per_s"] ?? 0)} tok/s | ${f("time/total", 2)}s${evalPart}`
}


/**
 * Terminal progress: a live status line during each step (phase, done/total, ETA for
 * the run) and one permanent line per step.
 */
import { Effect } from "effect"
import * as Runner from "../Runner.ts"

const fmtDuration = (seconds: number) => {
  if (!Number.isFinite(seconds) || seconds < 0) return "?"
  const m = Math.floor(seconds / 60)
  const s = Math.round(seconds % 60)
  return m > 0 ? `${m}m${String(s).padStart(2, "0")}s` : `${s}s`
}

/** Progress hooks that draw on stderr when it is a terminal and print step lines on stdout. */
export const terminalProgress = (out: NodeJS.WriteStream = process.stdout, err: NodeJS.WriteStream = process.stderr) => {
  const started = performance.now()
  let stepsDone = 0
  let firstStep: number | undefined
  const live = err.isTTY === true
  const eta = (step: number, steps: number) => {
    if (firstStep === undefined || stepsDone === 0) return "?"
    const perStep = (performance.now() - started) / 1000 / stepsDone
    return fmtDuration(perStep * (steps - step))
  }
  return {
    onPhase: ({ step, steps, phase, done, total }: { step: number; steps: number; phase: string; done: number; total: number }) =>
      Effect.sync(() => {
        if (!live) return
        const width = 20
        const filled = Math.round((done / Math.max(1, total)) * width)
        err.write(`\r\x1b[2K step ${step + 1}/${steps} [${"#".repeat(filled)}${".".repeat(width - filled)}] ${phase} ${done}/${total} | ETA ${eta(step, steps)}`)
      }),
    onStep: (summary: Runner.StepSummary) =>
      Effect.sync(() => {
        firstStep ??= summary.step
        stepsDone++
        if (live) err.write("\r\x1b[2K")
        out.write(`${Runner.formatStep(summary)} | ETA ${eta(summary.step + 1, summary.steps)}\n`)
      }),
  }
}

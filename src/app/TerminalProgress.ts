/**
 * Terminal progress: a live status line during each step (phase, done/total, ETA for
 * the run) and one permanent line per step; a run that prints (`gyre run`, or
 * `train({ print: true })`) provides it as its `Progress`.
 *
 * @since 0.1.0
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
  // ETA from the last 50 steps: step times change as the policy changes (shorter answers).
  const recent: Array<number> = []
  let lastAt = performance.now()
  const live = err.isTTY === true
  const eta = (step: number, steps: number) => {
    if (recent.length === 0) return "?"
    const perStep = recent.reduce((a, b) => a + b, 0) / recent.length
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
        const now = performance.now()
        recent.push((now - lastAt) / 1000)
        if (recent.length > 50) recent.shift()
        lastAt = now
        if (live) err.write("\r\x1b[2K")
        out.write(`${Runner.formatStep(summary)} | ETA ${eta(summary.step + 1, summary.steps)}\n`)
      }),
  }
}

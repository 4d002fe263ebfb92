/**
 * The watch over masked steps: a step that masked more than `maxMasked` of its samples (a
 * judge, a tool server down) trained on little. A short outage (a server restarting for a
 * few seconds) must not stop a run, and one that lasts must not let it train on nothing
 * for hours. So, after such a step the run waits before the next one (1 s, doubled after
 * each such step in a row, at most 8 s), and it stops once they have lasted both
 * `steps` steps in a row and `lasting` seconds (3 and 30 s): an outage that does not end
 * stops a run of quick steps after about 31 s, of steps up to 10 s within a minute, and
 * one of up to 5 s never stops a run of steps up to 20 s.
 *
 * At the run's end, the steps that masked more than `maxMasked` are counted: some give a
 * warning, more than half of the steps run fail the run (it trained on little, whatever
 * its last step says).
 *
 * The rule is pure (`next`, `verdict`), so its laws are tested without a clock.
 *
 * @since 0.1.0
 */
import { Context, Duration } from "effect"
import { cappedDoubling } from "../util/Backoff.ts"

/** How long masked steps are borne, and the waits between them. @since 0.1.0 @category models */
export interface Patience {
  /** steps in a row over `maxMasked`, at least, before the run stops */
  readonly steps: number
  /** and for at least this long, from the end of the first of them */
  readonly lasting: Duration.Input
  /** the wait after the first such step, doubled after each one in a row */
  readonly firstWait: Duration.Input
  /** the longest wait */
  readonly maxWait: Duration.Input
}

/** @since 0.1.0 @category constants */
export const DEFAULT_PATIENCE: Patience = { steps: 3, lasting: "30 seconds", firstWait: "1 second", maxWait: "8 seconds" }

/**
 * The patience of the run's masked-step watch (default {@link DEFAULT_PATIENCE}); a test
 * provides a shorter one.
 * @since 0.1.0 @category services
 */
export const MaskedPatience = Context.Reference<Patience>("gyre/Runner/MaskedPatience", { defaultValue: () => DEFAULT_PATIENCE })

/** What the watch has seen. @since 0.1.0 @category models */
export interface Watch {
  /** steps over the bound in a row, up to the last one */
  readonly streak: number
  /** when the first step of the streak ended (ms) */
  readonly since: number
  /** steps this run (this call) completed, and those of them over the bound */
  readonly ran: number
  readonly over: number
  /** why samples of the steps over the bound were masked, and how often */
  readonly reasons: Readonly<Record<string, number>>
}

/** @since 0.1.0 @category constants */
export const empty: Watch = { streak: 0, since: 0, ran: 0, over: 0, reasons: {} }

/** What to do after a step. @since 0.1.0 @category models */
export type Decision =
  | { readonly _tag: "Go" }
  | { readonly _tag: "Wait"; readonly millis: number }
  | { readonly _tag: "Stop"; readonly seconds: number }

/** One completed step, as the watch sees it. @since 0.1.0 @category models */
export interface StepSeen {
  /** why each masked sample was masked */
  readonly masked: ReadonlyArray<string>
  readonly samples: number
  /** `maxMasked`: a step over it counts (1: none ever does) */
  readonly bound: number
  /** when the step ended (ms) */
  readonly now: number
}

/** The wait after the `streak`-th step over the bound in a row. @since 0.1.0 @category estimators */
export const waitAfter = (patience: Patience, streak: number): number =>
  cappedDoubling(Duration.toMillis(Duration.fromInputUnsafe(patience.firstWait)), Duration.toMillis(Duration.fromInputUnsafe(patience.maxWait)), streak)

/** Whether a step over `bound` masked: more than that fraction of its samples. @since 0.1.0 @category estimators */
export const isOver = (masked: number, samples: number, bound: number): boolean => bound < 1 && samples > 0 && masked / samples > bound

/**
 * The watch after one more step, and what to do: go on, wait before the next step, or stop.
 * @since 0.1.0 @category estimators
 */
export const next = (watch: Watch, step: StepSeen, patience: Patience): { readonly watch: Watch; readonly decision: Decision } => {
  if (!isOver(step.masked.length, step.samples, step.bound)) return { watch: { ...watch, streak: 0, ran: watch.ran + 1 }, decision: { _tag: "Go" } }
  const reasons = { ...watch.reasons }
  for (const m of step.masked) reasons[m] = (reasons[m] ?? 0) + 1
  const streak = watch.streak + 1
  const since = streak === 1 ? step.now : watch.since
  const seconds = (step.now - since) / 1000
  const after: Watch = { streak, since, ran: watch.ran + 1, over: watch.over + 1, reasons }
  const lasted = seconds >= Duration.toSeconds(Duration.fromInputUnsafe(patience.lasting))
  if (streak >= patience.steps && lasted) return { watch: after, decision: { _tag: "Stop", seconds } }
  return { watch: after, decision: { _tag: "Wait", millis: waitAfter(patience, streak) } }
}

/** The most common reason of `reasons`, and how often it was given. @since 0.1.0 @category estimators */
export const mostCommon = (reasons: Readonly<Record<string, number>>): { readonly reason: string; readonly count: number } => {
  const [reason, count] = Object.entries(reasons).sort((a, b) => b[1] - a[1])[0] ?? ["unknown", 0]
  return { reason, count }
}

/**
 * What the run's end says of its masked steps: nothing when none was over the bound, a
 * warning when some were, a failure when more than half of the steps run were.
 * @since 0.1.0 @category estimators
 */
export const verdict = (watch: Watch, bound: number, outDir: string): { readonly _tag: "Warn" | "Fail"; readonly message: string } | undefined => {
  if (watch.over === 0) return undefined
  const { count, reason } = mostCommon(watch.reasons)
  const what = `${watch.over} of the ${watch.ran} steps run masked more than ${bound} of their samples (the most common reason (${count}): ${reason})`
  if (watch.over * 2 <= watch.ran) return { _tag: "Warn", message: `${what}: those steps trained on few of their samples` }
  return {
    _tag: "Fail",
    message: `${what}: the run trained on few of its samples. Its folder ${outDir} holds every step and checkpoint; fix the cause and run again (--max-masked 1 never fails a run for masked samples)`,
  }
}

/**
 * What the runner reports while it runs: one summary per step, and phases within a step.
 *
 * @since 0.1.0
 */
import { Context, Effect } from "effect"
import * as K from "../metrics/MetricKeys.ts"
import * as Metrics from "../metrics/Metrics.ts"

export { headline } from "../metrics/Metrics.ts"

/** What the runner reports after each step (the CLI renders it). @since 0.1.0 @category models */
export interface StepSummary {
  readonly step: number
  readonly steps: number
  readonly metrics: Metrics.MetricRecord
  /**
   * the reward components to show beside the total: the env's weighted ones
   * (`Metrics.headline` of its reward's weights); none when absent
   */
  readonly components?: ReadonlyArray<string> | undefined
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
 * One progress line: train reward and each of the env's weighted reward components (over
 * the samples not masked), the masked samples when there are any, for multi-turn envs
 * the turns and tool calls per episode, mixed groups, throughput, step time, and on
 * evaluation steps the held-out score named for what it is
 * (`held-out <component>` for a reward with one weighted component, else `held-out reward`).
 *
 * @example
 * // step 3/30 | reward 0.266 correct 0.266 | turns 1.28 tools 0.28 | mixed 1.00 | 69 tok/s | 5.06s | held-out correct 0.275
 * // step 4/30 | reward 1.000 correct 1.000 | masked 7/8 | turns 1.00 tools 1.00 | mixed 0.00 | 12 tok/s | 0.10s
 * @since 0.1.0 @category formatting
 */
export const formatStep = ({ components = [], step, steps, metrics: m }: StepSummary): string => {
  const f = (k: string, digits = 3) => {
    const v = m[k]
    return v === undefined ? "-" : v.toFixed(digits)
  }
  const train = (name: string) => K.envKey("train", K.ALL, name)
  const parts = components.filter((c) => m[train(c)] !== undefined).map((c) => ` ${c} ${f(train(c))}`).join("")
  const episodes = m[train(K.EnvStat.turns)] !== undefined
    ? ` | turns ${f(train(K.EnvStat.turns), 2)} tools ${f(train(K.EnvStat.toolCalls), 2)}`
    : ""
  // a game env: each role's win rate in training, and in held-out play
  const roleWins = (split: K.Split) =>
    Object.keys(m).flatMap((k) => {
      const role = new RegExp(`^${split === "test" ? "test/" : ""}env/all/role/(.+)/win_rate$`).exec(k)?.[1]
      return role === undefined ? [] : [` ${role} won ${f(k, 2)}`]
    }).join("")
  const games = roleWins("train") !== "" ? ` |${roleWins("train")}` : ""
  // masked samples are out of every mean above: say how many, so a reward over 1 of 8 does not read as over 8
  const maskedCount = m[train(K.EnvStat.masked)] ?? 0
  const maskedFrac = m[train(K.EnvStat.fracMasked)] ?? 0
  const masked = maskedCount > 0 && maskedFrac > 0 ? ` | masked ${maskedCount}/${Math.round(maskedCount / maskedFrac)}` : ""
  const held = Metrics.heldOutScore(m, components)
  const heldGames = held !== undefined ? roleWins("test") : ""
  const evalPart = held !== undefined ? ` | ${held.label} ${held.value.toFixed(3)}${heldGames !== "" ? ` (held-out${heldGames})` : ""}` : ""
  return `step ${step + 1}/${steps} | reward ${f(train(K.EnvStat.total))}${parts}${masked}${episodes}${games} | mixed ${f(K.ByGroup.fracMixed, 2)} | ${Math.round(m[K.Throughput.tokensPerS] ?? 0)} tok/s | ${f(K.Time.total, 2)}s${evalPart}`
}

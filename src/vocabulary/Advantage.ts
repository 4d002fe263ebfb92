/**
 * Advantage normalization: pure functions from rewards to advantages.
 *
 * The default is GRPO's `(r - mean) / std` within each group (population std). When a
 * group's std is 0 every advantage is exactly 0 (a no-op group, counted in metrics,
 * never NaN). Masked samples (`undefined`) get advantage 0 and do not count toward
 * the group's statistics.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"

/**
 * - `group_std`: (r - group mean) / group std (population std, no epsilon)
 * - `group_sample_std`: (r - group mean) / (group sample std + 1e-4), the Bessel-corrected
 *   std as `torch.std` computes it plus TRL's epsilon (TRL's GRPOTrainer; `--recipe grpo`)
 * - `mean_only`: r - group mean (Dr. GRPO, the tinker-cookbook default)
 * - `batch_std`: (r - group mean) / std of all rewards in the batch
 * - `none`: the raw reward
 * @since 0.1.0 @category models
 */
export const Mode = Schema.Literals(["group_std", "group_sample_std", "mean_only", "batch_std", "none"])
export type Mode = typeof Mode.Type

/** Below this std a group counts as constant. @since 0.1.0 @category constants */
export const STD_EPSILON = 1e-8

/** What `group_sample_std` adds to the std (TRL's GRPOTrainer: `std + 1e-4`). @since 0.1.0 @category constants */
export const SAMPLE_STD_EPSILON = 1e-4

/** @since 0.1.0 @category models */
export interface GroupStats {
  readonly mean: number
  readonly std: number
  /** usable (unmasked) members */
  readonly n: number
}

/** Mean and population std of the defined values. @since 0.1.0 @category utils */
export const stats = (values: ReadonlyArray<number | undefined>): GroupStats => {
  const xs = values.filter((v): v is number => v !== undefined)
  const n = xs.length
  if (n === 0) return { mean: 0, std: 0, n: 0 }
  const mean = xs.reduce((a, b) => a + b, 0) / n
  const variance = xs.reduce((a, b) => a + (b - mean) * (b - mean), 0) / n
  return { mean, std: Math.sqrt(variance), n }
}

/** @since 0.1.0 @category models */
export interface Advantages {
  /** one array per group, aligned with the rewards; masked samples get 0 */
  readonly advantages: Array<Array<number>>
  /** groups whose advantages are all 0 (constant rewards, or fewer than 2 usable samples) */
  readonly noOpGroups: number
  /**
   * groups whose rewards overflow the computation (an advantage that is not a finite
   * float32, as 1e300 rewards give); their advantages are set to 0, and the runner stops
   */
  readonly overflowGroups: Array<number>
}

/**
 * Advantages for a batch of groups of rewards (`undefined` = masked).
 * @since 0.1.0 @category constructors
 */
export const compute = (groups: ReadonlyArray<ReadonlyArray<number | undefined>>, mode: Mode = "group_std"): Advantages => {
  const batch = stats(groups.flat())
  let noOpGroups = 0
  const overflowGroups: Array<number> = []
  const advantages = groups.map((rewards, gi) => {
    const g = stats(rewards)
    // 1e300 rewards are finite, but their variance is not: report, never train on it
    if (!Number.isFinite(g.mean) || !Number.isFinite(g.std) || (mode === "batch_std" && !Number.isFinite(batch.std))) {
      overflowGroups.push(gi)
      return rewards.map(() => 0)
    }
    const constant = g.n < 2 || g.std <= STD_EPSILON
    if (mode !== "none" && constant) {
      noOpGroups++
      return rewards.map(() => 0)
    }
    const out = rewards.map((r) => {
      if (r === undefined) return 0
      switch (mode) {
        case "group_std":
          return (r - g.mean) / g.std
        case "group_sample_std":
          // n >= 2 here (a group of one is constant): the Bessel-corrected std
          return (r - g.mean) / (g.std * Math.sqrt(g.n / (g.n - 1)) + SAMPLE_STD_EPSILON)
        case "mean_only":
          return r - g.mean
        case "batch_std":
          return batch.std <= STD_EPSILON ? 0 : (r - g.mean) / batch.std
        case "none":
          return r
      }
    })
    if (out.every((a) => Number.isFinite(Math.fround(a)))) return out
    overflowGroups.push(gi)
    return rewards.map(() => 0)
  })
  return { advantages, noOpGroups, overflowGroups }
}

/**
 * Metric names and estimators: sampler/trainer KL, importance ratios, group fractions.
 *
 * Per action token with sampler log-prob `s` and trainer log-prob `p`, `d = s - p`
 * (tinker-cookbook convention) and importance ratio `w = exp(p - s) = exp(-d)`:
 * - `optim/kl_sample_train_v1` = mean d
 * - `optim/kl_sample_train_v2` = ½ mean d²
 * - `optim/kl_sample_train_k3` = mean (w - 1 - log w) = mean (exp(-d) + d - 1), Schulman's
 *   k3 estimate of KL(sampler ‖ trainer) for tokens drawn from the sampler
 * - `optim/entropy` = -mean s (a sampled-token entropy estimate)
 * When sampler and trainer agree these are ~0 (numerics only); a misaligned datum
 * shows up as a large v1.
 *
 * @since 0.1.0
 */

/** @since 0.1.0 @category models */
export type MetricRecord = Record<string, number>

/** Pairs of (sampler, trainer) log-probs of the tokens that were trained on. @since 0.1.0 @category models */
export interface LogprobPairs {
  readonly sampler: ReadonlyArray<number>
  readonly trainer: ReadonlyArray<number>
}

const quantile = (sorted: ReadonlyArray<number>, q: number): number => {
  if (sorted.length === 0) return 0
  const pos = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))
  return sorted[pos]!
}

/**
 * Sampler/trainer agreement over the active tokens of a step.
 * @since 0.1.0 @category estimators
 */
export const klSampleTrain = (pairs: LogprobPairs, clip: { readonly low: number; readonly high: number } = { low: 0.8, high: 1.2 }): MetricRecord => {
  const n = pairs.sampler.length
  if (n === 0) return {}
  let v1 = 0
  let v2 = 0
  let k3 = 0
  let entropy = 0
  let sumW = 0
  let sumW2 = 0
  let clipped = 0
  const ws: Array<number> = []
  for (let i = 0; i < n; i++) {
    const s = pairs.sampler[i]!
    const p = pairs.trainer[i]!
    const d = s - p
    const w = Math.exp(Math.max(-50, Math.min(50, -d)))
    v1 += d
    v2 += 0.5 * d * d
    k3 += w - 1 + d
    entropy += -s
    sumW += w
    sumW2 += w * w
    if (w < clip.low || w > clip.high) clipped++
    ws.push(w)
  }
  ws.sort((a, b) => a - b)
  return {
    "optim/kl_sample_train_v1": v1 / n,
    "optim/kl_sample_train_v2": v2 / n,
    "optim/kl_sample_train_k3": k3 / n,
    "optim/entropy": entropy / n,
    "optim/is_ratio/mean": sumW / n,
    "optim/is_ratio/p99": quantile(ws, 0.99),
    "optim/is_ratio/max": ws[ws.length - 1]!,
    "optim/ess_over_n": sumW2 === 0 ? 0 : (sumW * sumW) / sumW2 / n,
    "optim/clip_fraction": clipped / n,
  }
}

/** Mean of the defined values, or undefined. @since 0.1.0 @category estimators */
export const mean = (values: ReadonlyArray<number | undefined>): number | undefined => {
  const xs = values.filter((v): v is number => v !== undefined && Number.isFinite(v))
  return xs.length === 0 ? undefined : xs.reduce((a, b) => a + b, 0) / xs.length
}

/**
 * Group shape fractions for one step: mixed groups carry signal, all-good / all-bad
 * groups are no-ops under group normalization.
 * @since 0.1.0 @category estimators
 */
export const groupFractions = (groups: ReadonlyArray<ReadonlyArray<number | undefined>>): MetricRecord => {
  let mixed = 0
  let allGood = 0
  let allBad = 0
  for (const g of groups) {
    const xs = g.filter((v): v is number => v !== undefined)
    if (xs.length === 0) continue
    const lo = Math.min(...xs)
    const hi = Math.max(...xs)
    if (hi - lo > 1e-9) mixed++
    else if (hi > 0) allGood++
    else allBad++
  }
  const n = Math.max(1, groups.length)
  return { "by_group/frac_mixed": mixed / n, "by_group/frac_all_good": allGood / n, "by_group/frac_all_bad": allBad / n }
}

/**
 * Estimators of a step's metrics: sampler/trainer KL, importance ratios, group fractions,
 * and the reward components and held-out score a progress line names. The keys they are
 * written under are `MetricKeys.ts`'s.
 *
 * Per action token with sampler log-prob `s` and trainer log-prob `p`, `d = s - p`
 * (tinker-cookbook convention) and importance ratio `w = exp(p - s) = exp(-d)`:
 * - `optim/kl_sample_train_v1` = mean d
 * - `optim/kl_sample_train_v2` = ½ mean d²
 * - `optim/kl_sample_train_k3` = mean (w - 1 - log w) = mean (exp(-d) + d - 1), Schulman's
 *   k3 estimate of KL(sampler ‖ trainer) for tokens drawn from the sampler
 * - `optim/entropy` = -mean s (a sampled-token entropy estimate)
 * When sampler and trainer agree these are ~0 (numerics only); a misaligned datum
 * shows up as a large v1. The fraction of clipped tokens is not estimated here: the
 * trainer reports it for the losses that clip.
 *
 * @since 0.1.0
 */

import * as K from "./MetricKeys.ts"

/** @since 0.1.0 @category models */
export type MetricRecord = Record<string, number>

/** Pairs of (sampler, trainer) log-probs of the tokens that were trained on. @since 0.1.0 @category models */
export interface LogprobPairs {
  readonly sampler: ReadonlyArray<number>
  readonly trainer: ReadonlyArray<number>
}

const quantile = (sorted: ArrayLike<number>, q: number): number => {
  if (sorted.length === 0) return 0
  const pos = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))
  return sorted[pos]! // clamped into the non-empty array
}

/** How many pairs there are; sampler and trainer log-probs of one token each, so their counts must agree. */
const pairCount = (pairs: LogprobPairs): number => {
  const n = pairs.sampler.length
  if (pairs.trainer.length !== n) throw new Error(`LogprobPairs: ${n} sampler log-probs but ${pairs.trainer.length} trainer log-probs; give one of each per token`)
  return n
}

/**
 * Sampler/trainer agreement over the active tokens of a step.
 *
 * It reports no clip fraction: which tokens a loss clips depends on the loss (its bounds,
 * and for ppo on the advantage's sign), so the trainer reports its own `clip_fraction`
 * for the losses that clip (ppo, cispo, dppo).
 * @since 0.1.0 @category estimators
 */
export const klSampleTrain = (pairs: LogprobPairs): MetricRecord => {
  const n = pairCount(pairs)
  if (n === 0) return {}
  let v1 = 0
  let v2 = 0
  let k3 = 0
  let entropy = 0
  let sumW = 0
  let sumW2 = 0
  // a typed array sorts numerically without a comparator call per comparison (a step has ~10^5-10^6 tokens)
  const ws = new Float64Array(n)
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
    ws[i] = w
  }
  ws.sort()
  return {
    [K.Optim.klSampleTrainV1]: v1 / n,
    [K.Optim.klSampleTrainV2]: v2 / n,
    [K.Optim.klSampleTrainK3]: k3 / n,
    [K.Optim.entropy]: entropy / n,
    [K.Optim.isRatioMean]: sumW / n,
    [K.Optim.isRatioP99]: quantile(ws, 0.99),
    [K.Optim.isRatioMax]: quantile(ws, 1),
    [K.Optim.essOverN]: sumW2 === 0 ? 0 : (sumW * sumW) / sumW2 / n,
  }
}

/**
 * The fixed bin edges of the sampler - trainer log-prob difference histogram
 * (`divergence.jsonl`): bin 0 is `d < -1`, bin i is `edges[i-1] <= d < edges[i]`, the last
 * bin is `d >= 1`. Symmetric and finer near 0, where an on-policy step's tokens fall
 * (|d| < 0.001 is float noise).
 * @since 0.1.0 @category models
 */
export const DIVERGENCE_EDGES: ReadonlyArray<number> = [-1, -0.5, -0.2, -0.1, -0.05, -0.02, -0.01, -0.001, 0.001, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1]

/**
 * Counts of `sampler - trainer` per bin of {@link DIVERGENCE_EDGES} (one more count than
 * edges). A NaN difference counts in no bin.
 * @since 0.1.0 @category estimators
 */
export const divergenceHistogram = (pairs: LogprobPairs): Array<number> => {
  const n = pairCount(pairs)
  const counts = new Array<number>(DIVERGENCE_EDGES.length + 1).fill(0)
  for (let i = 0; i < n; i++) {
    const d = pairs.sampler[i]! - pairs.trainer[i]!
    if (Number.isNaN(d)) continue
    let bin = 0
    while (bin < DIVERGENCE_EDGES.length && d >= DIVERGENCE_EDGES[bin]!) bin++
    counts[bin]!++ // bin <= DIVERGENCE_EDGES.length: counts has one more entry than edges
  }
  return counts
}

/** Every index, largest gap first (ties: the earlier index first). */
const sortedByGap = (pairs: LogprobPairs, n: number): Array<number> => {
  const gap = (i: number) => {
    const d = Math.abs(pairs.sampler[i]! - pairs.trainer[i]!)
    return Number.isNaN(d) ? Infinity : d
  }
  return Array.from({ length: n }, (_, i) => i).sort((a, b) => gap(b) - gap(a) || a - b)
}

/**
 * Indices of the `k` pairs with the largest `|sampler - trainer|`, largest first (ties:
 * the earlier index first).
 * @since 0.1.0 @category estimators
 */
export const worstDivergent = (pairs: LogprobPairs, k: number): Array<number> => {
  const n = pairCount(pairs)
  const want = Math.min(n, Math.max(0, k))
  if (want > 64) return sortedByGap(pairs, n).slice(0, want)
  // the k largest in one pass (k is small: a handful of tokens per step), kept in order
  const best: Array<number> = []
  const gaps: Array<number> = []
  for (let i = 0; i < n && want > 0; i++) {
    const d = Math.abs(pairs.sampler[i]! - pairs.trainer[i]!)
    const g = Number.isNaN(d) ? Infinity : d
    // an equal gap never displaces an earlier index
    if (best.length === want && !(g > gaps[want - 1]!)) continue
    let at = best.length === want ? want - 1 : best.length
    while (at > 0 && gaps[at - 1]! < g) {
      best[at] = best[at - 1]!
      gaps[at] = gaps[at - 1]!
      at--
    }
    best[at] = i
    gaps[at] = g
  }
  return best
}

/** Mean of the defined values, or undefined. @since 0.1.0 @category estimators */
export const mean = (values: ReadonlyArray<number | undefined>): number | undefined => {
  const xs = values.filter((v): v is number => v !== undefined && Number.isFinite(v))
  return xs.length === 0 ? undefined : xs.reduce((a, b) => a + b, 0) / xs.length
}

/**
 * Group shape fractions for one step. Each group is classified by its unmasked rewards,
 * against the range [lo, hi] of all unmasked rewards in the step's batch (every group):
 *
 * - `by_group/frac_mixed`: the group's rewards differ (the only groups that carry a
 *   learning signal under group normalization);
 * - `by_group/frac_all_good`: every reward equals the batch's top `hi`;
 * - `by_group/frac_all_bad`: every reward equals the batch's bottom `lo`;
 * - `by_group/frac_all_equal`: every reward is equal, strictly between `lo` and `hi`,
 *   or the whole batch has one reward value (`lo == hi`), where top and bottom cannot be
 *   told apart.
 *
 * "Good" and "bad" are relative to what the step observed, not to a fixed threshold: a
 * batch whose best score is 0.1 calls a group of 0.1s all-good. Equality allows a relative
 * tolerance of 1e-9. Fractions are over the groups with at least one unmasked sample, and
 * sum to 1 over them; a step with no such group reports 0 for all four.
 *
 * @example
 * groupFractions([[1, 1], [0, 0], [0, 1], [0.5, 0.5]])
 * // => { frac_mixed: 0.25, frac_all_good: 0.25, frac_all_bad: 0.25, frac_all_equal: 0.25 } (by_group/ keys)
 * @since 0.1.0 @category estimators
 */
export const groupFractions = (groups: ReadonlyArray<ReadonlyArray<number | undefined>>): MetricRecord => {
  const scored = groups.map((g) => g.filter((v): v is number => v !== undefined && !Number.isNaN(v))).filter((xs) => xs.length > 0)
  const counts = { mixed: 0, good: 0, bad: 0, equal: 0 }
  const fractions = (n: number): MetricRecord => ({
    [K.ByGroup.fracMixed]: counts.mixed / n,
    [K.ByGroup.fracAllGood]: counts.good / n,
    [K.ByGroup.fracAllBad]: counts.bad / n,
    [K.ByGroup.fracAllEqual]: counts.equal / n,
  })
  if (scored.length === 0) return fractions(1)
  let lo = Infinity
  let hi = -Infinity
  for (const xs of scored) {
    for (const x of xs) {
      if (x < lo) lo = x
      if (x > hi) hi = x
    }
  }
  const scale = Math.max(1, Math.abs(lo), Math.abs(hi))
  const tol = Number.isFinite(scale) ? 1e-9 * scale : 0
  const same = (a: number, b: number) => a === b || Math.abs(a - b) <= tol
  const batchHasSpread = !same(lo, hi)
  for (const xs of scored) {
    const gLo = Math.min(...xs)
    const gHi = Math.max(...xs)
    if (!same(gLo, gHi)) counts.mixed++
    else if (batchHasSpread && same(gLo, hi)) counts.good++
    else if (batchHasSpread && same(gHi, lo)) counts.bad++
    else counts.equal++
  }
  return fractions(scored.length)
}

/**
 * The reward components a progress line and a run summary name: those with a weight in
 * the total (`rewardWeights`, as `config.json` records them), in the reward's order.
 * Metric-only components (weight 0) are left out; a reward that is not a weighted sum
 * names none (its total says it all).
 *
 * @example
 * headline({ correct: 1, brief: 0 }) // => ["correct"]
 * @since 0.1.0 @category estimators
 */
export const headline = (weights: Readonly<Record<string, number>> | undefined): ReadonlyArray<string> =>
  Object.entries(weights ?? {}).filter(([, w]) => w !== 0).map(([name]) => name)

/**
 * The held-out score a step line and a run summary show, named for what it is: the mean
 * held-out score of the reward's one weighted component where the reward has exactly one
 * (`held-out <component>`, see {@link headline}), else the mean held-out total reward
 * (`held-out reward`). Undefined when the record has no held-out evaluation.
 * @since 0.1.0 @category estimators
 */
export const heldOutScore = (
  metrics: Readonly<Record<string, unknown>>,
  components: ReadonlyArray<string> = [],
): { readonly label: string; readonly key: string; readonly value: number } | undefined => {
  const candidates: ReadonlyArray<readonly [string, string]> = [
    ...(components.length === 1 ? [[K.envKey("test", K.ALL, components[0]!), `held-out ${components[0]}`] as const] : []),
    [K.envKey("test", K.ALL, K.EnvStat.total), "held-out reward"],
  ]
  for (const [key, label] of candidates) {
    const value = metrics[key]
    if (typeof value === "number" && Number.isFinite(value)) return { label, key, value }
  }
  return undefined
}

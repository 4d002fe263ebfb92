/**
 * pass@k and maj@k: how often a model solves a problem when it may try k times, and
 * how often the most common answer among k tries is right.
 *
 * - A sample is **correct** when its total reward is at least a threshold (default 1,
 *   the top score of a 0/1 reward such as `numericAnswer`). Masked samples (no total)
 *   are left out: a problem's n is its scored samples.
 * - **pass@k** of a problem with n samples, c of them correct, is the unbiased
 *   estimator of Chen et al. (2021), 1 - C(n-c, k) / C(n, k): the chance that k
 *   samples drawn without replacement from the n include a correct one. It is computed
 *   as the product 1 - Π_{i=n-c+1..n} (1 - k/i), which never forms a binomial
 *   coefficient, so it stays exact to rounding for any n.
 * - **maj@k** groups samples by their answer (the completion with whitespace collapsed,
 *   trimmed and lower-cased, unless the caller gives its own answer) and counts the most
 *   common answer as the problem's answer; it scores the fraction of that answer's
 *   samples that are correct. A tie between answers scores the mean over the tied ones
 *   (a fair coin between them). With n ≥ k samples, the n are cut into ⌊n/k⌋ disjoint
 *   runs of k in the order sampled and maj@k is the mean over the runs (each run is k
 *   independent samples, so the mean is unbiased; samples past the last run are unused).
 *   maj@1 is therefore the success rate, as pass@1 is.
 * - Both are means over problems, each problem weighing the same; a problem with fewer
 *   than k scored samples is left out of that k's mean.
 * - The 95% interval is a percentile bootstrap over problems (2,000 resamples of the
 *   problems with replacement, seeded, so the same samples give the same interval).
 *   It covers only the spread between problems: when every problem scores the same the
 *   interval is that one point.
 *
 * @since 0.1.0
 */
import { Result } from "effect"

// ===== Models =====

/** One scored sample of a problem, as pass@k and maj@k read it. @since 0.1.0 @category models */
export interface Sample {
  /** its total reward reached the threshold */
  readonly correct: boolean
  /** the answer majority vote groups it by (`normalizeAnswer` of the completion by default) */
  readonly answer: string
}

/** Which estimate: pass@k or maj@k. @since 0.1.0 @category models */
export type Metric = "pass" | "maj"

/** A mean over problems with its 95% bootstrap interval. @since 0.1.0 @category models */
export interface Estimate {
  /** `pass@4`, `maj@4` */
  readonly name: string
  readonly metric: Metric
  readonly k: number
  /** problems with at least k scored samples (those the mean is over) */
  readonly problems: number
  readonly mean: number
  readonly low: number
  readonly high: number
}

/** How `estimates` scores. @since 0.1.0 @category models */
export interface EstimateOptions {
  /** bootstrap resamples (default 2,000) */
  readonly resamples?: number
  /** seed of the bootstrap (default 0) */
  readonly seed?: number
}

// ===== Per problem =====

/**
 * The unbiased pass@k of a problem with `n` samples, `c` correct: 1 - C(n-c, k)/C(n, k),
 * computed as a product. Needs 1 ≤ k ≤ n and 0 ≤ c ≤ n.
 *
 * @example
 * passAtK(10, 1, 1) // => 0.1
 * passAtK(10, 1, 10) // => 1
 * @since 0.1.0 @category estimators
 */
export const passAtK = (n: number, c: number, k: number): number => {
  if (!(Number.isInteger(n) && Number.isInteger(c) && Number.isInteger(k) && k >= 1 && k <= n && c >= 0 && c <= n)) {
    throw new RangeError(`passAtK needs whole numbers with 1 <= k <= n and 0 <= c <= n, got n=${n} c=${c} k=${k}`)
  }
  // every k-subset holds a correct sample
  if (n - c < k) return 1
  let miss = 1
  for (let i = n - c + 1; i <= n; i++) miss *= 1 - k / i
  return 1 - miss
}

/**
 * The answer majority vote groups a completion by: whitespace collapsed to one space,
 * trimmed, lower-cased. `" 56\n"` and `"56"` are one answer.
 * @since 0.1.0 @category estimators
 */
export const normalizeAnswer = (completion: string): string => completion.replace(/\s+/g, " ").trim().toLowerCase()

/** The score of one vote: the fraction of the winning answer's samples that are correct, a tie's mean over the tied answers. */
const vote = (samples: ReadonlyArray<Sample>): number => {
  const byAnswer = new Map<string, { count: number; correct: number }>()
  for (const s of samples) {
    const g = byAnswer.get(s.answer) ?? { count: 0, correct: 0 }
    g.count += 1
    if (s.correct) g.correct += 1
    byAnswer.set(s.answer, g)
  }
  const top = Math.max(...[...byAnswer.values()].map((g) => g.count))
  const winners = [...byAnswer.values()].filter((g) => g.count === top)
  return winners.reduce((a, g) => a + g.correct / g.count, 0) / winners.length
}

/**
 * maj@k of one problem's samples (in the order sampled): the mean vote over the
 * ⌊n/k⌋ disjoint runs of k samples. Needs 1 ≤ k ≤ n.
 *
 * @example
 * majAtK([{ correct: true, answer: "5" }, { correct: true, answer: "5" }, { correct: false, answer: "7" }], 3) // => 1
 * @since 0.1.0 @category estimators
 */
export const majAtK = (samples: ReadonlyArray<Sample>, k: number): number => {
  const n = samples.length
  if (!(Number.isInteger(k) && k >= 1 && k <= n)) throw new RangeError(`majAtK needs a whole k with 1 <= k <= ${n} (the samples), got ${k}`)
  const runs = Math.floor(n / k)
  let sum = 0
  for (let r = 0; r < runs; r++) sum += vote(samples.slice(r * k, (r + 1) * k))
  return sum / runs
}

// ===== Over problems =====

/** A seeded uniform generator on [0, 1) (mulberry32). */
const uniform = (seed: number) => {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

/**
 * The mean of `values` with its 95% percentile-bootstrap interval: `resamples` means of
 * the values drawn with replacement, their 2.5% and 97.5% quantiles. NaN for no values.
 * @since 0.1.0 @category estimators
 */
export const bootstrapMean = (values: ReadonlyArray<number>, options: EstimateOptions = {}): { readonly mean: number; readonly low: number; readonly high: number } => {
  const n = values.length
  if (n === 0) return { mean: Number.NaN, low: Number.NaN, high: Number.NaN }
  const mean = values.reduce((a, b) => a + b, 0) / n
  const resamples = options.resamples ?? 2000
  const next = uniform(options.seed ?? 0)
  const means = new Float64Array(resamples)
  for (let b = 0; b < resamples; b++) {
    let sum = 0
    for (let i = 0; i < n; i++) sum += values[Math.floor(next() * n)]! // next() is in [0, 1): the index is in [0, n)
    means[b] = sum / n
  }
  means.sort()
  // with no resamples there is no interval: NaN
  const at = (q: number) => means[Math.min(resamples - 1, Math.max(0, Math.round(q * (resamples - 1))))] ?? Number.NaN
  // rounding can put a quantile a hair past the mean when every resample is the same
  return { mean, low: Math.min(mean, at(0.025)), high: Math.max(mean, at(0.975)) }
}

/**
 * pass@k and maj@k for each k, each a mean over the problems with at least k scored
 * samples, with its bootstrap interval. `problems` holds each problem's samples in the
 * order sampled.
 * @since 0.1.0 @category estimators
 */
export const estimates = (problems: ReadonlyArray<ReadonlyArray<Sample>>, ks: ReadonlyArray<number>, options: EstimateOptions = {}): Array<Estimate> =>
  (["pass", "maj"] as const).flatMap((metric) =>
    ks.map((k): Estimate => {
      const eligible = problems.filter((p) => p.length >= k)
      const values = eligible.map((p) => (metric === "pass" ? passAtK(p.length, p.filter((s) => s.correct).length, k) : majAtK(p, k)))
      return { name: `${metric}@${k}`, metric, k, problems: eligible.length, ...bootstrapMean(values, options) }
    })
  )

/**
 * The ks reported by default for `samples` per problem: 1, and `samples` when it is more.
 * @since 0.1.0 @category estimators
 */
export const defaultKs = (samples: number): Array<number> => (samples > 1 ? [1, samples] : [1])

/**
 * Reads a list of ks such as `"1,4,16"`: sorted, without repeats. Fails with the reason
 * when the list is empty or an entry is not a whole number from 1 to `samples`.
 * @since 0.1.0 @category estimators
 */
export const parseKs = (text: string, samples: number): Result.Result<Array<number>, string> => {
  const parts = text.split(",").map((s) => s.trim()).filter((s) => s.length > 0)
  if (parts.length === 0) return Result.fail(`--k must list at least one k, e.g. 1,${samples}`)
  const ks = parts.map(Number)
  const bad = parts.find((part) => {
    const k = Number(part)
    return !(Number.isInteger(k) && k >= 1 && k <= samples)
  })
  if (bad !== undefined) return Result.fail(`--k: ${JSON.stringify(bad)} is not a whole number from 1 to ${samples} (--samples)`)
  return Result.succeed([...new Set(ks)].sort((a, b) => a - b))
}

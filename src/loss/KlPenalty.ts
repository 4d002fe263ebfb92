/**
 * The KL penalty against a reference policy, folded into the advantages per token as
 * tinker-cookbook's `kl_penalty_coef` does it.
 *
 * tinker-cookbook, `tinker_cookbook/rl/metrics.py::incorporate_kl_penalty`:
 *
 * ```python
 * logprob_diffs = [(sampled_logprobs - base_logprobs[1:]) * mask ...]
 * avg_logp_diff = sum(diff.sum() for diff in logprob_diffs) / sum(mask.sum() for mask in masks)
 * kl_advantages = kl_penalty_coef * mask * (avg_logp_diff - logprob_diffs[i])
 * advantages += kl_advantages
 * return {"kl_policy_base": avg_logp_diff}
 * ```
 *
 * so, per sampled token t of the step, with the sampler's log-prob `s_t` and the
 * reference's `r_t`:
 *
 *     d_t = s_t - r_t                          (a one-sample estimate of KL(policy ‖ ref) at t)
 *     A_t ← A_t + coef · (mean_batch(d) - d_t)
 *
 * The mean is over every sampled token of the step (the whole batch, not per sequence),
 * so the term sums to zero over the batch: it moves credit from tokens that drift from
 * the reference to tokens that stay near it, without shifting the advantages' mean.
 * Prompt and observation positions (mask 0) are left alone. gyre's Datums hold full
 * sequences (`logprobs[t]` is the log-prob of token t, position 0 is 0), so the
 * reference log-probs line up position by position, with no shift.
 *
 * tinker-cookbook's `kl_discount_factor` (turning the term into discounted future sums)
 * is not implemented; its default, 0, is what this computes.
 *
 * @since 0.1.0
 */
import { Result } from "effect"
import { type Datum, float32 } from "../contract/Contract.ts"
import * as Keys from "../metrics/MetricKeys.ts"
import * as KlLoss from "./KlLoss.ts"
import type { MetricRecord } from "../metrics/Metrics.ts"

/** @since 0.1.0 @category models */
export interface KlPenaltyInput {
  /** the step's Datums (Loops layout: `logprobs` and `advantages` per position of `modelInput`) */
  readonly data: ReadonlyArray<Datum>
  /** per Datum, the reference log-prob of every position of its `modelInput` (position 0 is 0) */
  readonly reference: ReadonlyArray<ReadonlyArray<number>>
  /** the penalty coefficient (>= 0; 0 leaves the advantages as they are) */
  readonly coef: number
  /**
   * per Datum, 1 at its sampled positions and 0 elsewhere. Default: the positions whose
   * advantage is not 0 (right when every Datum carries a non-zero advantage). Give it to
   * penalize the samples of zero-advantage groups too, as tinker-cookbook does.
   */
  readonly masks?: ReadonlyArray<ReadonlyArray<number>> | undefined
  /**
   * true (default): `coef · (mean_batch(d) − d_t)`, the RL recipe's penalty, which leaves the
   * advantages' mean where it was; false: `−coef · d_t`, the term of tinker-cookbook's
   * on-policy distillation (`distillation/train_on_policy.py`), the per-token reverse KL
   * with no baseline.
   */
  readonly centred?: boolean | undefined
}

/** @since 0.1.0 @category models */
export interface KlPenaltyResult {
  /** the Datums with the penalty folded into `advantages` (other inputs unchanged) */
  readonly data: Array<Datum>
  /**
   * `kl/policy_ref_v1` = mean d_t (tinker-cookbook's `kl_policy_base`) and
   * `kl/policy_ref_k3` = mean (e^{-d_t} - 1 + d_t) (Schulman's k3, non-negative per
   * token), both estimates of KL(policy ‖ reference) on the sampled tokens;
   * `kl/policy_ref_tokens` = how many tokens they average over. Empty when no token is
   * sampled.
   */
  readonly metrics: MetricRecord
}

/** Metric names (`MetricKeys.KlPenalty`). @since 0.1.0 @category constants */
export const METRICS = Keys.KlPenalty

/**
 * Why `coef` is not a valid KL coefficient, or undefined when it is (a finite number >= 0).
 * @since 0.1.0 @category validation
 */
export const checkCoef = (coef: unknown, name = "--kl-coef"): string | undefined =>
  typeof coef === "number" && Number.isFinite(coef) && coef >= 0
    ? undefined
    : `${name} must be a finite number >= 0 (0 turns the KL penalty off), got ${typeof coef === "number" ? String(coef) : JSON.stringify(coef)}`

/**
 * Folds the KL penalty into the advantages (see the module comment for the formula and
 * its source) and estimates KL(policy ‖ reference). Fails with a message naming the
 * Datum and the field when the inputs do not line up.
 * @since 0.1.0 @category combinators
 */
export const apply = (input: KlPenaltyInput): Result.Result<KlPenaltyResult, string> => {
  const { data, reference, coef, masks, centred = true } = input
  const bad = checkCoef(coef, "coef")
  if (bad) return Result.fail(bad)
  if (reference.length !== data.length) return Result.fail(`reference log-probs are given for ${reference.length} Datums, but the step has ${data.length}`)
  if (masks !== undefined && masks.length !== data.length) return Result.fail(`masks are given for ${masks.length} Datums, but the step has ${data.length}`)
  // per Datum, its advantages, the difference d_t at each sampled position and which positions are sampled
  const rows: Array<{ readonly datum: Datum; readonly advantages: ReadonlyArray<number>; readonly diff: Float64Array; readonly on: Uint8Array }> = []
  let sum = 0
  let k3 = 0
  let n = 0
  for (const [i, d] of data.entries()) {
    const s = d.lossFnInputs["logprobs"]?.data
    const a = d.lossFnInputs["advantages"]?.data
    if (s === undefined || a === undefined) return Result.fail(`data[${i}] has no ${s === undefined ? "logprobs" : "advantages"} input; the KL penalty needs both`)
    const L = d.modelInput.chunks.reduce((m, c) => m + c.tokens.length, 0)
    const r = reference[i]! // as many as data, checked above
    if (s.length !== L || a.length !== L) return Result.fail(`data[${i}] has ${s.length} logprobs and ${a.length} advantages for ${L} tokens`)
    if (r.length !== L) return Result.fail(`reference log-probs of data[${i}] cover ${r.length} positions, but its model_input has ${L} tokens`)
    const m = masks?.[i]
    if (m !== undefined && m.length !== L) return Result.fail(`masks[${i}] has ${m.length} entries for ${L} tokens`)
    const diff = new Float64Array(L)
    const on = new Uint8Array(L)
    for (let t = 0; t < L; t++) {
      if (!(m !== undefined ? m[t] !== 0 : a[t] !== 0)) continue
      const rt = r[t]!
      if (!Number.isFinite(rt)) return Result.fail(`the reference log-prob of data[${i}] at position ${t} is ${rt}; it must be finite`)
      const dt = s[t]! - rt
      on[t] = 1
      diff[t] = dt
      sum += dt
      k3 += KlLoss.k3(s[t]!, rt).value
      n++
    }
    rows.push({ datum: d, advantages: a, diff, on })
  }
  if (n === 0) return Result.succeed({ data: [...data], metrics: {} })
  const mean = sum / n
  const baseline = centred ? mean : 0
  const out = rows.map(({ datum, advantages, diff, on }) => {
    if (coef === 0) return datum
    // diff and on have one entry per advantage (L, checked above)
    const next = advantages.map((v, t) => (on[t] === 1 ? v + coef * (baseline - diff[t]!) : v))
    return { ...datum, lossFnInputs: { ...datum.lossFnInputs, advantages: float32(next) } }
  })
  return Result.succeed({ data: out, metrics: { [METRICS.v1]: mean, [METRICS.k3]: k3 / n, [METRICS.tokens]: n } })
}

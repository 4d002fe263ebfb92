/**
 * The KL to a reference policy as a term of the loss, as DeepSeekMath's GRPO has it (and
 * TRL's GRPOTrainer computes it): at every sampled token t, with the learner's log-prob
 * `lp` and the reference's `ref`,
 *
 *     k3_t = pi_ref/pi - log(pi_ref/pi) - 1 = exp(ref - lp) - (ref - lp) - 1     (>= 0)
 *     d k3_t / d lp = 1 - exp(ref - lp)
 *
 * and the step's objective is `sum_d w_d · sum_{t sampled in d} (l_t + beta · k3_t)`, where
 * `l_t` is the run's loss at t (`Loss.tokenLoss`, at positions whose advantage is not 0:
 * the policy term of a sample whose advantage is 0 is 0, its KL term is not) and `w_d` the
 * aggregation weight of datum d (default `1/N`, N the step's sampled tokens).
 *
 * Unlike `KlPenalty` (tinker-cookbook's k1, centred on the step's mean and folded into
 * the advantages), this term is differentiated through the learner's log-probs, so it
 * trains through a custom loss (`CustomLoss`: a forward for `lp`, then a surrogate).
 *
 * @since 0.1.0
 */
import type { Datum } from "../contract/Contract.ts"
import * as Keys from "../metrics/MetricKeys.ts"
import { isActive, isClipped, needsSequence, type ResolvedLoss, sequenceOf, tokenLoss } from "./Loss.ts"

/**
 * Schulman's k3 estimate of KL(pi ‖ ref) at one token sampled from pi, and its derivative
 * with respect to `lp`. `expm1` keeps both accurate near `lp = ref`, where both are 0; the
 * log-ratio is held within ±50 so that a far-off reference gives a large finite value, not
 * an overflow.
 * @since 0.1.0 @category combinators
 */
export const k3 = (lp: number, ref: number): { readonly value: number; readonly dlp: number } => {
  const d = Math.max(-50, Math.min(50, ref - lp))
  const e = Math.expm1(d)
  return { value: Math.max(0, e - d), dlp: -e }
}

/** What {@link objective} reads. @since 0.1.0 @category models */
export interface KlLossInput {
  /** the step's datums (Loops layout: `logprobs` the sampler's, `advantages`) */
  readonly data: ReadonlyArray<Datum>
  /** the learner's log-prob of every position of each datum (position 0 is 0) */
  readonly logprobs: ReadonlyArray<ReadonlyArray<number>>
  /** the reference's log-prob of every position of each datum */
  readonly reference: ReadonlyArray<ReadonlyArray<number>>
  /** per datum, 1 at its sampled positions, 0 elsewhere */
  readonly masks: ReadonlyArray<ReadonlyArray<number>>
  /** the run's loss, validated */
  readonly loss: ResolvedLoss
  /** beta, the KL term's coefficient (>= 0) */
  readonly coef: number
  /** each datum's weight in the objective; default `1/N`, N the sampled tokens of `data` */
  readonly weights?: ReadonlyArray<number> | undefined
}

/** The objective, its gradient per position, and metrics. @since 0.1.0 @category models */
export interface KlLossOutput {
  readonly loss: number
  readonly gradients: Array<Array<number>>
  readonly metrics: Readonly<Record<string, number>>
}

const sampled = (mask: ReadonlyArray<number>) => mask.reduce((n, m, t) => (t > 0 && m !== 0 ? n + 1 : n), 0)

/**
 * The objective of the module doc and its gradient with respect to each datum's `lp`.
 * Metrics: `kl_loss:active_tokens` (sampled tokens), `kl_loss:clip_fraction` (over the
 * tokens whose advantage is not 0), and `kl/policy_ref_v1`, `kl/policy_ref_k3`,
 * `kl/policy_ref_tokens` (mean `lp - ref` and mean k3 over the sampled tokens).
 * @since 0.1.0 @category combinators
 */
export const objective = (input: KlLossInput): KlLossOutput => {
  const { data, logprobs, reference, masks, loss: r, coef } = input
  const N = masks.reduce((n, m) => n + sampled(m), 0)
  let loss = 0
  let v1 = 0
  let kl = 0
  let trained = 0
  let clipped = 0
  const gradients = data.map((d, k) => {
    const lp = logprobs[k]!
    const ref = reference[k]!
    const mask = masks[k]!
    const q = d.lossFnInputs["logprobs"]?.data ?? []
    const adv = d.lossFnInputs["advantages"]?.data ?? []
    const w = input.weights?.[k] ?? (N === 0 ? 0 : 1 / N)
    const policy = (t: number) => isActive(r.lossFn, t, 0, 1, adv[t] ?? 0)
    // only gspo and a sequence-level mask read the datum's sequence ratio
    const sequence = needsSequence(r) ? sequenceOf(lp, q, policy) : undefined
    return lp.map((l, t) => {
      if (t === 0 || mask[t] === 0) return 0
      const term = k3(l, ref[t]!)
      v1 += l - ref[t]!
      kl += term.value
      let value = coef * term.value
      let dlp = coef * term.dlp
      if (policy(t)) {
        const p = tokenLoss(r, l, q[t]!, adv[t]!, 1, sequence)
        value += p.loss
        dlp += p.dlp
        trained++
        if (isClipped(r, l, q[t]!, adv[t]!, sequence)) clipped++
      }
      loss += w * value
      return w * dlp
    })
  })
  const metrics = {
    [Keys.KlLoss.activeTokens]: N,
    [Keys.KlLoss.clipFraction]: trained === 0 ? 0 : clipped / trained,
    ...(N > 0 ? { [Keys.KlPenalty.v1]: v1 / N, [Keys.KlPenalty.k3]: kl / N, [Keys.KlPenalty.tokens]: N } : {}),
  }
  return { loss, gradients, metrics }
}

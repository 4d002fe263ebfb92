/**
 * The built-in losses: which inputs each reads, its `loss_fn_config` keys with
 * defaults and ranges, and the per-token formula with its derivative with respect
 * to the learner log-prob. Pure TypeScript, shared by every backend (the embedded
 * model backpropagates `dloss/dlp` through the network; the HTTP server reuses the
 * validation).
 *
 * Notation per active position t: `lp` learner log-prob of the target token, `q`
 * sampler log-prob (`loss_fn_inputs.logprobs`), `A` advantage, `w` weight,
 * `rho = exp(lp - q)`.
 *
 * | loss | per-token loss | active when |
 * |---|---|---|
 * | cross_entropy | `-w·lp` | target != -100 and w > 0 |
 * | importance_sampling | `-rho·A`; `-sg(min(rho, cap)/rho)·rho·A` with `tis_cap`; 0 where rho leaves [`mis_low`, `mis_high`] | A != 0 |
 * | ppo | `-min(rho·A, clip(rho, lo, hi)·A)`; `-sg(min(rho, cap))·min(r·A, clip(r, lo, hi)·A)`, `r = exp(lp - sg(lp))`, with `tis_cap` | A != 0 |
 * | cispo | `-sg(clip(rho, lo, hi))·A·lp`; `-sg(min(rho, cap))·sg(clip(r, lo, hi))·A·lp` with `tis_cap` | A != 0 |
 * | dro | `-(lp·A - beta/2·(lp - q)^2)` | A != 0 |
 * | dppo | `-rho·A` unless masked: A>0 and p-mu > delta_high, or A<0 and p-mu < -delta_low (p = exp(lp), mu = exp(q)) | A != 0 |
 * | gspo | `-min(s·A, clip(s, lo, hi)·A)` at each active position of a datum, `s = exp(mean(lp - q))` over them | A != 0 |
 *
 * gspo (GSPO, sequence-level ratios) has one ratio per datum: the geometric mean of the
 * token ratios over its active positions, clipped per sequence. Each of a datum's n active
 * positions carries the sequence's loss, with derivative `-s·A` (the derivative of the
 * datum's n copies); so `--aggregation sequence_mean` (a datum's tokens weighted 1/(S·n))
 * trains exactly GSPO's objective, the mean over sequences of the clipped sequence term,
 * and `token_mean` weights each sequence by its length. That holds for one advantage per
 * datum, as the runner writes them; with advantages that vary by position, the gradient
 * at a position is `-s·A` there (the paper's GSPO-token), not the derivative of the sum.
 *
 * Off-policy corrections (`importance_sampling`, `ppo`, `cispo`; all off by default): a
 * token whose `rho` leaves [`mis_low`, `mis_high`], or any token of a datum whose sequence
 * ratio `exp(sum(lp - q))` over its active positions leaves [`mis_seq_low`, `mis_seq_high`]
 * (verl's `rollout_rs: sequence`), trains nothing. `tis_cap` truncates the importance weight.
 * Under ppo and cispo it takes verl's decoupled form (`tis_imp_ratio_cap`): the ratio in the
 * clip is against the trainer's own log-prob at the call, `pi_old` (verl recomputes it before
 * the update), and the loss is multiplied by `sg(min(pi_old / pi_sampler, cap))`. gyre makes
 * one optimizer step per batch, so the gradient is taken at `pi = pi_old`: `r = 1`, the clip
 * cannot act, and the gradient is `-min(rho, cap)·A` per token, importance_sampling's with
 * the same cap; the sampler's drift is corrected by the truncated weight, not clipped.
 *
 * The reported `loss` is the sum over active positions of the whole call divided by
 * their count (pooled token mean); `loss:sum` and `active_tokens` are reported too.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { BackendError, type Datum, type LossFn, modelInputTokens } from "../contract/Contract.ts"

/** @since 0.1.0 @category models */
export interface ConfigKeySpec {
  readonly default: number
  readonly min: number
  readonly max: number
  readonly doc: string
}

// the off-policy corrections of importance_sampling, ppo and cispo (see the module doc)
const OFF_POLICY = {
  tis_cap: { default: Number.MAX_VALUE, min: 1, max: Number.MAX_VALUE, doc: "truncated importance sampling: a token's weight is min(rho, tis_cap), its gradient kept (off by default)" },
  mis_low: { default: 0, min: 0, max: 1, doc: "masked importance sampling: a token whose rho is below it trains nothing (off by default)" },
  mis_high: { default: Number.MAX_VALUE, min: 1, max: Number.MAX_VALUE, doc: "masked importance sampling: a token whose rho is above it trains nothing (off by default)" },
  mis_seq_low: { default: 0, min: 0, max: 1, doc: "sequence-level masked importance sampling: a datum whose ratio exp(sum(lp - q)) is below it trains nothing (off by default)" },
  mis_seq_high: { default: Number.MAX_VALUE, min: 1, max: Number.MAX_VALUE, doc: "sequence-level masked importance sampling: a datum whose ratio exp(sum(lp - q)) is above it trains nothing (off by default)" },
} satisfies Record<string, ConfigKeySpec>

// each loss's keys, typed per loss so that a default reads without a lookup that could miss
const CONFIG_SPECS = {
  cross_entropy: {},
  importance_sampling: OFF_POLICY,
  ppo: {
    clip_low_threshold: { default: 0.8, min: 0, max: 1, doc: "lower bound of the ratio clip" },
    clip_high_threshold: { default: 1.2, min: 1, max: Number.MAX_VALUE, doc: "upper bound of the ratio clip" },
    ...OFF_POLICY,
  },
  cispo: {
    clip_low_threshold: { default: 0.0, min: 0, max: 1, doc: "lower bound of the detached ratio" },
    clip_high_threshold: { default: 4.0, min: 1, max: Number.MAX_VALUE, doc: "upper bound of the detached ratio" },
    ...OFF_POLICY,
  },
  dro: {
    beta: { default: 0.05, min: 0, max: Number.MAX_VALUE, doc: "weight of the quadratic off-policy penalty" },
  },
  dppo: {
    delta_low: { default: 0.2, min: 0, max: 1, doc: "mask when A<0 and p - mu < -delta_low" },
    delta_high: { default: 0.2, min: 0, max: 1, doc: "mask when A>0 and p - mu > delta_high" },
  },
  // the GSPO paper's clip range, (1 - 3e-4, 1 + 4e-4): sequence ratios stay near 1
  gspo: {
    clip_low_threshold: { default: 1 - 3e-4, min: 0, max: 1, doc: "lower bound of the sequence ratio clip" },
    clip_high_threshold: { default: 1 + 4e-4, min: 1, max: Number.MAX_VALUE, doc: "upper bound of the sequence ratio clip" },
  },
} satisfies Record<LossFn, Record<string, ConfigKeySpec>>

/**
 * Allowed `loss_fn_config` keys per loss, with defaults and inclusive ranges.
 *
 * cispo defaults: the references disagree (0.8 / 1.2 in our Loops notes, where the
 * default is only inferred from ppo; 0.0 / 4.0 in Tinker's documented protocol). We use
 * Tinker's documented 0.0 / 4.0: it is the only default actually published, and it
 * matches what CISPO is for, keeping a gradient on every token and only capping large
 * importance weights, whereas 0.8 / 1.2 would make it a second PPO.
 *
 * dro's `beta` defaults to 0.05, the example value in the documentation (no default is
 * published). dppo follows the TV-mask variant with delta 0.2 on both sides.
 * @since 0.1.0 @category models
 */
export const LOSS_CONFIG: Record<LossFn, Record<string, ConfigKeySpec>> = CONFIG_SPECS

/** dro's `beta` when `loss_fn_config` gives none. @since 0.1.0 @category models */
export const DRO_BETA_DEFAULT: number = CONFIG_SPECS.dro.beta.default

/** @since 0.1.0 @category models */
export const LOSS_NAMES = Object.keys(LOSS_CONFIG) as ReadonlyArray<LossFn>

/** Inputs each loss reads from `lossFnInputs`. @since 0.1.0 @category models */
export const LOSS_INPUTS: Record<LossFn, { readonly required: ReadonlyArray<string>; readonly optional: ReadonlyArray<string> }> = {
  cross_entropy: { required: [], optional: ["target_tokens", "weights"] },
  importance_sampling: { required: ["logprobs", "advantages"], optional: ["target_tokens"] },
  ppo: { required: ["logprobs", "advantages"], optional: ["target_tokens"] },
  cispo: { required: ["logprobs", "advantages"], optional: ["target_tokens"] },
  dro: { required: ["logprobs", "advantages"], optional: ["target_tokens"] },
  dppo: { required: ["logprobs", "advantages"], optional: ["target_tokens"] },
  gspo: { required: ["logprobs", "advantages"], optional: ["target_tokens"] },
}

/** A validated config with every default filled in. @since 0.1.0 @category models */
export interface ResolvedLoss {
  readonly lossFn: LossFn
  readonly config: Readonly<Record<string, number>>
}

/** @since 0.1.0 @category combinators */
export const isLossFn = (name: string): name is LossFn => Object.prototype.hasOwnProperty.call(LOSS_CONFIG, name)

/**
 * Validates a loss name and its config; fills defaults. Returns a message naming
 * the offending key and the allowed keys on failure.
 * @since 0.1.0 @category combinators
 */
export const resolveLoss = (
  lossFn: string,
  config: Readonly<Record<string, unknown>> | undefined,
): { readonly ok: true; readonly value: ResolvedLoss } | { readonly ok: false; readonly message: string } => {
  if (!isLossFn(lossFn)) return { ok: false, message: `unknown loss ${JSON.stringify(lossFn)}; known losses: ${LOSS_NAMES.join(", ")}` }
  const spec = LOSS_CONFIG[lossFn]
  const allowed = Object.keys(spec)
  const allowedText = allowed.length === 0 ? "none (this loss takes no config)" : allowed.join(", ")
  const out: Record<string, number> = {}
  for (const [k, s] of Object.entries(spec)) out[k] = s.default
  for (const [key, value] of Object.entries(config ?? {})) {
    const s = spec[key]
    if (!s) return { ok: false, message: `loss_fn_config key ${JSON.stringify(key)} is not accepted by ${lossFn}; allowed keys: ${allowedText}` }
    if (typeof value !== "number" || !Number.isFinite(value)) {
      return { ok: false, message: `loss_fn_config.${key} must be a finite number, got ${String(value)} (allowed keys for ${lossFn}: ${allowedText})` }
    }
    if (value < s.min || value > s.max) {
      const range = s.max === Number.MAX_VALUE ? `>= ${s.min}` : `in [${s.min}, ${s.max}]`
      return { ok: false, message: `loss_fn_config.${key} must be ${range} for ${lossFn}, got ${value} (allowed keys: ${allowedText})` }
    }
    out[key] = value
  }
  const resolved: ResolvedLoss = { lossFn, config: out }
  if (lossFn === "ppo" || lossFn === "cispo" || lossFn === "gspo") {
    if (param(resolved, "clip_low_threshold") > param(resolved, "clip_high_threshold")) {
      return { ok: false, message: `loss_fn_config.clip_low_threshold (${out["clip_low_threshold"]}) must not exceed clip_high_threshold (${out["clip_high_threshold"]})` }
    }
  }
  return { ok: true, value: resolved }
}

/** `resolveLoss` as an Effect failing with `BackendError` (InvalidInput). @since 0.1.0 @category combinators */
export const validateLoss = (operation: string, lossFn: string, config: Readonly<Record<string, unknown>> | undefined) => {
  const r = resolveLoss(lossFn, config)
  return r.ok ? Effect.succeed(r.value) : Effect.fail(new BackendError({ reason: "InvalidInput", operation, message: r.message }))
}

const clamp = (x: number, lo: number, hi: number) => (x < lo ? lo : x > hi ? hi : x)

/**
 * A key of a resolved config: `resolveLoss` fills every key of the loss with its default,
 * so a missing one means the config did not come from it.
 */
const param = (r: ResolvedLoss, key: string): number => {
  const value = r.config[key]
  if (value === undefined) throw new Error(`the ${r.lossFn} config has no ${key}: build it with resolveLoss, which fills every default`)
  return value
}

/**
 * A sequence loss's view of its datum (gspo): the mean of `lp - q` over the datum's active
 * positions, whose exponential is the sequence ratio.
 * @since 0.1.0 @category models
 */
export interface Sequence {
  readonly meanLogRatio: number
  /** the sum of `lp - q` over the active positions: the log of the sequence's ratio */
  readonly sumLogRatio?: number | undefined
}

/** Whether a loss reads its datum's `Sequence` (gspo). @since 0.1.0 @category combinators */
export const isSequenceLoss = (lossFn: LossFn): boolean => lossFn === "gspo"

/**
 * Whether a loss as configured reads its datum's `Sequence`: gspo, and a sequence-level
 * mask (`mis_seq_low`, `mis_seq_high`).
 * @since 0.1.0 @category combinators
 */
export const needsSequence = (r: ResolvedLoss): boolean =>
  isSequenceLoss(r.lossFn) || (r.config["mis_seq_low"] ?? 0) > 0 || (r.config["mis_seq_high"] ?? Number.MAX_VALUE) < Number.MAX_VALUE

/**
 * The `Sequence` of one datum: `lps` the learner log-probs, `q` the sampler's, `active`
 * whether each position is active.
 * @since 0.1.0 @category combinators
 */
export const sequenceOf = (lps: ArrayLike<number>, q: ArrayLike<number> | undefined, active: (i: number) => boolean): Sequence => {
  let sum = 0
  let n = 0
  for (let i = 1; i < lps.length; i++) {
    if (!active(i)) continue
    sum += lps[i]! - (q ? q[i]! : 0)
    n++
  }
  return { meanLogRatio: n === 0 ? 0 : sum / n, sumLogRatio: sum }
}

/**
 * The loss at one active position and its derivative with respect to `lp`
 * (the sampler log-prob `q`, advantage `A` and weight `w` are constants; a sequence loss
 * also reads its datum's `sequence`).
 * @since 0.1.0 @category combinators
 */
export const tokenLoss = (r: ResolvedLoss, lp: number, q: number, A: number, w: number, sequence?: Sequence): { readonly loss: number; readonly dlp: number } => {
  switch (r.lossFn) {
    case "cross_entropy":
      return { loss: -w * lp, dlp: -w }
    case "importance_sampling": {
      const rho = Math.exp(lp - q)
      if (isMasked(r, rho, sequence)) return { loss: 0, dlp: 0 }
      // truncated: the weight min(rho, cap) is a constant times rho, so the gradient keeps its direction
      const weight = Math.min(rho, param(r, "tis_cap"))
      return { loss: -weight * A, dlp: -weight * A }
    }
    case "ppo": {
      const rho = Math.exp(lp - q)
      if (isMasked(r, rho, sequence)) return { loss: 0, dlp: 0 }
      // decoupled (tis_cap): the ratio to pi_old = sg(lp) is 1 here, inside any clip
      if (truncates(r)) return { loss: -Math.min(rho, param(r, "tis_cap")) * A, dlp: -Math.min(rho, param(r, "tis_cap")) * A }
      const unclipped = rho * A
      const clipped = clamp(rho, param(r, "clip_low_threshold"), param(r, "clip_high_threshold")) * A
      return unclipped <= clipped ? { loss: -unclipped, dlp: -unclipped } : { loss: -clipped, dlp: 0 }
    }
    case "cispo": {
      const rho = Math.exp(lp - q)
      if (isMasked(r, rho, sequence)) return { loss: 0, dlp: 0 }
      // decoupled (tis_cap): the detached ratio to pi_old is clip(1) = 1, times the truncated weight
      const coef = (truncates(r) ? Math.min(rho, param(r, "tis_cap")) : clamp(rho, param(r, "clip_low_threshold"), param(r, "clip_high_threshold"))) * A
      return { loss: -coef * lp, dlp: -coef }
    }
    case "dro": {
      const beta = param(r, "beta")
      const d = lp - q
      return { loss: -(lp * A - 0.5 * beta * d * d), dlp: -(A - beta * d) }
    }
    case "dppo": {
      const rho = Math.exp(lp - q)
      const delta = Math.exp(lp) - Math.exp(q)
      const masked = (A > 0 && delta > param(r, "delta_high")) || (A < 0 && delta < -param(r, "delta_low"))
      return masked ? { loss: 0, dlp: 0 } : { loss: -rho * A, dlp: -rho * A }
    }
    case "gspo": {
      if (sequence === undefined) throw new Error("gspo reads its datum's sequence ratio: pass sequenceOf(...) to tokenLoss")
      const s = Math.exp(sequence.meanLogRatio)
      const unclipped = s * A
      const clipped = clamp(s, param(r, "clip_low_threshold"), param(r, "clip_high_threshold")) * A
      // each position carries the sequence's term; d(n copies)/dlp_t = n · (s/n) · A
      return unclipped <= clipped ? { loss: -unclipped, dlp: -unclipped } : { loss: -clipped, dlp: 0 }
    }
  }
}

/** Whether `tis_cap` is given (below its default): ppo and cispo then take verl's decoupled form. */
const truncates = (r: ResolvedLoss): boolean => (r.config["tis_cap"] ?? Number.MAX_VALUE) < Number.MAX_VALUE

/**
 * Whether an off-policy mask drops a token: its ratio `rho` outside [`mis_low`, `mis_high`],
 * or its datum's sequence ratio outside [`mis_seq_low`, `mis_seq_high`] (compared in log
 * space: `exp` of a long sequence's sum overflows).
 */
const isMasked = (r: ResolvedLoss, rho: number, sequence: Sequence | undefined): boolean => {
  if (rho < param(r, "mis_low") || rho > param(r, "mis_high")) return true
  const low = param(r, "mis_seq_low")
  const high = param(r, "mis_seq_high")
  if (low <= 0 && high >= Number.MAX_VALUE) return false
  if (sequence?.sumLogRatio === undefined) throw new Error(`${r.lossFn} with mis_seq_low or mis_seq_high reads its datum's sequence ratio: pass sequenceOf(...) to tokenLoss`)
  return sequence.sumLogRatio < Math.log(low) || sequence.sumLogRatio > Math.log(high)
}

/**
 * Whether a position counts (adds to the loss and to its denominator). Position 0
 * never does: nothing predicts the first token.
 * @since 0.1.0 @category combinators
 */
export const isActive = (lossFn: LossFn, position: number, target: number, weight: number, advantage: number): boolean => {
  if (position === 0 || target === -100) return false
  return lossFn === "cross_entropy" ? weight > 0 : advantage !== 0
}

/**
 * Whether a loss as configured can clip or mask a token (ppo, cispo, dppo, and
 * importance_sampling with an off-policy correction): the trainer then reports `clip_fraction`.
 * @since 0.1.0 @category combinators
 */
export const canClip = (r: ResolvedLoss): boolean =>
  r.lossFn === "ppo" || r.lossFn === "cispo" || r.lossFn === "dppo" || r.lossFn === "gspo" ||
  (r.lossFn === "importance_sampling" && (truncates(r) || param(r, "mis_low") > 0 || param(r, "mis_high") < Number.MAX_VALUE || needsSequence(r)))

/**
 * Whether the clip (ppo, cispo), the trust-region mask (dppo), or the truncation or mask
 * of importance_sampling's off-policy correction is in effect: reported as `clip_fraction`.
 * @since 0.1.0 @category combinators
 */
export const isClipped = (r: ResolvedLoss, lp: number, q: number, A: number, sequence?: Sequence): boolean => {
  switch (r.lossFn) {
    case "gspo": {
      const s = Math.exp(sequence?.meanLogRatio ?? lp - q)
      return s * A > clamp(s, param(r, "clip_low_threshold"), param(r, "clip_high_threshold")) * A
    }
    case "importance_sampling": {
      const rho = Math.exp(lp - q)
      return rho > param(r, "tis_cap") || isMasked(r, rho, sequence)
    }
    case "ppo": {
      const rho = Math.exp(lp - q)
      if (isMasked(r, rho, sequence)) return true
      if (truncates(r)) return rho > param(r, "tis_cap")
      return rho * A > clamp(rho, param(r, "clip_low_threshold"), param(r, "clip_high_threshold")) * A
    }
    case "cispo": {
      const rho = Math.exp(lp - q)
      if (isMasked(r, rho, sequence)) return true
      if (truncates(r)) return rho > param(r, "tis_cap")
      return rho < param(r, "clip_low_threshold") || rho > param(r, "clip_high_threshold")
    }
    case "dppo": {
      const delta = Math.exp(lp) - Math.exp(q)
      return (A > 0 && delta > param(r, "delta_high")) || (A < 0 && delta < -param(r, "delta_low"))
    }
    default:
      return false
  }
}

/**
 * The positions of `data` that count toward a call's pooled token-mean loss (see
 * `Loss.isActive`): the denominator of `loss`.
 * @since 0.1.0 @category combinators
 */
export const activeCount = (data: ReadonlyArray<Datum>, lossFn: LossFn): number => {
  let active = 0
  for (const d of data) {
    const tokens = modelInputTokens(d.modelInput)
    const target = d.lossFnInputs["target_tokens"]?.data
    const weight = d.lossFnInputs["weights"]?.data
    const adv = d.lossFnInputs["advantages"]?.data
    // an input shorter than the tokens (validation refuses it) reads NaN past its end, which
    // isActive treats as it did undefined: never -100, not a weight > 0, an advantage != 0
    for (let i = 1; i < tokens.length; i++) {
      if (isActive(lossFn, i, target ? target[i] ?? Number.NaN : tokens[i]!, weight ? weight[i] ?? Number.NaN : 1, adv ? adv[i] ?? Number.NaN : 0)) active++
    }
  }
  return active
}

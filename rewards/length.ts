/**
 * Length rewards: hard limits in characters or tokens, a soft penalty that grows
 * linearly over a range of lengths, and a check that the completion was not cut off.
 *
 * @since 0.1.0
 */
import { Reward } from "gyre"

const checkCount = (who: string, what: string, n: number) => {
  if (!(Number.isFinite(n) && n >= 0)) throw new TypeError(`${who}: ${what} must be a finite number >= 0, got ${n}`)
}

/**
 * 1 when the completion has at most `max` characters (UTF-16 code units), else 0.
 *
 * @example
 * maxLength(12) // 1 for " 56", 0 for a 40-character answer
 * @since 0.1.0 @category constructors
 */
export const maxLength = <P>(max: number, name = "brief"): Reward.Reward<P> => {
  checkCount("maxLength", "max", max)
  return Reward.make<P>(name, (r) => (r.completion.length <= max ? 1 : 0))
}

/**
 * 1 when the completion has at most `max` tokens, else 0.
 *
 * @example
 * maxTokens(256) // 0 for a completion of 300 tokens
 * @since 0.1.0 @category constructors
 */
export const maxTokens = <P>(max: number, name = "brief"): Reward.Reward<P> => {
  checkCount("maxTokens", "max", max)
  return Reward.make<P>(name, (r) => (r.tokens.length <= max ? 1 : 0))
}

/** Options of `lengthPenalty`. @since 0.1.0 @category models */
export interface LengthPenaltyOptions {
  /** no penalty up to this length */
  readonly from: number
  /** the full penalty from this length on (must be greater than `from`) */
  readonly to: number
  /** what the lengths count (default "tokens") */
  readonly unit?: "tokens" | "chars"
  /** the full penalty, as a positive number (default 1: the score falls to -1) */
  readonly penalty?: number
  /** component name (default "length_penalty") */
  readonly name?: string
}

/**
 * A soft length penalty: 0 up to `from`, then falling linearly to `-penalty` at `to`,
 * and `-penalty` beyond. Add it to a weighted reward. With `from = max - buffer` and
 * `to = max` it is DAPO's soft overlong punishment.
 *
 * @example
 * lengthPenalty({ from: 96, to: 128 }) // 0 at 96 tokens, -0.5 at 112, -1 at 128 and beyond
 * @since 0.1.0 @category constructors
 */
export const lengthPenalty = <P>(options: LengthPenaltyOptions): Reward.Reward<P> => {
  const { from, to } = options
  const penalty = options.penalty ?? 1
  const unit = options.unit ?? "tokens"
  checkCount("lengthPenalty", "from", from)
  checkCount("lengthPenalty", "penalty", penalty)
  if (!(Number.isFinite(to) && to > from)) throw new TypeError(`lengthPenalty: to must be a finite number greater than from (${from}), got ${to}`)
  if (unit !== "tokens" && unit !== "chars") throw new TypeError(`lengthPenalty: unit must be "tokens" or "chars", got ${String(unit)}`)
  return Reward.make<P>(options.name ?? "length_penalty", (r) => {
    const length = unit === "tokens" ? r.tokens.length : r.completion.length
    if (length <= from) return 0
    if (length >= to) return -penalty
    return (-penalty * (length - from)) / (to - from)
  })
}

/**
 * 1 when the completion ended on its own (stop reason "stop"), 0 when the sampler cut
 * it off at the token limit (stop reason "length").
 *
 * @example
 * Reward.weighted({ correct: [numericAnswer(gold), 1], finished: [notTruncated(), 0] })
 * @since 0.1.0 @category constructors
 */
export const notTruncated = <P>(name = "finished"): Reward.Reward<P> =>
  Reward.make<P>(name, (r) => (r.stopReason === "stop" ? 1 : 0))

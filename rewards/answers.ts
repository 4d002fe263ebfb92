/**
 * Answer rewards: numeric answer extraction and equivalence, exact match.
 */
import { Effect } from "effect"
import { Reward } from "gyre"

/** Where the answer is read from a completion. */
export type AnswerMode = "last" | "first" | "tagged"

export interface NumericAnswerOptions {
  /** component name (default "correct") */
  readonly name?: string
  /** "last" number (default), "first" number, or the number inside `<tag>...</tag>` */
  readonly mode?: AnswerMode
  /** tag for mode "tagged" (default "answer") */
  readonly tag?: string
  /** absolute tolerance for non-integers (default 1e-9) */
  readonly tolerance?: number
}

const NUMBER = /-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\/\d+)?|-?\.\d+/g

/** Parses an integer, decimal, fraction or a number with thousands separators. */
export const parseNumber = (text: string): number | undefined => {
  const t = text.trim().replace(/,(?=\d{3}\b)/g, "")
  if (/^-?\d+\/\d+$/.test(t)) {
    const [n, d] = t.split("/").map(Number) as [number, number]
    return d === 0 ? undefined : n / d
  }
  if (/^-?(?:\d+\.?\d*|\.\d+)$/.test(t)) return Number(t)
  return undefined
}

/** Every number in a text, in order. */
export const extractNumbers = (text: string): Array<number> =>
  [...text.matchAll(NUMBER)].map((m) => parseNumber(m[0])).filter((n): n is number => n !== undefined)

/** The answer a completion gives under a mode, or undefined. */
export const extractAnswer = (text: string, mode: AnswerMode = "last", tag = "answer"): number | undefined => {
  if (mode === "tagged") {
    const m = new RegExp(`<${tag}>([\\s\\S]*?)</${tag}>`).exec(text)
    if (!m) return undefined
    const inner = extractNumbers(m[1]!)
    return inner.length === 1 ? inner[0] : undefined
  }
  const all = extractNumbers(text)
  return mode === "first" ? all[0] : all[all.length - 1]
}

/**
 * 1 when the completion's answer equals the gold number, else 0. A completion with no
 * number at all is the model's fault and scores 0 too.
 */
export const numericAnswer = <P>(gold: (problem: P) => number, options: NumericAnswerOptions = {}) =>
  Reward.make<P>(options.name ?? "correct", (r) => {
    const answer = extractAnswer(r.completion, options.mode ?? "last", options.tag ?? "answer")
    if (answer === undefined) return Effect.fail(new Reward.ModelFault({ penalty: 0, message: "no number in the completion" }))
    const want = gold(r.problem)
    return Math.abs(answer - want) <= (options.tolerance ?? 1e-9) * Math.max(1, Math.abs(want)) ? 1 : 0
  })

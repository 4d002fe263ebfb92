/**
 * Exact match of text answers: `normalizeText` (case, whitespace, punctuation, articles)
 * and `exactMatch`, which compares a completion, or its tagged answer, with the
 * problem's accepted texts.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { Reward } from "gyre"
import { lastTagContent, tagContents } from "../format.ts"
import { type Thinking, thinkingReader, UNFINISHED_THINKING } from "./Thinking.ts"

/**
 * What `normalizeText` ignores; each flag set to true ignores that difference.
 * @since 0.1.0 @category models
 */
export interface Normalization {
  /** letter case */
  readonly case?: boolean
  /** runs of whitespace, and whitespace at the ends */
  readonly whitespace?: boolean
  /** punctuation and symbols (removed, as in SQuAD's evaluation) */
  readonly punctuation?: boolean
  /** the English articles a, an, the */
  readonly articles?: boolean
}

const ALL: Required<Normalization> = { case: true, whitespace: true, punctuation: true, articles: true }

/**
 * Normalizes a text for comparison. `true` (the default) ignores all four kinds of
 * difference, `false` none.
 *
 * @example
 * normalizeText("  The Eiffel   Tower! ") // => "eiffel tower"
 * normalizeText("The Tower", { case: true }) // => "the tower"
 * @since 0.1.0 @category utils
 */
export const normalizeText = (text: string, normalize: boolean | Normalization = true): string => {
  const n = normalize === true ? ALL : normalize === false ? {} : normalize
  let t = text.normalize("NFC")
  if (n.case) t = t.toLowerCase()
  if (n.punctuation) t = t.replace(/[\p{P}\p{S}]/gu, "")
  if (n.articles) t = t.replace(/(?<![\p{L}\p{N}])(?:a|an|the)(?![\p{L}\p{N}])/giu, " ")
  if (n.whitespace) t = t.replace(/\s+/g, " ").trim()
  return t
}

/** Options of `exactMatch`. @since 0.1.0 @category models */
export interface ExactMatchOptions {
  /** component name (default "exact") */
  readonly name?: string
  /** what differences to ignore (default true: case, whitespace, punctuation, articles) */
  readonly normalize?: boolean | Normalization
  /** compare only the content of the last `<tag>...</tag>` block */
  readonly tag?: string
  /** the score of a completion that gives no answer (default 0) */
  readonly noAnswerPenalty?: number
  /** read only the final answer, after the last thinking block: true for `<think>...</think>`, or markers (see `Thinking`) */
  readonly thinking?: Thinking
}

/**
 * 1 when the completion (or its tagged answer) equals the gold text, or one of several
 * accepted gold texts, after normalization; else 0.
 *
 * `gold` returning `undefined` means the reward does not apply (`NotApplicable`). A
 * completion with no answer (empty after normalization, or without the tag when one
 * is asked for), or with several tagged answers that differ (a hedge), is the model's
 * fault and scores `noAnswerPenalty`. With `thinking`, only what follows the last
 * thinking block is compared, and a completion that never ends its thinking block gives
 * no answer.
 *
 * @example
 * exactMatch((p: { capital: string }) => p.capital) // 1 for " paris. " when the gold is "Paris"
 * exactMatch((p: { aliases: Array<string> }) => p.aliases, { tag: "answer" })
 * exactMatch((p: { capital: string }) => p.capital, { thinking: true }) // reads what follows </think>
 * @since 0.1.0 @category constructors
 */
export const exactMatch = <P>(
  gold: (problem: P) => string | ReadonlyArray<string> | undefined,
  options: ExactMatchOptions = {},
): Reward.Reward<P> => {
  const normalize = options.normalize ?? true
  const penalty = options.noAnswerPenalty ?? 0
  if (!Number.isFinite(penalty)) throw new TypeError(`exactMatch: noAnswerPenalty must be finite, got ${penalty}`)
  const finalPart = thinkingReader("exactMatch", options.thinking)
  return Reward.make<P>(options.name ?? "exact", (r) => {
    const raw = gold(r.problem)
    if (raw === undefined) return Effect.fail(new Reward.NotApplicable({ message: "the problem has no gold text" }))
    const accepted = (typeof raw === "string" ? [raw] : raw).map((g) => normalizeText(g, normalize))
    const completion = finalPart(r.completion)
    if (completion === undefined) return Effect.fail(new Reward.ModelFault({ penalty, message: UNFINISHED_THINKING }))
    if (options.tag !== undefined) {
      const given = new Set(tagContents(completion, options.tag).map((b) => normalizeText(b, normalize)).filter((b) => b.trim() !== ""))
      if (given.size > 1) return Effect.fail(new Reward.ModelFault({ penalty, message: `several different <${options.tag}> answers` }))
    }
    const text = options.tag === undefined ? completion : lastTagContent(completion, options.tag)
    const answer = text === undefined ? "" : normalizeText(text, normalize)
    if (answer.trim() === "") {
      return Effect.fail(new Reward.ModelFault({ penalty, message: options.tag === undefined ? "empty answer" : `no <${options.tag}> block` }))
    }
    return accepted.includes(answer) ? 1 : 0
  })
}

/**
 * Answer rewards: numeric answer extraction and equivalence, and exact match of text
 * answers.
 *
 * Numbers are read in the forms models write them: integers, negatives (`-5`, `−5`),
 * decimals (`3.25`, `.5`), fractions (`3/4`, `\frac{3}{4}`), thousands separators
 * (`1,234,567`), scientific notation (`6.02e23`). A `-` right after a digit or a
 * closing bracket is a minus sign of an expression, not a sign (`7-5` holds 7 and 5).
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { Reward } from "gyre"
import { lastTagContent } from "./format.ts"

// ===== Numbers =====

/**
 * One number token. Groups: 1 sign, 2 integer part (maybe with thousands separators),
 * 3 fractional digits, 4 digits of a leading-dot decimal, 5 exponent, 6 denominator.
 */
const NUMBER =
  /(?<![\d)\]}])([-+]?)(?:(\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.(\d+))?|\.(\d+))(?:[eE]([-+]?\d+)(?!\d|\.\d))?(?:\/(\d+)(?!\d|\.\d))?/g

const WHOLE_NUMBER = new RegExp(`^(?:${NUMBER.source})$`)

/** Rewrites the LaTeX and Unicode spellings of numbers into plain ones. */
const normalizeMath = (text: string): string =>
  text
    .replace(/[\u2212\u2012\u2013\uFE63\uFF0D]/g, "-")
    .replace(/\\[dt]?frac\s*\{\s*([-+]?[\d.,]+)\s*\}\s*\{\s*([\d.,]+)\s*\}/g, "$1/$2")
    .replace(/\\[dt]?frac(\d)(\d)/g, "$1/$2")
    .replace(/(\d)\{,\}(?=\d{3})/g, "$1,")
    .replace(/(\d)\\[,!](?=\d{3})/g, "$1,")

const tokenValue = (m: RegExpMatchArray): number | undefined => {
  const sign = m[1] === "-" ? -1 : 1
  const mantissa = m[2] !== undefined ? `${m[2].replace(/,/g, "")}${m[3] !== undefined ? `.${m[3]}` : ""}` : `0.${m[4]!}`
  let value = Number(m[5] !== undefined ? `${mantissa}e${m[5]}` : mantissa)
  if (m[6] !== undefined) {
    const denominator = Number(m[6])
    if (denominator === 0) return undefined
    value /= denominator
  }
  value *= sign
  return Number.isFinite(value) ? value : undefined
}

/**
 * Every number in a text, in order. Tokens that do not denote a finite number
 * (`1/0`, a 400-digit integer) are skipped.
 *
 * @example
 * extractNumbers("From 1,200 apples, -3/4 were sold for $2.50") // => [1200, -0.75, 2.5]
 * @since 0.1.0 @category utils
 */
export const extractNumbers = (text: string): Array<number> => {
  const out: Array<number> = []
  for (const m of normalizeMath(text).matchAll(NUMBER)) {
    const v = tokenValue(m)
    if (v !== undefined) out.push(v)
  }
  return out
}

/**
 * Parses a text that is one number and nothing else (surrounding whitespace, a
 * leading `$`, a trailing `%` or `.` allowed). Returns undefined otherwise.
 *
 * @example
 * parseNumber("1,234") // => 1234
 * parseNumber("-3/4") // => -0.75
 * parseNumber("12 apples") // => undefined
 * @since 0.1.0 @category utils
 */
export const parseNumber = (text: string): number | undefined => {
  const t = normalizeMath(text).trim().replace(/^\\?\$\s*/, "").replace(/\s*(?:\\?%|\.)$/, "")
  const m = WHOLE_NUMBER.exec(t)
  return m === null ? undefined : tokenValue(m)
}

/** The content of the last `\boxed{...}` (or `\fbox{...}`), braces balanced, or undefined. */
const lastBoxed = (text: string): string | undefined => {
  const re = /\\(?:boxed|fbox)\s*\{/g
  let start: number | undefined
  for (let m = re.exec(text); m !== null; m = re.exec(text)) start = m.index + m[0].length
  if (start === undefined) return undefined
  let depth = 1
  for (let i = start; i < text.length; i++) {
    if (text[i] === "{") depth++
    else if (text[i] === "}" && --depth === 0) return text.slice(start, i)
  }
  return undefined
}

/** The one number a delimited answer holds; none or several make it no answer. */
const singleNumber = (content: string | undefined): number | undefined => {
  if (content === undefined) return undefined
  const whole = parseNumber(content)
  if (whole !== undefined) return whole
  const all = extractNumbers(content)
  return all.length === 1 ? all[0] : undefined
}

/**
 * Where the answer is read from a completion:
 * - `"last"`: the last number in the text (the default);
 * - `"first"`: the first number;
 * - `"tagged"`: the number inside the last `<tag>...</tag>` block (tag "answer" by default);
 * - `"boxed"`: the number inside the last `\boxed{...}`;
 * - `"auto"`: tagged if the completion has the tag, else boxed if it has a `\boxed{}`,
 *   else the number after a final `####` (GSM8K style), else the last number.
 *
 * In the tagged and boxed modes the block must hold exactly one number
 * (`<answer>x = 42</answer>` is 42; `<answer>3 or 4</answer>` is no answer).
 * @since 0.1.0 @category models
 */
export type AnswerMode = "last" | "first" | "tagged" | "boxed" | "auto"

/**
 * The numeric answer a completion gives under a mode, or undefined when it gives none.
 *
 * @example
 * extractAnswer("2 + 2 = 4, so 4.", "last") // => 4
 * extractAnswer("I think 5. <answer>4</answer>", "tagged") // => 4
 * extractAnswer("so \\boxed{\\frac{3}{4}}", "boxed") // => 0.75
 * @since 0.1.0 @category utils
 */
export const extractAnswer = (text: string, mode: AnswerMode = "last", tag = "answer"): number | undefined => {
  switch (mode) {
    case "tagged":
      return singleNumber(lastTagContent(text, tag))
    case "boxed":
      return singleNumber(lastBoxed(text))
    case "first":
      return extractNumbers(text)[0]
    case "last": {
      const all = extractNumbers(text)
      return all[all.length - 1]
    }
    case "auto": {
      const tagged = lastTagContent(text, tag)
      if (tagged !== undefined) return singleNumber(tagged)
      const boxed = lastBoxed(text)
      if (boxed !== undefined) return singleNumber(boxed)
      const hashes = text.lastIndexOf("####")
      if (hashes >= 0) {
        const after = extractNumbers(text.slice(hashes + 4))[0]
        if (after !== undefined) return after
      }
      return extractAnswer(text, "last")
    }
  }
}

/**
 * Numeric equivalence: integers compare exactly; otherwise `|a - b| <= tolerance *
 * max(1, |b|)` (a relative tolerance, absolute below 1).
 *
 * @example
 * numbersEqual(0.75, 3 / 4) // => true
 * numbersEqual(1234567890123, 1234567890124) // => false
 * @since 0.1.0 @category utils
 */
export const numbersEqual = (a: number, b: number, tolerance = 1e-9): boolean => {
  if (!Number.isFinite(a) || !Number.isFinite(b)) return false
  if (Number.isInteger(a) && Number.isInteger(b)) return a === b
  return Math.abs(a - b) <= tolerance * Math.max(1, Math.abs(b))
}

/** Options of `numericAnswer`. @since 0.1.0 @category models */
export interface NumericAnswerOptions {
  /** component name (default "correct") */
  readonly name?: string
  /** where the answer is read (default "last"); see `AnswerMode` */
  readonly mode?: AnswerMode
  /** tag for the "tagged" and "auto" modes (default "answer") */
  readonly tag?: string
  /** tolerance for non-integers, relative above 1 and absolute below (default 1e-9) */
  readonly tolerance?: number
  /** the score of a completion that gives no answer at all (default 0) */
  readonly noAnswerPenalty?: number
}

/**
 * 1 when the completion's answer equals the gold number, else 0.
 *
 * `gold` returns the answer as a number or as text (`"1,234"`, `"3/4"`); `undefined`
 * means the problem has no numeric answer, and the reward does not apply
 * (`NotApplicable`). A completion that gives no answer is the model's fault
 * (`ModelFault`) and scores `noAnswerPenalty`. A gold answer that is not a finite
 * number is a bug in the data: the run stops with a `RewardDefect`.
 *
 * @example
 * numericAnswer((p: { a: number; b: number }) => p.a + p.b)
 * numericAnswer((p: { answer: string }) => p.answer, { mode: "tagged", noAnswerPenalty: -0.5 })
 * @since 0.1.0 @category constructors
 */
export const numericAnswer = <P>(
  gold: (problem: P) => number | string | undefined,
  options: NumericAnswerOptions = {},
): Reward.Reward<P> => {
  const name = options.name ?? "correct"
  const mode = options.mode ?? "last"
  const tag = options.tag ?? "answer"
  const tolerance = options.tolerance ?? 1e-9
  const penalty = options.noAnswerPenalty ?? 0
  if (!(tolerance >= 0 && Number.isFinite(tolerance))) throw new TypeError(`numericAnswer: tolerance must be a finite number >= 0, got ${tolerance}`)
  if (!Number.isFinite(penalty)) throw new TypeError(`numericAnswer: noAnswerPenalty must be finite, got ${penalty}`)
  const noAnswer = mode === "tagged" ? `no <${tag}> block holding one number` : mode === "boxed" ? "no \\boxed{} holding one number" : "no number in the completion"
  return Reward.make<P>(name, (r) => {
    const raw = gold(r.problem)
    if (raw === undefined) return Effect.fail(new Reward.NotApplicable({ message: "the problem has no numeric answer" }))
    const want = typeof raw === "number" ? raw : parseNumber(raw)
    if (want === undefined || !Number.isFinite(want)) throw new TypeError(`the gold answer ${JSON.stringify(raw)} is not a finite number`)
    const answer = extractAnswer(r.completion, mode, tag)
    if (answer === undefined) return Effect.fail(new Reward.ModelFault({ penalty, message: noAnswer }))
    return numbersEqual(answer, want, tolerance) ? 1 : 0
  })
}

// ===== Text =====

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
}

/**
 * 1 when the completion (or its tagged answer) equals the gold text, or one of several
 * accepted gold texts, after normalization; else 0.
 *
 * `gold` returning `undefined` means the reward does not apply (`NotApplicable`). A
 * completion with no answer (empty after normalization, or without the tag when one
 * is asked for) is the model's fault and scores `noAnswerPenalty`.
 *
 * @example
 * exactMatch((p: { capital: string }) => p.capital) // 1 for " paris. " when the gold is "Paris"
 * exactMatch((p: { aliases: Array<string> }) => p.aliases, { tag: "answer" })
 * @since 0.1.0 @category constructors
 */
export const exactMatch = <P>(
  gold: (problem: P) => string | ReadonlyArray<string> | undefined,
  options: ExactMatchOptions = {},
): Reward.Reward<P> => {
  const normalize = options.normalize ?? true
  const penalty = options.noAnswerPenalty ?? 0
  if (!Number.isFinite(penalty)) throw new TypeError(`exactMatch: noAnswerPenalty must be finite, got ${penalty}`)
  return Reward.make<P>(options.name ?? "exact", (r) => {
    const raw = gold(r.problem)
    if (raw === undefined) return Effect.fail(new Reward.NotApplicable({ message: "the problem has no gold text" }))
    const accepted = (typeof raw === "string" ? [raw] : raw).map((g) => normalizeText(g, normalize))
    const text = options.tag === undefined ? r.completion : lastTagContent(r.completion, options.tag)
    const answer = text === undefined ? "" : normalizeText(text, normalize)
    if (answer.trim() === "") {
      return Effect.fail(new Reward.ModelFault({ penalty, message: options.tag === undefined ? "empty answer" : `no <${options.tag}> block` }))
    }
    return accepted.includes(answer) ? 1 : 0
  })
}

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
import { lastTagContent, tagContents } from "./format.ts"

// ===== Numbers =====

/**
 * One number token. Groups: 1 sign, 2 integer part (maybe with thousands separators),
 * 3 fractional digits, 4 digits of a leading-dot decimal, 5 exponent, 6 denominator.
 */
const NUMBER =
  /(?<![\d)\]}])([-+]?)(?:(\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.(\d+))?|\.(\d+))(?:[eE]([-+]?\d+)(?!\d|\.\d))?(?:\/(\d+)(?!\d|\.\d))?/g

const WHOLE_NUMBER = new RegExp(`^(?:${NUMBER.source})$`)

const ND = /^\p{Nd}$/u

/**
 * The value of a Unicode decimal digit (fullwidth `５`, Arabic-Indic `٥`, mathematical
 * bold `𝟓`, ...): Unicode encodes every script's digits as contiguous runs 0..9, so the
 * value is the count of digits just below it, modulo 10.
 */
const digitValue = (ch: string): string => {
  const cp = ch.codePointAt(0)!
  let k = 0
  while (cp - 1 - k >= 0 && ND.test(String.fromCodePoint(cp - 1 - k))) k++
  return String(k % 10)
}

/**
 * Rewrites the LaTeX and Unicode spellings of numbers into plain ones. Digits of every
 * script become ASCII digits, so a number is read as a reader sees it (`５７` is 57, not
 * invisible); superscripts and circled digits are not decimal digits and stay as they are.
 */
const normalizeMath = (text: string): string =>
  text
    .replace(/(?![0-9])\p{Nd}/gu, digitValue)
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
export const extractNumbers = (text: string): Array<number> => numberTokensOf(normalizeMath(text)).map((t) => t.value)

/** A number found in a normalized text, with where it lies. */
interface NumberToken {
  readonly value: number
  readonly start: number
  readonly end: number
}

const numberTokensOf = (normalized: string): Array<NumberToken> => {
  const out: Array<NumberToken> = []
  for (const m of normalized.matchAll(NUMBER)) {
    const v = tokenValue(m)
    if (v !== undefined) out.push({ value: v, start: m.index, end: m.index + m[0].length })
  }
  return out
}

/**
 * What may stand between the numbers of a list of alternatives: whitespace, commas,
 * semicolons, bars, brackets, and the words or, and, nor, either, maybe, perhaps,
 * possibly, vs, versus (`55, 56, 57`, `12 or 56`, `12 (56)`, `55\n56`).
 */
const LIST_GAP = /^(?:[\s,;|()[\]]|\b(?:or|and|nor|either|maybe|perhaps|possibly|vs|versus)\b\.?)*$/i

/**
 * Whether the text between two numbers makes them alternatives: `LIST_GAP`, after
 * dropping the markup that repeats an answer slot (`</answer><answer>`, `} \boxed{`,
 * `####`). Different slots (`</think><answer>`) are not a list.
 */
const isListGap = (gap: string): boolean =>
  LIST_GAP.test(
    gap
      .replace(/<\/([A-Za-z_][\w.-]*)\s*>\s*<\1(?:\s[^>]*)?>/gi, " ")
      .replace(/\}\s*\\(?:boxed|fbox)\s*\{/g, " ")
      .replace(/####/g, " "),
  )

/**
 * The number at one end of a text, or undefined when that number is one of a list of
 * different alternatives (`12 or 56`, `55, 56, 57`): a list hedges, it does not answer.
 * A list that repeats one number (`56, 56`) answers with it.
 */
const endNumber = (text: string, end: "first" | "last"): number | undefined => {
  const normalized = normalizeMath(text)
  const tokens = numberTokensOf(normalized)
  if (tokens.length === 0) return undefined
  const first = end === "last" ? tokens.length - 1 : 0
  const step = end === "last" ? -1 : 1
  const value = tokens[first]!.value
  for (let i = first + step; i >= 0 && i < tokens.length; i += step) {
    const [a, b] = step === -1 ? [tokens[i]!, tokens[i + 1]!] : [tokens[i - 1]!, tokens[i]!]
    if (!isListGap(normalized.slice(a.end, b.start))) break
    if (tokens[i]!.value !== value) return undefined
  }
  return value
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

/** The contents of every closed `\boxed{...}` (or `\fbox{...}`), braces balanced. */
const boxedContents = (text: string): Array<string> => {
  const re = /\\(?:boxed|fbox)\s*\{/g
  const out: Array<string> = []
  for (let m = re.exec(text); m !== null; m = re.exec(text)) {
    const start = m.index + m[0].length
    let depth = 1
    for (let i = start; i < text.length; i++) {
      if (text[i] === "{") depth++
      else if (text[i] === "}" && --depth === 0) {
        out.push(text.slice(start, i))
        break
      }
    }
  }
  return out
}

/** No number (`none`), one, or several (`many`) in a delimited answer. */
const blockNumber = (content: string): number | "none" | "many" => {
  const whole = parseNumber(content)
  if (whole !== undefined) return whole
  const all = extractNumbers(content)
  return all.length === 0 ? "none" : all.length === 1 ? all[0]! : "many"
}

/**
 * The one number the answer blocks of a completion give. Blocks without a number (a
 * restated format, `<answer>...</answer>`) are skipped; a block with several numbers, or
 * blocks that give different numbers, make it no answer: several answers hedge.
 */
const blocksNumber = (blocks: ReadonlyArray<string>): number | undefined => {
  let value: number | undefined
  for (const b of blocks) {
    const n = blockNumber(b)
    if (n === "none") continue
    if (n === "many" || (value !== undefined && n !== value)) return undefined
    value = n
  }
  return value
}

/**
 * Where the answer is read from a completion:
 * - `"last"`: the last number in the text (the default);
 * - `"first"`: the first number;
 * - `"tagged"`: the number inside the `<tag>...</tag>` blocks (tag "answer" by default);
 * - `"boxed"`: the number inside the `\boxed{...}` blocks;
 * - `"auto"`: tagged if the completion has the tag, else boxed if it has a `\boxed{}`,
 *   else the number after a final `####` (GSM8K style), else the last number.
 *
 * Hedging is no answer. In the last and first modes, a number that ends (or starts) a
 * list of different alternatives is none (`12 or 56`, `55, 56, 57`, `12 (56)`: numbers
 * separated only by whitespace, `,` `;` `|` brackets, or the words or, and, nor, either,
 * maybe, perhaps, possibly, vs). In the tagged and boxed modes a block must hold exactly
 * one number (`<answer>x = 42</answer>` is 42; `<answer>3 or 4</answer>` is no answer),
 * and blocks that give different numbers are no answer (`\boxed{55} \boxed{56}`);
 * blocks without a number (a restated format) are skipped. Digits of every script count
 * (`５６` is 56).
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
      return blocksNumber(tagContents(text, tag))
    case "boxed":
      return blocksNumber(boxedContents(text))
    case "first":
      return endNumber(text, "first")
    case "last":
      return endNumber(text, "last")
    case "auto": {
      const tagged = tagContents(text, tag)
      if (tagged.length > 0) return blocksNumber(tagged)
      const boxed = boxedContents(text)
      if (boxed.length > 0) return blocksNumber(boxed)
      // GSM8K style: the number after `####`; several `####` must agree
      const marked = text.split("####").slice(1).filter((part) => extractNumbers(part).length > 0)
      if (marked.length > 0) {
        const values = marked.map((part) => endNumber(part, "first"))
        return values.every((v) => v !== undefined && v === values[0]) ? values[0] : undefined
      }
      return endNumber(text, "last")
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

/**
 * The completion without verbatim copies of its prompt (each message's text, at least 8
 * characters long): numbers quoted from the question are not an answer to it, so echoing
 * "What is 0 plus 8?" does not answer 8.
 */
const withoutPrompt = (completion: string, prompt: string | ReadonlyArray<{ readonly content: string }>): string => {
  const texts = (typeof prompt === "string" ? [prompt] : prompt.map((m) => m.content)).map((t) => t.trim()).filter((t) => t.length >= 8)
  let out = completion
  for (const t of texts) out = out.split(t).join(" ")
  return out
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
 * 1 when the completion's answer equals the gold number, else 0. Verbatim copies of the
 * prompt in the completion are skipped (numbers quoted from the question do not answer
 * it); hedges (`12 or 56`, several different boxed answers) are no answer; see
 * `AnswerMode`.
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
    const answer = extractAnswer(withoutPrompt(r.completion, r.prompt), mode, tag)
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
 * is asked for), or with several tagged answers that differ (a hedge), is the model's
 * fault and scores `noAnswerPenalty`.
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
    if (options.tag !== undefined) {
      const given = new Set(tagContents(r.completion, options.tag).map((b) => normalizeText(b, normalize)).filter((b) => b.trim() !== ""))
      if (given.size > 1) return Effect.fail(new Reward.ModelFault({ penalty, message: `several different <${options.tag}> answers` }))
    }
    const text = options.tag === undefined ? r.completion : lastTagContent(r.completion, options.tag)
    const answer = text === undefined ? "" : normalizeText(text, normalize)
    if (answer.trim() === "") {
      return Effect.fail(new Reward.ModelFault({ penalty, message: options.tag === undefined ? "empty answer" : `no <${options.tag}> block` }))
    }
    return accepted.includes(answer) ? 1 : 0
  })
}

/**
 * fast-check arbitraries for completions: numbers in the forms models write them,
 * noise text, completions that carry an answer (plain, tagged, boxed), and arbitrary
 * completions for laws that must hold on any text.
 *
 * @since 0.1.0
 */
import * as fc from "fast-check"

// ===== Numbers =====

/**
 * How a number is written:
 * - `integer`: `42`
 * - `negative`: `-17`
 * - `decimal`: `3.25`, `-0.5`, `.5`
 * - `fraction`: `3/4`, `-7/2`
 * - `thousands`: `1,234,567`
 * - `latexFraction`: `\frac{3}{4}`, `-\frac{7}{2}`
 * @since 0.1.0 @category models
 */
export type NumberFormat = "integer" | "negative" | "decimal" | "fraction" | "thousands" | "latexFraction"

/** Every `NumberFormat`. @since 0.1.0 @category constants */
export const numberFormats: ReadonlyArray<NumberFormat> = ["integer", "negative", "decimal", "fraction", "thousands", "latexFraction"]

/** A number with the text that writes it. @since 0.1.0 @category models */
export interface FormattedNumber {
  readonly value: number
  readonly text: string
  readonly format: NumberFormat
}

/** Options of `number`. @since 0.1.0 @category models */
export interface NumberOptions {
  /** the formats to draw from (default: all) */
  readonly formats?: ReadonlyArray<NumberFormat>
  /** the largest magnitude of integer parts (default 1,000,000,000) */
  readonly max?: number
}

const formatted = (format: NumberFormat, max: number): fc.Arbitrary<FormattedNumber> => {
  const make = (text: string, value: number) => ({ value, text, format })
  switch (format) {
    case "integer":
      return fc.integer({ min: 0, max }).map((n) => make(String(n), n))
    case "negative":
      return fc.integer({ min: -max, max: -1 }).map((n) => make(String(n), n))
    case "decimal":
      return fc
        .tuple(fc.boolean(), fc.integer({ min: 0, max }), fc.stringMatching(/^\d{1,4}$/), fc.boolean())
        .map(([negative, whole, digits, leadingDot]) => {
          const body = whole === 0 && leadingDot ? `.${digits}` : `${whole}.${digits}`
          const text = `${negative ? "-" : ""}${body}`
          return make(text, Number(text))
        })
    case "fraction":
      return fc
        .tuple(fc.integer({ min: -max, max }), fc.integer({ min: 1, max: Math.max(1, Math.min(max, 10_000)) }))
        .map(([n, d]) => make(`${n}/${d}`, n / d))
    case "thousands":
      return fc
        .tuple(fc.boolean(), fc.integer({ min: 1000, max: Math.max(1000, max) }))
        .map(([negative, n]) => make(`${negative ? "-" : ""}${n.toLocaleString("en-US")}`, negative ? -n : n))
    case "latexFraction":
      return fc
        .tuple(fc.integer({ min: -max, max }), fc.integer({ min: 1, max: Math.max(1, Math.min(max, 10_000)) }))
        .map(([n, d]) => make(`${n < 0 ? "-" : ""}\\frac{${Math.abs(n)}}{${d}}`, n / d))
  }
}

/**
 * A number written in one of the given formats, with its value.
 *
 * @example
 * fc.assert(fc.property(arb.number(), ({ text, value }) => parseNumber(text) === value))
 * @since 0.1.0 @category arbitraries
 */
export const number = (options: NumberOptions = {}): fc.Arbitrary<FormattedNumber> => {
  const formats = options.formats ?? numberFormats
  if (formats.length === 0) throw new TypeError("arb.number: give at least one format")
  const max = options.max ?? 1_000_000_000
  return fc.oneof(...formats.map((f) => formatted(f, max)))
}

/**
 * Texts that all denote exactly `value`: the plain form, and for integers also
 * thousands separators, a trailing `.0`, a leading `+`, fractions `2v/2` and
 * `\frac{3v}{3}`; for other numbers a trailing zero and a leading-dot form.
 *
 * @example
 * fc.sample(arb.spellings(1234), 3) // e.g. ["1,234", "2468/2", "1234.0"]
 * @since 0.1.0 @category arbitraries
 */
export const spellings = (value: number): fc.Arbitrary<string> => {
  if (!Number.isFinite(value)) throw new TypeError(`arb.spellings: value must be finite, got ${value}`)
  const plain = String(value)
  const out = new Set<string>([plain])
  const exponent = plain.includes("e")
  if (Number.isInteger(value)) {
    out.add(value.toLocaleString("en-US", { maximumFractionDigits: 0 }))
    if (!exponent) out.add(`${plain}.0`).add(`${plain}.00`)
    if (value > 0) out.add(`+${plain}`)
    for (const k of [2, 3, 7]) {
      if (Number.isSafeInteger(value * k)) {
        out.add(`${value * k}/${k}`)
        out.add(`${value < 0 ? "-" : ""}\\frac{${Math.abs(value * k)}}{${k}}`)
      }
    }
  } else if (!exponent) {
    out.add(`${plain}0`)
    if (/^-?0\./.test(plain)) out.add(plain.replace("0.", "."))
  }
  return fc.constantFrom(...out)
}

// ===== Text =====

const WORDS = [
  "the", "answer", "is", "so", "we", "get", "Let's", "think", "step", "by", "therefore", "total", "apples",
  "x", "y", "e", "E", "naïve", "Ω", "日本語", "🙂", "ok", "hence", "result",
]
const PUNCTUATION = [".", ",", "!", "?", ":", ";", "(", ")", "'", "\"", "-", "*", "=", "+", "/", "%", "&", "$", "_", "|", "~"]
const SEPARATORS = [" ", " ", " ", "", "\n", "\t", "  "]

/** Options of `noise`. @since 0.1.0 @category models */
export interface NoiseOptions {
  /** may contain numbers (default false) */
  readonly digits?: boolean
  /** at most this many words and marks (default 12) */
  readonly maxWords?: number
}

/**
 * Noise text: words, punctuation, Unicode and whitespace. Without `digits` it holds no
 * number at all. It never holds `<`, `>`, `{`, `}`, `\`, `[`, `]` or `#`, so it cannot
 * open a tag, a `\boxed{}` or a `####` answer.
 *
 * @since 0.1.0 @category arbitraries
 */
export const noise = (options: NoiseOptions = {}): fc.Arbitrary<string> => {
  const token = options.digits === true
    ? fc.oneof(
      { arbitrary: fc.constantFrom(...WORDS), weight: 4 },
      { arbitrary: fc.constantFrom(...PUNCTUATION), weight: 2 },
      { arbitrary: number({ max: 10_000, formats: ["integer", "negative", "decimal", "fraction", "thousands"] }).map((n) => n.text), weight: 2 },
    )
    : fc.oneof({ arbitrary: fc.constantFrom(...WORDS), weight: 2 }, { arbitrary: fc.constantFrom(...PUNCTUATION), weight: 1 })
  return fc
    .array(fc.tuple(token, fc.constantFrom(...SEPARATORS)), { maxLength: options.maxWords ?? 12 })
    .map((parts) => parts.map(([t, s]) => t + s).join(""))
}

/** Options of `whitespace`. @since 0.1.0 @category models */
export interface WhitespaceOptions {
  readonly minLength?: number
  readonly maxLength?: number
}

/**
 * Whitespace: spaces, tabs, newlines, carriage returns, no-break spaces.
 * @since 0.1.0 @category arbitraries
 */
export const whitespace = (options: WhitespaceOptions = {}): fc.Arbitrary<string> =>
  fc.string({ unit: fc.constantFrom(" ", "\t", "\n", "\r\n", "\u00a0"), minLength: options.minLength ?? 0, maxLength: options.maxLength ?? 4 })

// ===== Completions =====

/**
 * How a completion carries its answer: `plain` (the last number), `tagged`
 * (`<answer>...</answer>`), `boxed` (`\boxed{...}`).
 * @since 0.1.0 @category models
 */
export type AnswerStyle = "plain" | "tagged" | "boxed"

/** Options of `answerCompletion`. @since 0.1.0 @category models */
export interface AnswerCompletionOptions {
  /** how the answer is carried (default "plain") */
  readonly style?: AnswerStyle
  /** the tag of the "tagged" style (default "answer") */
  readonly tag?: string
  /**
   * other numbers in the completion where the style allows them: before the answer
   * for "plain", anywhere outside the block otherwise (default true)
   */
  readonly distractors?: boolean
}

/** What may stand between the text before a plain answer and the answer. */
const LEADS = [" ", "\n", ": ", " = ", " is ", "\n\n"]
/** The same, with a word or a sign: never only whitespace. */
const WORDED = [": ", " = ", " is ", " so ", "\nthe answer is "]

/**
 * Whether a text ends in a number followed only by what may separate alternatives
 * (whitespace, `,` `;` `|` brackets): after such a text, whitespace and then the answer
 * would read as a list of candidates ("0/1  594"), which hedges and is no answer.
 */
const endsInNumber = (text: string): boolean => /\d[\s,;|()[\]]*$/.test(text)

const answerArb = (answer: number | string | fc.Arbitrary<string>): fc.Arbitrary<string> =>
  typeof answer === "number" ? spellings(answer) : typeof answer === "string" ? fc.constant(answer) : answer

/**
 * Completions that give `answer` (a number, written in any of its `spellings`; a fixed
 * text; or an arbitrary of texts) in the given style, surrounded by noise. A correct
 * extractor reads `answer` back from every one of them. In the plain style, a distractor
 * right before the answer is set apart by a word or a sign (`3 apples, so 56`, `0/1: 56`),
 * never by whitespace alone: `0/1  56` lists two candidates, which is a hedge, not an
 * answer (see `numericAnswer`).
 *
 * @example
 * arb.answerCompletion(56)                       // "so 7 times 8 is 56."
 * arb.answerCompletion(56, { style: "tagged" })  // "think 7 8 <answer> 56 </answer> ok"
 * @since 0.1.0 @category arbitraries
 */
export const answerCompletion = (answer: number | string | fc.Arbitrary<string>, options: AnswerCompletionOptions = {}): fc.Arbitrary<string> => {
  const text = answerArb(answer)
  const style = options.style ?? "plain"
  // a distractor that is the answer itself would be a second answer, not a distractor
  const alone = typeof answer === "number" ? new RegExp(`(^|[^\\d.])${String(answer).replace(/[.\-]/g, "\\$&")}(?![\\d])`) : undefined
  const others = noise({ digits: options.distractors ?? true }).filter((t) => alone === undefined || !alone.test(t))
  const clean = noise()
  switch (style) {
    case "plain":
      return others
        .chain((before) => fc.tuple(fc.constant(before), fc.constantFrom(...(endsInNumber(before) ? WORDED : LEADS))))
        .chain(([before, lead]) => fc.tuple(fc.constant(before + lead), text, fc.constantFrom("", ".", " ", "!", "\n", ". "), clean))
        .map((parts) => parts.join(""))
    case "tagged": {
      const tag = options.tag ?? "answer"
      return fc
        .tuple(others, whitespace(), text, whitespace(), others)
        .map(([a, p1, t, p2, b]) => `${a} <${tag}>${p1}${t}${p2}</${tag}> ${b}`)
    }
    case "boxed":
      return fc.tuple(others, text, others).map(([a, t, b]) => `${a} \\boxed{${t}} ${b}`)
  }
}

const EDGE_CASES = [
  "", " ", "\n", ".", "-", "--5", "1/0", "0/0", "9".repeat(400), `-${"9".repeat(400)}`, "NaN", "Infinity", "-Infinity",
  "1e999", "<answer></answer>", "<answer>", "</answer>", "<answer>1</answer><answer>2</answer>", "\\boxed{", "\\boxed{}", "{", "}",
  "{\"a\":", "####", "#### ", "\u0000", "\ud800", "👍🏽", "a\u0301",
]

/** Options of `completion`. @since 0.1.0 @category models */
export interface CompletionOptions {
  /** at most this many characters of random text (default 200) */
  readonly maxLength?: number
}

/**
 * Any completion: noise with numbers, completions carrying a random answer in every
 * style, random Unicode and binary strings, and edge cases (empty text, `1/0`, huge
 * numbers, unclosed tags, lone surrogates). For laws that must hold on any text.
 *
 * @since 0.1.0 @category arbitraries
 */
export const completion = (options: CompletionOptions = {}): fc.Arbitrary<string> => {
  const maxLength = options.maxLength ?? 200
  return fc.oneof(
    { arbitrary: noise({ digits: true }), weight: 3 },
    {
      arbitrary: fc
        .tuple(number(), fc.constantFrom<AnswerStyle>("plain", "tagged", "boxed"))
        .chain(([n, style]) => answerCompletion(n.text, { style })),
      weight: 3,
    },
    { arbitrary: fc.string({ unit: "grapheme", maxLength }), weight: 1 },
    { arbitrary: fc.string({ unit: "binary", maxLength }), weight: 1 },
    { arbitrary: fc.constantFrom(...EDGE_CASES), weight: 1 },
  )
}

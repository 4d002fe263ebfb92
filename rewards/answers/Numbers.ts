/**
 * Numbers as models write them: integers, negatives (`-5`, `−5`), decimals (`3.25`,
 * `.5`), fractions (`3/4`, `\frac{3}{4}`), thousands separators (`1,234,567`),
 * scientific notation (`6.02e23`), digits of every script. A `-` right after a digit or
 * a closing bracket is a minus sign of an expression, not a sign (`7-5` holds 7 and 5).
 *
 * Reading every number of a text, the number at one end of it (a list of different
 * alternatives is none), a text that is one number, and numeric equivalence.
 *
 * @since 0.1.0
 */

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
 * A list that repeats one number (`56, 56`) answers with it. Used by the answer modes of
 * `NumericAnswer.ts`; not part of the public API.
 */
export const endNumber = (text: string, end: "first" | "last"): number | undefined => {
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

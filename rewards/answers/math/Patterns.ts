/**
 * Where an answer is found in a text, as Math-Verify finds it: regular expressions in
 * priority groups ("final answer is ... I hope", "final answer ... is", "answer:", "answer",
 * then anywhere), for LaTeX (`$...$`, `\[...\]`, `\(...\)`, `\boxed{}`), plain numbers and
 * expressions, and answer letters. Within a group the rightmost match is tried first.
 *
 * @since 0.1.0
 */

/** One pattern: what it reads and its priority (lower is tried first). @since 0.1.0 @category models */
export interface Pattern {
  readonly kind: "latex" | "expr" | "letter"
  readonly re: RegExp
  readonly priority: number
}

// Node 20 has no inline `(?i:...)` groups: spell the case-insensitive words out
const ci = (word: string): string => word.split("").map((c) => (/[a-z]/i.test(c) ? `[${c.toLowerCase()}${c.toUpperCase()}]` : c === " " ? " " : c)).join("")
const ANSWER = ci("answer")
const FINAL_ANSWER_IS = ci("final answer is")
const FINAL_ANSWER = ci("final answer")

/** One LaTeX environment with a `prefix` on its group names (`boxed`: it must hold a box). */
const latexEnv = (prefix: string, boxed: boolean): string => {
  const percent = `(?<${prefix}percent>(?:\\\\?%|[Pp]ercent|[Pp]ercentage|[Pp]ct))`
  const parts = {
    displayDollar: "(?:[^$]|\\$(?!\\$))",
    displayBracket: "(?:[^\\\\]|\\\\(?!\\]))",
    inlineDollar: "(?:\\\\[$]|[^\\n$])",
    inlineParen: "(?:[^\\\\\\n]|\\\\(?!\\)))",
    inlineBracket: "[^\\n\\]\\[]",
  }
  const body = (c: string): string => (boxed ? `${c}*?\\\\boxed\\{${c}+?\\}${c}*?` : `${c}+?`)
  const patterns = [
    `(?<!\\\\)\\$\\$(?<${prefix}latexDisplayDollar>${body(parts.displayDollar)})(?<!\\\\)\\$\\$`,
    `(?<!\\\\)\\\\\\[(?<${prefix}latexDisplayBracket>${body(parts.displayBracket)})(?<!\\\\)\\\\\\]`,
    `(?<!\\\\|\\d)\\$(?<${prefix}latexInlineDollar>${body(parts.inlineDollar)})(?<!\\\\)\\$`,
    `(?<!\\\\)\\\\\\((?<${prefix}latexInlineParenthesis>${body(parts.inlineParen)})(?<!\\\\)\\\\\\)`,
    `\\s\\[(?<${prefix}latexInlineBracket>${body(parts.inlineBracket)})\\]\\s`,
  ]
  if (!boxed) patterns.push(`(?<${prefix}latexFraction>-?\\\\frac\\{-?\\d+(?:[.,]\\d+)?\\}\\{-?\\d+(?:[.,]\\d+)?\\})`)
  return `(?:(?:${patterns.join("|")})\\s*${percent}?)`
}

/** Up to six LaTeX environments joined by "and", "or" or commas. */
const latexEnvs = (boxed: boolean): string => {
  const next = [1, 2, 3, 4, 5].map((i) => `${boxed ? "\\s*" : ""}(?:\\s*(?:,?and|,?or|,)\\s*${latexEnv(`next${i}_`, boxed)})?`).join("")
  return `(?:${latexEnv("first_", boxed)}${next})`
}

/** The LaTeX patterns; `boxedPriority` < 0 leaves boxes to the plain patterns. @since 0.1.0 @category constructors */
export const latexPatterns = (boxedPriority: number): Array<Pattern> => {
  const envs = latexEnvs(false)
  const out: Array<Pattern> = [
    { priority: 0, source: `${FINAL_ANSWER_IS}:?\\s*${envs}\\.?\\s?I hope` },
    { priority: 50, source: `${FINAL_ANSWER}.{0,100}?\\s+is:?\\s*${envs}` },
    { priority: 100, source: `${ANSWER}:.{0,50}?${envs}` },
    { priority: 200, source: `${ANSWER}.{0,50}?${envs}` },
    { priority: 300, source: envs },
  ].map(({ priority, source }) => ({ kind: "latex" as const, priority, re: new RegExp(source, "gs") }))
  if (boxedPriority >= 0) {
    out.push({ kind: "latex", priority: boxedPriority, re: new RegExp(latexEnvs(true), "gs") })
    out.push({ kind: "latex", priority: boxedPriority, re: /(?<first_latexBoxed>\\boxed\{.+\})/gs })
  }
  return out
}

const NUMBER = "(?<!\\d)(?:(?<integer1>-?[1-9]\\d{0,2}(?:[ ,]\\d{3})+)(?<decimal1>\\.\\d+)?|(?<integer2>-?\\d+)(?<decimal2>[.,]\\d+)|(?<decimal3>\\.\\d+)|(?<integer3>-?\\d+))(?<percent>\\s*(?:%|[Pp]ercent|\\s*[Pp]ercentage|\\s*[Pp]ct))?"
const OPERATORS = "\\+\\-\\*\\×\\/\\^\\(\\)\\÷"
const EXPR_CHARS = `[\\d\\.\\s${OPERATORS}]`
const EXPR = `(?<expr>-?\\(?-?\\d${EXPR_CHARS}*[${OPERATORS}]${EXPR_CHARS}+\\)?)`
const CURRENCY = "[$€£¥₹₽₪₩₫฿₡₢₣₤₥₦₧₨₭₮₯₰₱₲₳₴₵₶₷₸₺₻₼₾₿]"

/** The plain number and expression patterns (`1,234.5`, `28%`, `1/2`, `$100`, `#### 42`). @since 0.1.0 @category constructors */
export const exprPatterns = (): Array<Pattern> => {
  const prefix = "(?:^|\\s|=)(?:\\*\\*)?"
  const suffix = "(?:\\*\\*)?(?:\\.|,|:|\\s|\\)|\\$|$)"
  const exprAnchored = `(?:${prefix}${EXPR}${suffix})`
  const numberAnchored = `(?:${prefix}${CURRENCY}?${NUMBER})`
  const either = `(?:${exprAnchored}|${numberAnchored})`
  return [
    { priority: 0, source: `${FINAL_ANSWER_IS}:?\\s*${either}\\.?\\s?I hope` },
    { priority: 50, source: `${FINAL_ANSWER}.{0,100}?\\s+is:?${either}` },
    // GSM8K's `#### 42`
    { priority: 60, source: `####\\s*${either}` },
    { priority: 100, source: `${ANSWER}:(?:.{0,100}=\\s*|.{0,50}?)${either}(?!\\s*=)` },
    { priority: 200, source: `${ANSWER}(?:.{0,100}=\\s*|.{0,50}?)${either}(?!\\s*=)` },
    { priority: 300, source: exprAnchored },
    { priority: 300, source: numberAnchored },
  ].map(({ priority, source }) => ({ kind: "expr" as const, priority, re: new RegExp(source, "g") }))
}

const escape = (s: string): string => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")

/** The answer-letter patterns for the given choices. @since 0.1.0 @category constructors */
export const letterPatterns = (choices: ReadonlyArray<string>): Array<Pattern> => {
  const keys = `(?<letter>${choices.map(escape).join("|")})`
  const suffix = "(?:\\*\\*)?(?:\\.|,|:|\\s|$)"
  const anywhere = `(?:^|\\s)(?:\\*\\*)?${keys}${suffix}`
  return [
    { priority: 0, source: `${FINAL_ANSWER_IS}:?\\s*${keys}\\.?\\s?I hope` },
    { priority: 50, source: `${FINAL_ANSWER}.{0,100}?\\s+is:?\\s*${keys}` },
    { priority: 100, source: `${ANSWER}:.{0,50}?${anywhere}` },
    { priority: 200, source: `${ANSWER}.{0,50}?${anywhere}` },
    { priority: 250, source: `^(?:\\*\\*)?${keys}${suffix}` },
    { priority: 300, source: anywhere },
  ].map(({ priority, source }) => ({ kind: "letter" as const, priority, re: new RegExp(source, "g") }))
}

/**
 * Every match of the patterns, grouped by priority (lowest first) and, within a group,
 * rightmost first (by end, then by start), the order in which Math-Verify tries them.
 * @since 0.1.0 @category utils
 */
export const matchesInOrder = (text: string, patterns: ReadonlyArray<Pattern>): Array<Array<{ readonly match: RegExpExecArray; readonly kind: Pattern["kind"] }>> => {
  const priorities = [...new Set(patterns.map((p) => p.priority))].sort((a, b) => a - b)
  return priorities.map((priority) => {
    const found: Array<{ match: RegExpExecArray; kind: Pattern["kind"] }> = []
    for (const p of patterns) {
      if (p.priority !== priority) continue
      p.re.lastIndex = 0
      for (let m = p.re.exec(text); m !== null; m = p.re.exec(text)) {
        found.push({ match: m, kind: p.kind })
        if (m[0].length === 0) p.re.lastIndex++
      }
    }
    const end = (m: RegExpExecArray) => m.index + m[0].length
    return found.sort((a, b) => end(b.match) - end(a.match) || a.match.index - b.match.index)
  })
}

/**
 * Finding and reading the answer of a text, as Math-Verify's `parse` does: the patterns of
 * `Patterns.ts` tried by priority, rightmost first, until one reads; the first match's text
 * is kept too, for a plain comparison when nothing reads.
 *
 * @since 0.1.0
 */
import type { Answer } from "./Answer.ts"
import type { Cas } from "./Cas.ts"
import { normalizeLatex } from "./Normalize.ts"
import { exprPatterns, latexPatterns, letterPatterns, matchesInOrder, type Pattern } from "./Patterns.ts"
import { readLatex } from "./Read.ts"

/** What to look for in a text. @since 0.1.0 @category models */
export interface ParseOptions {
  /** LaTeX answers, plain numbers and expressions, or both (default both) */
  readonly matchTypes?: ReadonlyArray<"latex" | "expr">
  /** where `\boxed{}` ranks among the patterns, 0 first (default 0); -1 ignores boxes */
  readonly boxedPriority?: number
  /** answer letters to look for instead (multiple choice), e.g. ["A", "B", "C", "D"] */
  readonly choices?: ReadonlyArray<string>
}

const patternCache = new Map<string, Array<Pattern>>()

const patternsFor = (o: ParseOptions): Array<Pattern> => {
  const key = JSON.stringify([o.matchTypes ?? null, o.boxedPriority ?? 0, o.choices ?? null])
  let patterns = patternCache.get(key)
  if (patterns === undefined) {
    const types = o.matchTypes ?? ["latex", "expr"]
    patterns = o.choices !== undefined
      ? letterPatterns(o.choices)
      : [...(types.includes("latex") ? latexPatterns(o.boxedPriority ?? 0) : []), ...(types.includes("expr") ? exprPatterns() : [])]
    patternCache.set(key, patterns)
  }
  return patterns
}

const HEDGE = /^\s*,?\s*(?:or|and\/or)\s+[-−]?\$?\d/i

const EQUALS = /(?<!\\|<|!|>)=/

/** Reads normalized LaTeX; when it does not read, the part after the last `=` of a chain. */
const readWithFallback = (cas: Cas, latex: string): Answer | undefined => {
  const read = readLatex(cas, latex)
  if (read !== undefined || latex.includes(",") || latex.includes(";")) return read
  const parts = latex.split(EQUALS)
  return parts.length > 2 ? readLatex(cas, parts.at(-1)!) : undefined
}

const percentOf = (cas: Cas, latex: string): Answer | undefined => {
  const leaf = cas.parse(`\\frac{${latex}}{100}`)
  return leaf === undefined ? undefined : { kind: "expr", leaf }
}

/** The LaTeX environments of one match: one answer, or a set of all when several read. */
const fromLatex = (cas: Cas, groups: Record<string, string | undefined>): [Answer | undefined, string] => {
  const names = Object.keys(groups).filter((n) => /^(first|next\d)_latex/.test(n) && groups[n] !== undefined)
  const read: Array<Answer | undefined> = []
  const texts: Array<string> = []
  for (const name of names) {
    const prefix = name.split("_")[0]!
    const latex = normalizeLatex(groups[name]!, name.endsWith("latexBoxed") ? "last" : "all")
    texts.push(latex)
    const answer = readWithFallback(cas, latex)
    read.push(answer !== undefined && groups[`${prefix}_percent`] !== undefined ? percentOf(cas, latex) : answer)
  }
  if (read.length === 0) return [undefined, ""]
  if (read.length > 1 && read.every((r) => r !== undefined)) {
    const items = (read as Array<Answer>).flatMap((r) => (r.kind === "set" ? r.items : [r]))
    return [{ kind: "set", items }, texts.join(" and ")]
  }
  return [read[0], texts[0]!]
}

/** A plain number (`1,234.5`, `28%`, `.5`) or expression (`1/2`, `(9+1)`). */
const fromExpr = (cas: Cas, groups: Record<string, string | undefined>): [Answer | undefined, string] => {
  const pick = (prefix: string) => Object.keys(groups).filter((n) => n.startsWith(prefix)).map((n) => groups[n]).find((v) => v) ?? ""
  const integer = pick("integer")
  const decimal = pick("decimal")
  if (integer !== "" || decimal !== "") {
    const whole = integer.replace(/[, ]/g, "").replace(/^(-?)0+/, "$1")
    const text = `${whole === "" || whole === "-" ? whole + "0" : whole}${decimal.replace(",", ".")}`
    const read = groups["percent"] ? percentOf(cas, text) : readLatex(cas, text)
    return [read, text]
  }
  const expr = (groups["expr"] ?? "").trim().replace(/\.+$/, "")
  const latex = expr.replace(/\n/g, " ").replace(/×/g, "\\times ").replace(/÷/g, "\\div ").replace(/\*\*/g, "^").replace(/\*/g, "\\cdot ")
  return [expr === "" ? undefined : readLatex(cas, latex), expr]
}

/**
 * The answers a text gives: the first that reads (by priority, rightmost first), and the
 * text of the first match as a plain `text` answer. Empty when nothing matches.
 *
 * @example
 * parseAnswers(cas, "so the answer is $\\frac{1}{2}$") // => [expr 1/2, text "\\frac{1}{2}"]
 * @since 0.1.0 @category utils
 */
export const parseAnswers = (cas: Cas, text: string, options: ParseOptions = {}): Array<Answer> => {
  let fallback: string | undefined
  for (const group of matchesInOrder(text, patternsFor(options))) {
    for (const { match, kind } of group) {
      const groups = match.groups ?? {}
      const [answer, raw] = kind === "latex"
        ? fromLatex(cas, groups)
        : kind === "expr"
        ? fromExpr(cas, groups)
        : [{ kind: "word" as const, word: groups["letter"]!.toLowerCase() }, groups["letter"]!]
      if (raw !== "" && fallback === undefined) fallback = raw
      // "the answer is 3 or 4" hedges: no answer, rather than the first of the two
      if (answer !== undefined && kind === "expr" && HEDGE.test(text.slice(match.index + match[0].length))) return []
      if (answer !== undefined) return fallback === undefined ? [answer] : [answer, { kind: "text", text: fallback }]
    }
  }
  return fallback === undefined ? [] : [{ kind: "text", text: fallback }]
}

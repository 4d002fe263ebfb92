/**
 * LaTeX clean-up before parsing, as Math-Verify's normalizer does it (`latex2sympy2_extended`):
 * `\left`/`\right`, `\dfrac` and friends, `\!` spacing, `$`, `\text{and}`, "percent", units
 * at the end (`15 \text{ cm}^2`, `125 miles`), malformed `\frac12` and `\sqrt3`, `a/b`.
 * It only rewrites notation; what the text means is decided by the parser.
 *
 * @since 0.1.0
 */
import { boxedAnswer } from "./Boxed.ts"

const LEFT = /\\m?left(\\\{|\{|\\\||\||\[|\(|\\rbracl|\\lgroup|\\lbrace|\\lbrack|\\vert|\\lvert|\\lceil|\\lfloor|\\langle|\\llcorner|\\ulcorner)/g
const RIGHT = /\\m?right(\\\}|\}|\\\||\||\]|\)|\\rbrack|\\rgroup|\\rbrace|\\vert|\\rvert|\\rceil|\\rfloor|\\rangle|\\lrcorner|\\urcorner)/g

// the unit words Math-Verify drops from the end of an answer (its list, longest first where it matters)
const UNITS = [
  "integerpoint", "feet", "sue", "digit", "pound", "meal", "edge", "student", "children ticket", "multiple", "east",
  "degree", "mph", "kmph", "ft", "m square", " m east", "sq m", "deg", "mile", "q \\.", "monkey", "prime", "ratio",
  "profit of rs", "rd", "o", "gm", "p \\. m", "lb", "tile", "per", "dm", "lt", "gain", "ab", "way", "west", "a \\.",
  "b \\.", "c \\.", "d \\.", "e \\.", "f \\.", "g \\.", "h \\.", "t", "h", "no change", "men", "soldier", "pie", "bc",
  "excess", "st", "inches", "noon", "cent", "by", "gal", "kmh", "c", "acre", "rise", "a \\. m", "th", "π r 2", "sq",
  "mark", "l", "toy", "coin", "sq \\. m", "gallon", "° f", "profit", "minw", "yr", "women", "am", "pm", "hr", "cu cm",
  "square", "are", "rupee", "rounds", "cubic", "cc", "mtr", "s", "ohm", "number", "day", "hour", "minute", "min",
  "second", "man", "woman", "sec", "cube", "mt", "sq inch", "mp", "∏ cm ³", "hectare", "more", "unit", "cu \\. m",
  "cm 2", "rs \\.", "rs", "kg", "g", "month", "km", "m", "cm", "mm", "apple", "liter", "loss", "yard", "pure", "year",
  "increase", "decrease", "d", "less", "Surface", "litre", "pi sq m", "s \\.", "metre", "meter", "inch",
]
const UNIT_AT_END = new RegExp(`(\\d|\\}|\\s)\\s*(?:(?:${UNITS.join("|")})(?:s|es)?)\\s*$`)
const UNIT_TEXT_AT_END = /(\\(?:text|mbox)\{.*?\})(\^\d|\{\^\d\})?$/

const TO_REMOVE = /\\mathrm\{th\}|\\!\s*|\\text\s*\{\s*\}|\\\$|\$|(?<!\\)["']|\\displaystyle/g

// [pattern, replacement] in the order Math-Verify tries them (one alternation, first match wins)
const REPLACEMENTS: ReadonlyArray<readonly [string, string]> = [
  ["\\\\math(?:rm|it|bf)", "\\text"],
  ["\\\\text(?:normal|bf|it|rm)", "\\text"],
  ["\\\\(?:d|t|c)frac", "\\frac"],
  ["\\s\\.", " 0."],
  ["\\{\\.", "{0."],
  ["~=", "\\approx"],
  ["\\s*\\{\\s*,\\s*\\}", ","],
  ["(?<![a-zA-Z])(?:,?\\s*(?:and|or))(?![a-zA-Z])", ","],
  ["(?:,?\\s*\\\\text\\{\\s*(?:and|or)\\s*\\})", ","],
  ["(?<!\\\\)\\\\\\s", " "],
  ["infinity", "\\infty"],
  [",?(?:\\\\ldots)", " "],
  ["\\s*\\bpercentage\\b", "\\%"],
  ["\\\\text\\{percentage\\}", "%"],
  ["\\s*\\bpercent\\b", "\\%"],
  ["\\\\text\\{percent\\}", "%"],
  ["\\s*\\bpct\\b", "\\%"],
  ["\\\\text\\{pct\\}", "%"],
  ["(?<!\\\\)inf(?!inity)", "\\infty"],
  [" sqrt", "\\sqrt"],
]
const REPLACE = new RegExp(REPLACEMENTS.map(([p], i) => `(?<r${i}>${p})`).join("|"), "g")
const replaceAll = (text: string): string =>
  text.replace(REPLACE, (...args) => {
    const groups = args.at(-1) as Record<string, string | undefined>
    const i = REPLACEMENTS.findIndex((_, k) => groups[`r${k}`] !== undefined)
    return REPLACEMENTS[i]![1]
  })

const PERMUTATION = /\(([a-zA-Z0-9+\-*/\\ ]+?)\)_\{([a-zA-Z0-9+\-*/\\ ]+?)\}/g
const DOUBLED_BACKSLASH = /\\\\(?=[a-zA-Z])/g

const MALFORMED: ReadonlyArray<readonly [RegExp, string]> = [
  [/\^\s?\((.*?)\)/g, "^{$1}"],
  [/sqrt\s?\((.*?)\)/g, "\\sqrt{$1}"],
  [/\\frac\s?(\d)\s?(\d+)/g, "\\frac{$1}{$2}"],
  [/\\log_\s?(\d)\s?(\d+)/g, "\\log_{$1}{$2}"],
  [/\\frac\s?\{(.*?)\}\s?(\d)/g, "\\frac{$1}{$2}"],
  [/\\frac\s?(\d)\s?\{(.*?)\}/g, "\\frac{$1}{$2}"],
  [/\\sqrt\s?(\d)/g, "\\sqrt{$1}"],
]

/** `\frac12` → `\frac{1}{2}`, `\frac1{2}` → `\frac{1}{2}` (the MATH dataset's rule). */
const fixFracs = (text: string): string => {
  const parts = text.split("\\frac")
  let out = parts[0]!
  for (const raw of parts.slice(1)) {
    const part = raw.trimStart()
    out += "\\frac"
    if (part.startsWith("{")) out += part
    else if (part.length < 2) return text
    else if (part[1] !== "{") out += `{${part[0]}}{${part[1]}}${part.slice(2)}`
    else out += `{${part[0]}}${part.slice(1)}`
  }
  return out
}

/** `\sqrt3` → `\sqrt{3}`. */
const fixSqrt = (text: string): string => {
  const parts = text.split("\\sqrt")
  return parts[0] + parts.slice(1).map((raw) => {
    const part = raw.trimStart()
    return part.length > 0 && part[0] !== "{" && part[0] !== "[" ? `\\sqrt{${part[0]}}${part.slice(1)}` : `\\sqrt${part}`
  }).join("")
}

/** `2/3` (the whole answer) → `\frac{2}{3}`. */
const fixSlash = (text: string): string => {
  const m = /^(-?\d+)\/(-?\d+)$/.exec(text)
  return m !== null && String(Number(m[1])) === m[1] && String(Number(m[2])) === m[2] ? `\\frac{${m[1]}}{${m[2]}}` : text
}

const dropUnits = (input: string): string => {
  let text = input
  const noUnitText = text.replace(UNIT_TEXT_AT_END, "").trim()
  if (noUnitText !== "" && noUnitText !== text) text = noUnitText
  for (let i = 0; i < 2; i++) {
    const next = text.replace(UNIT_AT_END, "$1")
    if (next !== "" && next !== text) text = next
  }
  return text
}

/**
 * Normalizes a LaTeX answer for parsing. `boxed: "all"` reads every box, `"last"` the
 * last boxes that belong together (see `boxedAnswer`), `"none"` leaves boxes alone.
 *
 * @example
 * normalizeLatex("\\left( \\dfrac{1}{3} \\right)", "all") // => "( \\frac{1}{3} )"
 * normalizeLatex("15\\mbox{ cm}^2", "all") // => "15"
 * @since 0.1.0 @category utils
 */
export const normalizeLatex = (input: string, boxed: "all" | "last" | "none" = "all"): string => {
  let text = boxed === "none" ? input : boxedAnswer(input, boxed)
  text = text.replaceAll("\\mathrm{T}", "T").replaceAll("\\mathrm{d}", "d").replaceAll("{\\rm d}", "d")
  text = text.replaceAll("\\left[\\begin{matrix}", "\\begin{bmatrix}").replaceAll("\\end{matrix}\\right]", "\\end{bmatrix}")
  text = text.replace(LEFT, "$1").replace(RIGHT, "$1")
  text = text.replace(PERMUTATION, "\\frac{($1)!}{(($1)-($2))!}")
  text = replaceAll(text.replace(TO_REMOVE, ""))
  text = text.replaceAll("\n", " ").replaceAll("\t", " ")
  if (!text.includes("matrix")) text = text.replace(DOUBLED_BACKSLASH, "\\")
  text = dropUnits(text)
  if (text.startsWith(".")) text = "0" + text
  if (text === "0.5") text = "\\frac{1}{2}"
  for (const [re, to] of MALFORMED) text = text.replace(re, to)
  text = fixSlash(fixFracs(fixSqrt(text.replaceAll(" sqrt", "\\sqrt"))))
  return text.trim()
}

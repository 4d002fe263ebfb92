/**
 * Math-Verify's two steps on read answers: the gold's answers and the completion's, and
 * whether any pair is equal. Golds are read once and kept (a run asks about the same golds
 * at every step).
 *
 * @since 0.1.0
 */
import type { Answer } from "./Answer.ts"
import type { Cas, Leaf } from "./Cas.ts"
import { equal, type EquivalenceOptions } from "./Equivalence.ts"
import { parseAnswers, type ParseOptions } from "./Parse.ts"

/** How answers are found and compared. @since 0.1.0 @category models */
export interface VerifyOptions extends ParseOptions, Partial<EquivalenceOptions> {}

const DELIMITED = /\$|\\\(|\\\[|\\boxed|\\fbox/

/** A number as LaTeX (`1e-7` → `1\times10^{-7}`). */
const numberLatex = (n: number): string => {
  const [mantissa, exponent] = n.toString().split("e")
  return exponent === undefined ? mantissa! : `${mantissa}\\times10^{${Number(exponent)}}`
}

/**
 * The answers a gold gives. A gold that is only an answer (`\sqrt{2}`, `(1,2)`, `x=3`,
 * `1,200`) is read whole; one with `$...$` or `\boxed{}` is searched as a completion is;
 * a GSM8K solution is read after its last `####`; with `matchTypes: ["expr"]` a gold is
 * read as plain text is (`1,22` is 1.22).
 * @since 0.1.0 @category utils
 */
export const goldAnswers = (cas: Cas, gold: string | number, options: ParseOptions = {}): Array<Answer> => {
  if (typeof gold === "number") return parseAnswers(cas, `$${numberLatex(gold)}$`, options)
  const marked = gold.includes("####") ? gold.slice(gold.lastIndexOf("####") + 4).trim() : gold.trim()
  const latex = options.matchTypes === undefined || options.matchTypes.includes("latex")
  if (options.choices !== undefined || !latex || DELIMITED.test(marked)) return parseAnswers(cas, marked, options)
  return parseAnswers(cas, `$$${marked}$$`, options)
}

/** Whether some answers were read (not only kept as text). @since 0.1.0 @category utils */
export const readable = (answers: ReadonlyArray<Answer>): boolean => answers.some((a) => a.kind !== "text")

/**
 * Whether any of the completion's answers equals any of the gold's (Math-Verify's verify).
 * @since 0.1.0 @category utils
 */
export const anyEqual = (cas: Cas, golds: ReadonlyArray<Answer>, preds: ReadonlyArray<Answer>, options: VerifyOptions = {}): boolean => {
  const o: EquivalenceOptions = {
    precision: options.precision ?? 6,
    strict: options.strict ?? true,
    allowSetRelation: options.allowSetRelation ?? false,
  }
  const differ = (lhs: Leaf, rhs: Leaf) => cas.parse(`(${lhs.latex})-(${rhs.latex})`)
  return golds.some((g) => preds.some((p) => equal(g, p, o, differ)))
}

/**
 * Answer rewards: numeric answer extraction and equivalence, math answers graded as
 * Math-Verify grades them, and exact match of text answers. Reading numbers is
 * `answers/Numbers.ts`, the numeric answer reward `answers/NumericAnswer.ts`, the math
 * answer reward `answers/MathAnswer.ts` (reading and comparing in `answers/math/`), exact
 * match `answers/ExactMatch.ts`; this module gathers them.
 *
 * Numbers are read in the forms models write them: integers, negatives (`-5`, `−5`),
 * decimals (`3.25`, `.5`), fractions (`3/4`, `\frac{3}{4}`), thousands separators
 * (`1,234,567`), scientific notation (`6.02e23`). A `-` right after a digit or a
 * closing bracket is a minus sign of an expression, not a sign (`7-5` holds 7 and 5).
 *
 * @since 0.1.0
 */
export { extractNumbers, numbersEqual, parseNumber } from "./answers/Numbers.ts"
export { type AnswerMode, extractAnswer, numericAnswer, type NumericAnswerOptions } from "./answers/NumericAnswer.ts"
export { mathAnswer, type MathAnswerOptions, mathGoldReadable, unreadableGolds } from "./answers/MathAnswer.ts"
export { afterThinking, type Thinking, type ThinkingMarkers } from "./answers/Thinking.ts"
export type { VerifyOptions as MathVerifyOptions } from "./answers/math/Verify.ts"
export { exactMatch, type ExactMatchOptions, type Normalization, normalizeText } from "./answers/ExactMatch.ts"

/**
 * The contents of `\boxed{...}` and `\fbox{...}`, braces balanced, read from the right:
 * the last box, or the last run of boxes that belong together (a few characters apart,
 * or joined by "and", "or", a comma or a semicolon), as Math-Verify reads them.
 *
 * @since 0.1.0
 */

const SEPARATOR = /\b(?:and|or)\b|,|;/

/** The index of the `}` closing the `{` at `open`, before `end`; undefined when unclosed. */
const closingBrace = (text: string, open: number, end: number): number | undefined => {
  let depth = 1
  for (let i = open + 1; i < end; i++) {
    if (text[i] === "{") depth++
    else if (text[i] === "}" && --depth === 0) return i
  }
  return undefined
}

/** Two boxes belong to one answer when close, or apart by a short text with a separator. */
const together = (between: string, content: string, next: string): boolean =>
  between.length < 10 || (content !== next && between.length < 70 && SEPARATOR.test(between))

/**
 * The boxed contents of a text joined by commas, or the text itself when it has no box.
 * `mode: "all"` keeps every box; `"last"` keeps only the last run of boxes that belong
 * together. An unclosed last box gives the rest of the text.
 *
 * @example
 * boxedAnswer("so \\boxed{1} and \\boxed{2}", "last") // => "1,2"
 * boxedAnswer("\\boxed{1} no no no no no \\boxed{2}", "last") // => "2"
 * @since 0.1.0 @category utils
 */
export const boxedAnswer = (text: string, mode: "last" | "all"): string => {
  const results: Array<string> = []
  let searchEnd = text.length
  let limit = text.length
  let laterStart: number | undefined
  for (;;) {
    const boxed = text.lastIndexOf("\\boxed", searchEnd - 1)
    const fbox = text.lastIndexOf("\\fbox", searchEnd - 1)
    if (boxed < 0 && fbox < 0) break
    const start = Math.max(boxed, fbox)
    let open = start + (boxed > fbox ? 6 : 5)
    while (open < limit && /\s/.test(text[open]!)) open++
    if (open >= limit) break
    if (text[open] !== "{") {
      if (results.length === 0) results.push(text.slice(open))
      break
    }
    const close = closingBrace(text, open, limit)
    if (close === undefined) {
      if (results.length === 0) results.push(text.slice(open))
      break
    }
    const content = text.slice(open + 1, close).trim()
    if (mode === "last" && laterStart !== undefined && !together(text.slice(close + 1, laterStart), content, results.at(-1) ?? "")) break
    if (results.at(-1) !== content) results.push(content)
    laterStart = start
    limit = start
    searchEnd = start
  }
  return results.length === 0 ? text : results.reverse().join(",")
}

/**
 * Reading the top level of a LaTeX answer: where brackets open and close (`(`, `[`, `{`,
 * `\{`, and `\begin{...}`...`\end{...}` environments), splitting at separators and
 * operators that are not inside any bracket.
 *
 * @since 0.1.0
 */

const OPENERS = ["\\{", "\\lbrace", "\\langle", "\\(", "(", "[", "{"]
const CLOSERS = ["\\}", "\\rbrace", "\\rangle", "\\)", ")", "]", "}"]

/** The bracket depth change of the token at `i` and its length (0 change: not a bracket). */
const bracketAt = (s: string, i: number): [number, number] => {
  const env = /^\\(begin|end)\{[a-zA-Z*]*\}/.exec(s.slice(i, i + 24))
  // `\begin{pmatrix}`: the environment's own braces are not counted
  if (env !== null) return [env[1] === "begin" ? 1 : -1, env[0].length]
  if (s[i] === "\\") {
    for (const o of OPENERS) if (o.startsWith("\\") && s.startsWith(o, i)) return [1, o.length]
    for (const c of CLOSERS) if (c.startsWith("\\") && s.startsWith(c, i)) return [-1, c.length]
    const name = /^\\[a-zA-Z]+|^\\./.exec(s.slice(i))
    return [0, name === null ? 1 : name[0].length]
  }
  if ("([{".includes(s[i]!)) return [1, 1]
  if (")]}".includes(s[i]!)) return [-1, 1]
  return [0, 1]
}

/**
 * Splits a text at the top-level occurrences of any of the separators (longest first),
 * keeping the separators that were met. Text inside brackets or environments is kept whole.
 *
 * @example
 * splitTop("(1,2),3", [","]) // => { parts: ["(1,2)", "3"], seps: [","] }
 * @since 0.1.0 @category utils
 */
export const splitTop = (s: string, separators: ReadonlyArray<string>): { parts: Array<string>; seps: Array<string> } => {
  const seps = [...separators].sort((a, b) => b.length - a.length)
  const parts: Array<string> = []
  const met: Array<string> = []
  let depth = 0
  let start = 0
  for (let i = 0; i < s.length;) {
    if (depth === 0) {
      const sep = seps.find((x) => s.startsWith(x, i) && (!/[a-zA-Z]$/.test(x) || !/[a-zA-Z]/.test(s[i + x.length] ?? "")))
      if (sep !== undefined) {
        parts.push(s.slice(start, i))
        met.push(sep)
        i += sep.length
        start = i
        continue
      }
    }
    const [change, len] = bracketAt(s, i)
    depth = Math.max(0, depth + change)
    i += len
  }
  parts.push(s.slice(start))
  return { parts, seps: met }
}

/**
 * The text between an opening bracket at the start and its closing bracket at the very
 * end, with both brackets; undefined when the text is not one bracketed group.
 * @since 0.1.0 @category utils
 */
export const wrapped = (s: string): { open: string; inner: string; close: string } | undefined => {
  const t = s.trim()
  const open = OPENERS.find((o) => t.startsWith(o))
  if (open === undefined) return undefined
  let depth = 0
  for (let i = 0; i < t.length;) {
    const [change, len] = bracketAt(t, i)
    depth += change
    i += len
    if (depth === 0) {
      if (i !== t.length) return undefined
      const close = CLOSERS.find((c) => t.endsWith(c))
      return close === undefined ? undefined : { open, inner: t.slice(open.length, t.length - close.length), close }
    }
  }
  return undefined
}

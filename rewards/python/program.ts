/**
 * The program of a completion: the last fenced Python block, else the whole text.
 *
 * @since 0.1.0
 */

/** A fenced block: ```python / ```py / ```python3 / a bare ```, up to its closing fence. */
const FENCE = /```[ \t]*(python3?|py)?[ \t]*\r?\n([\s\S]*?)```/gi

/**
 * The program in a completion: the last ```python block (or ```py, ```python3); without
 * one, the last bare ``` block; without any, the whole completion. An unclosed last fence
 * (a completion cut at its token limit) counts up to the end of the text.
 *
 * @example
 * pythonProgram("Here:\n```python\ndef f(x):\n    return x\n```") // "def f(x):\n    return x\n"
 * @since 0.1.0 @category constructors
 */
export const pythonProgram = (completion: string): string => {
  let python: string | undefined
  let bare: string | undefined
  let end = 0
  for (const m of completion.matchAll(FENCE)) {
    if (m[1] !== undefined) python = m[2]
    else bare = m[2]
    end = m.index + m[0].length
  }
  const open = /```[ \t]*(python3?|py)[ \t]*\r?\n([\s\S]*)$/i.exec(completion.slice(end))
  if (open !== null) return open[2]!
  return python ?? bare ?? completion
}

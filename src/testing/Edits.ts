/**
 * Meaning-preserving edits of a completion as plain functions, without fast-check: the
 * fixed counterparts of `Transforms.ts`'s arbitraries (whitespace around and inside,
 * noise without numbers, tags or boxes before and after). A reward that reads an answer
 * must give an edited completion the score it gives the completion. The runner's hack
 * watch applies them to a step's own completions.
 *
 * @since 0.1.0
 */

/**
 * Doubles every run of whitespace inside the completion.
 * @since 0.1.0 @category edits
 */
export const stretchWhitespace = (completion: string): string => completion.replace(/\s+/g, (ws) => ws + ws)

/** A named edit that must not change what a completion says. @since 0.1.0 @category models */
export interface Edit {
  readonly name: string
  readonly apply: (completion: string) => string
}

/**
 * The edits, in the order they are applied: whitespace before and after, whitespace
 * doubled inside, a sentence of noise after, a sentence of noise before (noise as
 * `Arbitraries.noise` writes it: words and punctuation, no digits).
 * @since 0.1.0 @category constants
 */
export const edits: ReadonlyArray<Edit> = [
  { name: "pad-whitespace", apply: (c) => `\n ${c} \t` },
  { name: "stretch-whitespace", apply: stretchWhitespace },
  { name: "append-noise", apply: (c) => `${c} ok, so we get the result. 🙂` },
  { name: "prepend-noise", apply: (c) => `Let's think step by step: ${c}` },
]

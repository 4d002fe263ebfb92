/**
 * Transformations of completions for `laws.invariant` and `laws.monotone`. Each takes
 * a completion and returns the transformed text or an arbitrary of them.
 *
 * @since 0.1.0
 */
import * as fc from "fast-check"
import { noise, whitespace } from "./Arbitraries.ts"
import * as Edits from "./Edits.ts"

/**
 * Adds whitespace before and after the completion.
 * @since 0.1.0 @category transforms
 */
export const padWhitespace = (completion: string): fc.Arbitrary<string> =>
  fc.tuple(whitespace(), whitespace()).map(([before, after]) => `${before}${completion}${after}`)

/**
 * Doubles every run of whitespace inside the completion (`Edits.stretchWhitespace`).
 * @since 0.1.0 @category transforms
 */
export const stretchWhitespace: (completion: string) => string = Edits.stretchWhitespace

/**
 * Upper-cases or lower-cases the whole completion.
 * @since 0.1.0 @category transforms
 */
export const changeCase = (completion: string): fc.Arbitrary<string> =>
  fc.constantFrom(completion.toUpperCase(), completion.toLowerCase())

/**
 * Appends a space and noise without numbers, tags or boxes: a reward that reads the
 * last number or the last tag does not notice; a length reward may only fall.
 * @since 0.1.0 @category transforms
 */
export const appendNoise = (completion: string): fc.Arbitrary<string> => noise().map((n) => `${completion} ${n}`)

/**
 * Prepends noise without numbers, tags or boxes, and a space.
 * @since 0.1.0 @category transforms
 */
export const prependNoise = (completion: string): fc.Arbitrary<string> => noise().map((n) => `${n} ${completion}`)

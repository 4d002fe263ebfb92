/**
 * A played group's episodes as a worker sends them: a turn's input is everything before
 * it (the prompt, every earlier turn and observation), so a 3-turn episode holds its
 * context three times over. A turn whose input goes on from the turn before (its input
 * and sampled tokens, then the observation's) travels as the observation's tokens only,
 * and the main thread puts the whole input back together.
 *
 * @since 0.1.0
 */
import type { EpisodeRecord, TurnRecord } from "../Rollout.ts"

/** The marker of a turn input sent as the tokens after the turn before: an object with this one key. */
const KEY = "\u0000gyre/after"

/** The tokens `input` has after `before`'s input and sampled tokens, or undefined when it does not go on from them. */
const suffixAfter = (before: TurnRecord, input: ReadonlyArray<number>): Array<number> | undefined => {
  const head = before.input.length + before.sampled.length
  if (input.length < head) return undefined
  for (let i = 0; i < before.input.length; i++) if (input[i] !== before.input[i]) return undefined
  for (let i = 0; i < before.sampled.length; i++) if (input[before.input.length + i] !== before.sampled[i]) return undefined
  return input.slice(head)
}

/**
 * Episodes with each turn's input that goes on from the turn before given as what follows it.
 * @since 0.1.0 @category utils
 */
export const shorten = (episodes: ReadonlyArray<EpisodeRecord>): Array<EpisodeRecord> =>
  episodes.map((e) => ({
    ...e,
    turns: e.turns.map((t, k) => {
      const before = e.turns[k - 1]
      const suffix = before === undefined ? undefined : suffixAfter(before, t.input)
      return suffix === undefined ? t : { ...t, input: { [KEY]: suffix } as never }
    }),
  }))

/**
 * What `shorten` shortened, with every turn's whole input.
 * @since 0.1.0 @category utils
 */
export const lengthen = (episodes: ReadonlyArray<EpisodeRecord>): Array<EpisodeRecord> =>
  episodes.map((e) => {
    const turns: Array<TurnRecord> = []
    for (const t of e.turns) {
      const suffix = (t.input as unknown as Record<string, ReadonlyArray<number>>)[KEY]
      const before = turns[turns.length - 1]
      turns.push(suffix === undefined || before === undefined ? t : { ...t, input: [...before.input, ...before.sampled, ...suffix] })
    }
    return { ...e, turns }
  })

/**
 * DAPO's overlong reward shaping (`--overlong-buffer f`, the `dapo` recipe): a sample that
 * runs into the last `B = ceil(f·L)` tokens of the budget `L` (the sampling maxTokens) has
 * its training reward lowered linearly, by `(n - (L - B)) / B` for `n` sampled tokens,
 * to -1 at `L`; a sample cut at the budget gets the full -1. Held-out rewards are never
 * shaped. In a multi-turn episode each turn samples under its own budget, so each turn is
 * measured against it and the episode takes its worst turn's penalty (a sum of the turns'
 * tokens against one turn's budget would shape every long, correct tool-using episode to -1).
 *
 * @since 0.1.0
 */

/**
 * The penalty of a sample of `sampled` tokens under a budget of `maxTokens` (0 or below).
 * @since 0.1.0 @category combinators
 */
export const overlongPenalty = (sampled: number, maxTokens: number, fraction: number): number => {
  const buffer = Math.max(1, Math.ceil(fraction * maxTokens))
  const free = maxTokens - buffer
  return sampled <= free ? 0 : Math.max(-1, (free - sampled) / buffer)
}

/**
 * The penalty of an episode whose turns sampled `turns` tokens each, every turn under a
 * budget of `maxTokens`: its worst turn's (0 or below, never under -1).
 * @since 0.1.0 @category combinators
 */
export const episodeOverlongPenalty = (turns: ReadonlyArray<number>, maxTokens: number, fraction: number): number =>
  turns.reduce((worst, sampled) => Math.min(worst, overlongPenalty(sampled, maxTokens, fraction)), 0)

/**
 * Reversing words: "Reverse: cat" -> " tac".
 *
 * A word is a random string of lowercase letters, `difficulty + 2` long (difficulty 1,
 * the default: 3 letters, 17,576 words). Held out: 10% of them by hash, so the eval
 * set holds words the policy never trained on, and a policy that scores there has
 * learned to reverse, not memorized answers.
 *
 * The embedded base model knows only arithmetic, so it scores ~0 here and RL has no
 * signal. `reference` gives SFT (and pretraining) the answer to learn from; then RL
 * continues from the SFT checkpoint (`initFrom`).
 */
import { Schema } from "effect"
import { Env, Reward } from "gyre"
import { exactMatch } from "gyre/rewards"

const Problem = Schema.Struct({ word: Schema.String })
type Problem = typeof Problem.Type

const LETTERS = "abcdefghijklmnopqrstuvwxyz"

/** The word backwards. */
export const reversed = ({ word }: Problem): string => [...word].reverse().join("")

/** The fraction of the answer's letters that are right, position by position (1 only when exact). */
export const letters = Reward.make<Problem>("letters", (r) => {
  const gold = reversed(r.problem)
  const answer = r.completion.trim()
  let right = 0
  for (let i = 0; i < gold.length; i++) if (answer[i] === gold[i]) right++
  return right / Math.max(gold.length, answer.length)
})

export default Env.make({
  name: "words",
  problem: Problem,
  source: Env.seeded(({ random, difficulty }) => ({
    word: Array.from({ length: Math.max(1, difficulty) + 2 }, () => random.pick([...LETTERS])).join(""),
  })),
  prompt: ({ word }) => `Reverse: ${word}`,
  reference: (p) => ` ${reversed(p)}`,
  reward: Reward.weighted({
    // exact: only surrounding whitespace is ignored (reversed letters may spell "a" or "the")
    correct: [exactMatch(reversed, { name: "correct", normalize: { whitespace: true } }), 1],
    letters: [letters, 0],
  }),
  sampling: { maxTokens: 8, temperature: 1 },
  eval: { heldOut: 0.1, size: 300 },
})

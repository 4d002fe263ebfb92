/**
 * A toy env for runner tests: a random-init tiny model learns to start its answer with a
 * vowel within a few dozen steps. Written against the public API, like a user's env.
 */
import { Schema } from "effect"
import { Env, Reward } from "gyre"

export default Env.make({
  name: "vowels",
  problem: Schema.Struct({ n: Schema.Int }),
  source: Env.seeded(({ random }) => ({ n: random.int(0, 9) })),
  prompt: ({ n }) => `Say ${n}:`,
  reward: Reward.weighted({
    vowel: [Reward.make("vowel", (r) => (/^[aeiou]/.test(r.completion) ? 1 : 0)), 1],
    length: [Reward.make("length", (r) => r.completion.length), 0],
  }),
  sampling: { maxTokens: 3, temperature: 1 },
  eval: { heldOut: 0.2, size: 16 },
})

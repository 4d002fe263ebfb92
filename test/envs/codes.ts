/**
 * A toy env whose reward is continuous: the mean character code of the completion,
 * scaled to [0, 1]. Samples of a random-init model almost never tie, so every group
 * carries signal and every step trains: for tests that need each step to change the
 * weights (the serve-restart test). Written against the public API, like a user's env.
 */
import { Schema } from "effect"
import { Env, Reward } from "gyre"

export default Env.make({
  name: "codes",
  problem: Schema.Struct({ n: Schema.Int }),
  source: Env.seeded(({ random }) => ({ n: random.int(0, 9) })),
  prompt: ({ n }) => `Say ${n}:`,
  reward: Reward.make("codes", (r) => (r.completion.length === 0 ? 0 : [...r.completion].reduce((s, c) => s + c.charCodeAt(0), 0) / r.completion.length / 128)),
  sampling: { maxTokens: 3, temperature: 1 },
  eval: { heldOut: 0.2, size: 8 },
})

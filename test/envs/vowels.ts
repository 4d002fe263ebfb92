/**
 * A toy env for runner tests: a random-init tiny model learns to start its answer with a
 * vowel within a few dozen steps. Written against the public API, like a user's env.
 */
import { Effect, Schema } from "effect"
import { Env, Reward } from "gyre"
import * as Runner from "../../src/Runner.ts"

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

/** Run settings that learn this env in ~30 steps on a tiny model (lr 2e-2, 4 groups x 8). */
export const toySettings = (dir: string, overrides: Partial<Runner.RunSettings> = {}): Runner.RunSettings =>
  Runner.defaults("vowels", {
    name: "t",
    outDir: dir,
    steps: 30,
    groups: 4,
    groupSize: 8,
    adam: { learningRate: 2e-2, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0, gradClipNorm: 1 },
    sampling: { maxTokens: 3, temperature: 1 },
    evalEvery: 0,
    saveEvery: 10,
    logRolloutsEvery: 1,
    ...overrides,
  })

/** A one-layer random-init model config for runner tests (the char tokenizer's vocabulary). */
export const TINY = { vocabSize: 98, contextLength: 32, nLayers: 1, dModel: 32, nHeads: 2, mlpRatio: 2 }

/** No progress output: runner tests read the run folder instead. */
export const quiet = Effect.provideService(Runner.Progress, { onStep: () => Effect.void, onPhase: () => Effect.void })

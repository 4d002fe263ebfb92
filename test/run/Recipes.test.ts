/**
 * Named recipes: the flags each sets (written out here from the papers, independently of
 * run/Recipes.ts), flags given with a recipe overriding it, a resumed run keeping its
 * recipe, and DAPO's overlong shaping formula (per turn in a tool episode, against a scripted
 * sampler double).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { settingsFrom } from "../../src/app/RunOptions.ts"
import { sampleGroup } from "../../src/run/Collect.ts"
import { ContextLength } from "../../src/run/Rollout.ts"
import { defaults } from "../../src/run/Settings.ts"
import { recipeFlags } from "../../src/run/Recipes.ts"
import { episodeOverlongPenalty, overlongPenalty } from "../../src/run/Overlong.ts"
import { Sampler } from "../../src/services/Sampler.ts"
import { Tokenizer } from "../../src/services/Tokenizer.ts"
import * as CharTokenizer from "../../src/backends/local/CharTokenizer.ts"
import calculator from "../../envs/calculator.ts"
import vowels from "../envs/vowels.ts"
import { scriptedSampler } from "./ScriptedSampler.ts"

const settingsOf = (options: Parameters<typeof settingsFrom>[0], saved?: Parameters<typeof settingsFrom>[3]) =>
  settingsFrom(options, vowels, undefined, saved, saved?.outDir)

const EXPECTED = {
  // DeepSeekMath's objective: 1/G over every sample, each sample's tokens averaged; beta 0.04 on the
  // k3 KL in the loss; advantages as TRL's GRPOTrainer: (r - mean) / (torch.std + 1e-4)
  grpo: { loss: "ppo", lossConfig: { clip_low_threshold: 0.8, clip_high_threshold: 1.2 }, advantage: "group_sample_std", aggregation: "sequence_mean", denominator: "batch", klCoef: 0, klLossCoef: 0.04, dynamic: undefined, overlong: undefined },
  "dr-grpo": { loss: "ppo", lossConfig: { clip_low_threshold: 0.8, clip_high_threshold: 1.2 }, advantage: "mean_only", aggregation: "constant", denominator: undefined, klCoef: 0, klLossCoef: 0, dynamic: undefined, overlong: undefined },
  // DAPO's and CISPO's 1/sum|o_i| and GSPO's 1/G count every sample of the batch
  dapo: { loss: "ppo", lossConfig: { clip_low_threshold: 0.8, clip_high_threshold: 1.28 }, advantage: "group_std", aggregation: "token_mean", denominator: "batch", klCoef: 0, klLossCoef: 0, dynamic: 3, overlong: 0.2 },
  gspo: { loss: "gspo", lossConfig: {}, advantage: "group_std", aggregation: "sequence_mean", denominator: "batch", klCoef: 0, klLossCoef: 0, dynamic: undefined, overlong: undefined },
  cispo: { loss: "cispo", lossConfig: {}, advantage: "group_std", aggregation: "token_mean", denominator: "batch", klCoef: 0, klLossCoef: 0, dynamic: undefined, overlong: undefined },
} as const

describe("--recipe", () => {
  for (const [name, want] of Object.entries(EXPECTED)) {
    it.effect(`${name} sets its paper's settings and is recorded`, () =>
      Effect.gen(function* () {
        const s = yield* settingsOf({ recipe: name as keyof typeof EXPECTED })
        assert.deepStrictEqual(
          {
            loss: s.loss,
            lossConfig: s.lossConfig,
            advantage: s.advantage,
            aggregation: s.lossAggregation?.kind,
            denominator: s.lossAggregation?.denominator,
            klCoef: s.klCoef,
            klLossCoef: s.klLossCoef,
            dynamic: s.dynamicSampling?.maxRounds,
            overlong: s.overlong?.fraction,
          },
          want,
        )
        assert.strictEqual(s.recipe, name)
      }))
  }

  it.effect("flags given with a recipe override its settings; the rest stay", () =>
    Effect.gen(function* () {
      const s = yield* settingsOf({ recipe: "dapo", loss: "cispo", klCoef: 0.1 })
      assert.deepStrictEqual([s.loss, s.klCoef, s.dynamicSampling?.maxRounds, s.overlong?.fraction, s.recipe], ["cispo", 0.1, 3, 0.2, "dapo"])
    }))

  it.effect("--loss-aggregation keeps a recipe's denominator; --loss-denominator and --kl-loss-coef override it", () =>
    Effect.gen(function* () {
      const s = yield* settingsOf({ recipe: "grpo", lossAggregation: "token_mean" })
      assert.deepStrictEqual(s.lossAggregation, { kind: "token_mean", denominator: "batch" })
      const t = yield* settingsOf({ recipe: "grpo", lossDenominator: "trained", klLossCoef: 0 })
      assert.deepStrictEqual([s.klLossCoef, t.lossAggregation, t.klLossCoef], [0.04, { kind: "sequence_mean", denominator: "trained" }, 0])
    }))

  it("prints each recipe as flags the CLI takes: one --loss-config per key", () => {
    assert.strictEqual(
      recipeFlags("grpo"),
      "--loss ppo --loss-config clip_low_threshold=0.8 --loss-config clip_high_threshold=1.2 --advantage group_sample_std --loss-aggregation sequence_mean --loss-denominator batch --kl-coef 0 --kl-loss-coef 0.04",
    )
    assert.strictEqual(recipeFlags("cispo"), "--loss cispo --advantage group_std --loss-aggregation token_mean --loss-denominator batch --kl-coef 0 --kl-loss-coef 0")
  })

  it.effect("a resumed run keeps its recipe, and refuses another", () =>
    Effect.gen(function* () {
      const first = yield* settingsOf({ recipe: "gspo", name: "r" })
      const resumed = yield* settingsOf({}, first)
      assert.deepStrictEqual([resumed.recipe, resumed.loss, resumed.lossAggregation?.kind], ["gspo", "gspo", "sequence_mean"])
      const again = yield* settingsOf({ recipe: "gspo" }, first)
      assert.strictEqual(again.recipe, "gspo")
      const other = yield* Effect.flip(settingsOf({ recipe: "dapo" }, first))
      assert.include(other.message, "--recipe dapo: a resumed run keeps the settings it started with (recipe gspo)")
    }))

  it.effect("--overlong-buffer out of (0, 1] is named", () =>
    Effect.gen(function* () {
      const e = yield* Effect.flip(settingsOf({ overlongBuffer: 1.5 }))
      assert.include(e.message, "--overlong-buffer")
    }))
})

describe("overlong shaping", () => {
  it("is 0 before the buffer, linear in it, and -1 at the budget", () => {
    // L = 16, f = 0.25: B = 4, free up to 12 tokens
    assert.deepStrictEqual([8, 12, 13, 14, 16].map((n) => overlongPenalty(n, 16, 0.25)), [0, 0, -0.25, -0.5, -1])
    // a buffer rounds up to whole tokens, and is at least one
    assert.deepStrictEqual([overlongPenalty(9, 10, 0.05), overlongPenalty(10, 10, 0.05)], [0, -1])
  })
})

describe("overlong shaping of a tool episode", () => {
  it("measures each turn against its own budget: the episode takes its worst turn's penalty", () => {
    // budget 12, f = 0.25: B = 3, free up to 9 tokens a turn
    assert.strictEqual(episodeOverlongPenalty([7, 4], 12, 0.25), 0)
    assert.strictEqual(episodeOverlongPenalty([7, 11, 4], 12, 0.25), -2 / 3)
    assert.strictEqual(episodeOverlongPenalty([12, 12], 12, 0.25), -1)
    assert.strictEqual(episodeOverlongPenalty([], 12, 0.25), 0)
  })

  it.effect("a correct tool-calling calculator episode whose turns each fit their budget is not shaped", () =>
    Effect.gen(function* () {
      // turn 1 "[47+38]" (7 tokens), turn 2 " 85" and EOS (4): 11 together, each well inside a turn's 12
      const reply = (text: string) => (/=(-?\d+);$/.exec(text) ? " 85" : "[47+38]")
      const settings = { ...defaults("calculator", { seed: 1 }), samplingOverrides: { maxTokens: 12 }, overlong: { fraction: 0.25 } }
      const task = { key: "calculator/train/0/0", env: "calculator", problem: { a: 47, b: 38, op: "plus" as const }, envDef: calculator }
      const group = yield* sampleGroup(settings, "run", 0, 0, 0, task, { split: "train", numSamples: 2 }).pipe(
        Effect.provideService(Tokenizer, CharTokenizer.make()),
        Effect.provideService(Sampler, scriptedSampler(reply).service),
        Effect.provideService(ContextLength, 48),
      )
      assert.deepStrictEqual(group.episodes.map((e) => e.turns.map((t) => t.sampled.length)), [[7, 4], [7, 4]])
      for (const score of group.scores) {
        assert.strictEqual(score.components["overlong"], 0)
        assert.strictEqual(score.value, score.components["correct"])
      }
    }))
})

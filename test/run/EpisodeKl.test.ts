/**
 * On the embedded backend, the Datums cut from multi-turn episodes line up with the
 * model: the trainer's log-probs of the sampled tokens equal the sampler's
 * (`kl_sample_train_v1` below 1e-4), and the same Datums shifted by one position do not.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { Local } from "../../src/backends/local/index.ts"
import { type Datum as DatumT, float32 } from "../../src/contract/Contract.ts"
import * as Datum from "../../src/vocabulary/Datum.ts"
import * as Env from "../../src/vocabulary/Env.ts"
import * as Episode from "../../src/env/Episode.ts"
import * as Metrics from "../../src/metrics/Metrics.ts"
import * as Reward from "../../src/vocabulary/Reward.ts"
import { ContextLength, playGroup } from "../../src/run/Rollout.ts"
import { encodePrompt, Tokenizer } from "../../src/services/Tokenizer.ts"
import { Trainer } from "../../src/services/Trainer.ts"
import { tinyConfig, tinyLora } from "../backends/local/helpers.ts"

/** three turns: the env answers the first two with an observation */
const chatty = Env.make({
  name: "chatty",
  problem: Schema.Struct({ n: Schema.Int }),
  source: Env.seeded(({ random }) => ({ n: random.int(0, 9) })),
  prompt: ({ n }) => `Count ${n}:`,
  reward: Reward.make("len", (r) => r.completion.length),
  episode: Episode.make({
    initial: () => 0,
    step: (turn) => Effect.succeed(turn.index < 2 ? Episode.observe(turn.index + 1, ` ok${turn.index}?`) : Episode.end(turn.index)),
    limits: { maxTurns: 3 },
  }),
})

const klV1 = (data: ReadonlyArray<DatumT>, learner: ReadonlyArray<ReadonlyArray<number>>) => {
  const sampler: Array<number> = []
  const trainer: Array<number> = []
  data.forEach((d, j) => {
    const adv = d.lossFnInputs["advantages"]!.data
    const q = d.lossFnInputs["logprobs"]!.data
    adv.forEach((a, t) => {
      if (a === 0) return
      sampler.push(q[t]!)
      trainer.push(learner[j]![t]!)
    })
  })
  return Metrics.klSampleTrain({ sampler, trainer })["optim/kl_sample_train_v1"]!
}

describe("multi-turn episodes on the embedded backend", () => {
  it.effect("train on exactly the sampled tokens, with the sampler's log-probs", () =>
    Effect.gen(function* () {
      const tokenizer = yield* Tokenizer
      const trainer = yield* Trainer
      const problem = { n: 3 }
      const promptTokens = yield* encodePrompt(tokenizer, chatty.prompt(problem))
      const { episodes } = yield* playGroup({
        env: chatty,
        task: { key: "chatty/train/0/0", env: "chatty", problem },
        promptTokens,
        sampling: { maxTokens: 5, temperature: 1, seed: 7 },
        numSamples: 4,
        affinityKey: "kl",
        version: 0,
        step: 0,
      }).pipe(Effect.provideService(ContextLength, tinyConfig.contextLength))
      assert.isTrue(episodes.every((e) => e.turns.length === 3), JSON.stringify(episodes.map((e) => e.stop)))
      const data = episodes.flatMap((e) => Datum.episode(e.turns, 1))
      assert.strictEqual(data.length, 4, "each episode is one Datum")
      const out = yield* trainer.forward(data, "importance_sampling")
      const learner = out.lossFnOutputs.map((o) => o.logprobs)
      const aligned = klV1(data, learner)
      assert.isBelow(Math.abs(aligned), 1e-4)
      // the same datums read one position off: the mismatch shows
      const shifted = data.map((d): DatumT => {
        const q = d.lossFnInputs["logprobs"]!.data
        return { ...d, lossFnInputs: { ...d.lossFnInputs, logprobs: float32([...q.slice(1), 0]) } }
      })
      assert.isAbove(Math.abs(klV1(shifted, learner)), 0.05)
    }).pipe(
      Effect.provide(Layer.fresh(Local.layer({ config: tinyConfig, lora: tinyLora, seed: 2, stateDir: fs.mkdtempSync(path.join(os.tmpdir(), "gyre-ep-kl-")) }))),
    ))
})

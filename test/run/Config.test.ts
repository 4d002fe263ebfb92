/**
 * config.json records what was in force (the env's sampling over the defaults, each
 * reward component's weight), the held-out evaluation says how many problems it scored,
 * and a masked rollout shows no reward total.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { Local } from "../../src/backends/local/index.ts"
import * as Env from "../../src/vocabulary/Env.ts"
import * as Reward from "../../src/vocabulary/Reward.ts"
import * as RunLog from "../../src/folder/RunLog.ts"
import * as Runner from "../../src/Runner.ts"
import vowels, { toySettings, TINY, quiet } from "../envs/vowels.ts"


describe("the run folder says what happened", () => {
  it.effect("config.json, held-out problem count, masked rows", () =>
    Effect.gen(function* () {
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-config-"))
      // every other sample's reward fails as infrastructure: masked
      const flaky = Env.make({
        ...vowels,
        name: "flaky",
        reward: Reward.weighted({
          vowel: [Reward.make("vowel", (r) => (r.index % 2 === 0 ? Effect.fail(new Reward.InfraFault({ message: "down" })) : /^[aeiou]/.test(r.completion) ? 1 : 0)), 1],
          length: [Reward.make("length", (r) => r.completion.length), 0],
        }),
      })
      const backend = Layer.fresh(Local.layer({ config: TINY, seed: 0, stateDir: RunLog.paths(dir).state, lora: { rank: 4, alpha: 8, targets: ["q", "v"] } }))
      yield* Runner.run(toySettings(dir, { env: "flaky", steps: 2, evalEvery: 2, sampling: { maxTokens: 16, temperature: 1 } }), flaky).pipe(Effect.provide(backend), quiet)
      const config = JSON.parse(Fs.readFileSync(RunLog.paths(dir).config, "utf8"))
      assert.strictEqual(config.sampling.maxTokens, 3, "the env's maxTokens, not the default's")
      assert.deepStrictEqual(config.rewardWeights, { vowel: 1, length: 0 })
      const metrics = yield* RunLog.readJsonl(RunLog.paths(dir).metrics)
      assert.strictEqual(metrics[0]!["step"], 0)
      // 10 possible problems, 20% held out: the eval set is the whole (small) eval split, each problem once
      const evalSet = yield* Env.evalSet(flaky, { seed: 0, size: 16 })
      assert.isBelow(evalSet.length, 16)
      assert.strictEqual(new Set(evalSet.map((t) => t.key)).size, evalSet.length)
      assert.strictEqual(metrics[0]!["test/env/all/problems"], evalSet.length)
      const rows = yield* RunLog.readJsonl(RunLog.paths(dir).rollouts)
      const masked = rows.filter((r) => r["masked"] !== null)
      assert.isAbove(masked.length, 0)
      for (const r of masked) assert.isNull(r["reward"])
    }))
})

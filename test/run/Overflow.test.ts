/**
 * A reward of 1e300 (finite as a number, infinite as float32) stops the run with a message
 * naming the env and the problem, before anything is trained on it.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import { Local } from "../../src/backends/local/index.ts"
import * as Env from "../../src/vocabulary/Env.ts"
import * as Reward from "../../src/vocabulary/Reward.ts"
import * as RunLog from "../../src/folder/RunLog.ts"
import * as Runner from "../../src/Runner.ts"
import { toySettings, TINY, quiet } from "../envs/vowels.ts"


const huge = Env.make({
  name: "huge",
  problem: Schema.Struct({ n: Schema.Int }),
  source: Env.seeded(({ random }) => ({ n: random.int(0, 9) })),
  prompt: ({ n }) => `Say ${n}:`,
  reward: Reward.make("huge", (r) => (r.index % 2 === 0 ? 1e300 : 0)),
  sampling: { maxTokens: 3, temperature: 1 },
})

describe("rewards that overflow the advantages", () => {
  for (const advantage of ["group_std", "none"] as const) {
    it.effect(`stop the run (${advantage})`, () =>
      Effect.gen(function* () {
        const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-overflow-"))
        const backend = Layer.fresh(Local.layer({ config: TINY, seed: 0, stateDir: RunLog.paths(dir).state, lora: { rank: 4, alpha: 8, targets: ["q", "v"] } }))
        const error = yield* Effect.flip(Runner.run(toySettings(dir, { env: "huge", steps: 3, advantage }), huge).pipe(Effect.provide(backend), quiet))
        if (error._tag !== "RunError") return assert.fail(`expected a RunError, got ${error.message}`)
        assert.strictEqual(error.reason, "Reward")
        assert.strictEqual(error.step, 0)
        assert.match(error.message, /env huge, problem huge\/train\/0\/\d+: the rewards \[.*1e\+300.*\] overflow the/)
        assert.isFalse(Fs.existsSync(RunLog.paths(dir).metrics) && Fs.readFileSync(RunLog.paths(dir).metrics, "utf8").includes('"step":1'))
      }))
  }
})

/**
 * An agent's request that is still open when its group ends (an agent that ignores its
 * signal when its time is up) is answered all the same on an episode worker: the main
 * thread answers a sampler call of an ended group "Unavailable", so the worker's endpoint
 * answers the agent 503 instead of leaving it waiting for the worker's life. A test double
 * of `Sampler` (from its interface) never answers a prompt that says "hang".
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { modelInputTokens } from "../../../src/contract/Contract.ts"
import * as CharTokenizer from "../../../src/backends/local/CharTokenizer.ts"
import * as RunLog from "../../../src/folder/RunLog.ts"
import * as Runner from "../../../src/Runner.ts"
import { Sampler } from "../../../src/services/Sampler.ts"
import { quiet, toySettings } from "../../envs/vowels.ts"
import { workersOver } from "./Doubled.ts"
import { lateAgent } from "./ThreadEnvs.ts"

/** The embedded sampler, except that a prompt saying "hang" is never answered. */
const hanging = Layer.effect(
  Sampler,
  Effect.map(Effect.service(Sampler), (inner) => {
    const chars = CharTokenizer.make()
    return Sampler.of({ ...inner, sample: (prompt, params, options) => (chars.decode(modelInputTokens(prompt)).includes("hang") ? Effect.never : inner.sample(prompt, params, options)) })
  }),
)

describe("a sampler call that outlives its group on an episode worker", () => {
  it.live("is answered: the next group's agents on that thread see every such request answered", () =>
    Effect.gen(function* () {
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-late-"))
      const workers = workersOver(dir, "lateAgent", hanging)
      // one group a step: both go to the first worker (the one with the fewest in flight, the first on a tie)
      const rows = yield* Runner.run(toySettings(dir, { env: lateAgent.name, steps: 2, groups: 1, groupSize: 4, saveEvery: 0, evalEvery: 0 }), lateAgent).pipe(Effect.provide(workers), quiet)
      assert.strictEqual(rows.length, 2)
      const rollouts = Fs.readFileSync(RunLog.paths(dir).rollouts, "utf8").trim().split("\n").map((l) => JSON.parse(l) as { step: number; completion: string; components: Record<string, number> })
      const second = rollouts.filter((r) => r.step === 2)
      assert.strictEqual(second.length, 4)
      for (const r of second) assert.strictEqual(r.components["answered"], 1, r.completion)
    }))
})

/**
 * Which steps `rollouts.jsonl` holds, as docs/run-folder.md says: by default every sample
 * of the first step, of every 10th and of the last (`--log-rollouts-every`, default 10);
 * with `--log-rollouts-every 0`, none. Runs of the toy env on the tiny model (its vocabulary
 * the char tokenizer's).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import * as CharTokenizer from "../../src/backends/local/CharTokenizer.ts"
import { Local } from "../../src/backends/local/index.ts"
import * as RunLog from "../../src/folder/RunLog.ts"
import * as Runner from "../../src/Runner.ts"
import vowels, { quiet, TINY } from "../envs/vowels.ts"

/** Runs 12 steps of one group of 2 with `overrides`; the steps of rollouts.jsonl's rows, and how many rows. */
const loggedSteps = (overrides: Partial<Runner.RunSettings>) =>
  Effect.gen(function* () {
    const dir = Path.join(Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-rollouts-")), "r")
    const settings = Runner.defaults("vowels", { name: "r", outDir: dir, steps: 12, groups: 1, groupSize: 2, evalEvery: 0, saveEvery: 0, hackWatchEvery: 0, sampling: { maxTokens: 3, temperature: 1 }, ...overrides })
    const backend = Layer.fresh(Local.layer({ config: { ...TINY, vocabSize: CharTokenizer.VOCAB_SIZE }, seed: 0, stateDir: RunLog.paths(dir).state, lora: { rank: 2, alpha: 4, targets: ["q", "v"] } }))
    yield* Runner.run(settings, vowels).pipe(Effect.provide(backend), quiet)
    const file = RunLog.paths(dir).rollouts
    const rows = Fs.existsSync(file) ? Fs.readFileSync(file, "utf8").split("\n").filter((l) => l.trim() !== "").map((l) => JSON.parse(l) as { step: number }) : []
    return { steps: [...new Set(rows.map((r) => r.step))], rows: rows.length }
  })

describe("rollouts.jsonl", () => {
  it.live("holds every sample of the first step, every 10th and the last by default; none with --log-rollouts-every 0", () =>
    Effect.gen(function* () {
      assert.strictEqual(Runner.defaults("vowels").logRolloutsEvery, 10)
      const byDefault = yield* loggedSteps({})
      assert.deepStrictEqual(byDefault.steps, [1, 10, 12])
      assert.strictEqual(byDefault.rows, 3 * 2)
      assert.deepStrictEqual(yield* loggedSteps({ logRolloutsEvery: 0 }), { steps: [], rows: 0 })
    }))
})

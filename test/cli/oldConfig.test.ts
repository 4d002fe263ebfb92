/**
 * A run folder written before AdamParams was camelCase has `adam.learning_rate`,
 * `adam.weight_decay` and `adam.grad_clip_norm` in its config.json; `--resume` of it
 * still works, keeps those settings, and rewrites config.json with the camelCase keys.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { readSaved, train, upgradeSaved } from "../../src/app/Training.ts"
import vowels from "../envs/vowels.ts"

const small = { steps: 2, groups: 1, groupSize: 2, evalEvery: 0, saveEvery: 1, logRolloutsEvery: 0 } as const

describe("config.json of an older run", () => {
  it("old snake_case adam keys become camelCase; a camelCase key wins over its old name", () => {
    assert.deepStrictEqual(
      upgradeSaved({ steps: 3, adam: { learning_rate: 0.1, beta1: 0.9, beta2: 0.99, eps: 1e-8, weight_decay: 0.2, grad_clip_norm: 0.3 } }),
      { steps: 3, adam: { learningRate: 0.1, beta1: 0.9, beta2: 0.99, eps: 1e-8, weightDecay: 0.2, gradClipNorm: 0.3 } },
    )
    assert.deepStrictEqual(upgradeSaved({ adam: { learning_rate: 0.1, learningRate: 0.5 } }), { adam: { learningRate: 0.5 } })
    assert.deepStrictEqual(upgradeSaved({ steps: 3 }), { steps: 3 })
  })

  it.effect("--resume of a run folder whose config.json has the old keys continues with its settings", () =>
    Effect.gen(function* () {
      const out = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-oldconfig-"))
      const first = yield* train({ env: vowels, ...small, name: "old", out, lr: 0.0123, weightDecay: 0.01, gradClip: 0.75 })
      const file = Path.join(first.outDir, "config.json")
      // rewrite config.json as an older gyre wrote it: snake_case adam keys
      const json = JSON.parse(Fs.readFileSync(file, "utf8"))
      const { learningRate, weightDecay, gradClipNorm, ...rest } = json.adam
      json.adam = { ...rest, learning_rate: learningRate, weight_decay: weightDecay, grad_clip_norm: gradClipNorm }
      Fs.writeFileSync(file, JSON.stringify(json, null, 2))

      const saved = yield* readSaved(first.outDir)
      assert.deepStrictEqual(saved.adam, first.settings.adam)

      const resumed = yield* train({ env: vowels, resume: first.outDir, steps: 3 })
      assert.strictEqual(resumed.settings.adam.learningRate, 0.0123)
      assert.strictEqual(resumed.settings.adam.weightDecay, 0.01)
      assert.strictEqual(resumed.settings.adam.gradClipNorm, 0.75)
      assert.deepStrictEqual(resumed.metrics.map((m) => m["step"]), [3])
      const rewritten = JSON.parse(Fs.readFileSync(file, "utf8")).adam
      assert.deepStrictEqual(Object.keys(rewritten).sort(), ["beta1", "beta2", "eps", "gradClipNorm", "learningRate", "weightDecay"])
    }))
})

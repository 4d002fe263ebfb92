/**
 * `klCoef` through the runner: the penalty's metrics are logged, a large coefficient keeps
 * the policy nearer the base model than a negligible one, and a bad coefficient stops the
 * run before any work.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { Local } from "../../src/backends/local/index.ts"
import * as RunLog from "../../src/folder/RunLog.ts"
import * as Runner from "../../src/Runner.ts"
import vowels, { toySettings, TINY, quiet } from "../envs/vowels.ts"


const runWith = (klCoef: number) =>
  Effect.gen(function* () {
    const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-kl-run-"))
    const backend = Layer.fresh(Local.layer({ config: TINY, seed: 0, stateDir: RunLog.paths(dir).state, lora: { rank: 4, alpha: 8, targets: ["q", "k", "v", "o", "w1", "w2"] } }))
    return yield* Runner.run(toySettings(dir, { steps: 24, klCoef, saveEvery: 0, logRolloutsEvery: 0 }), vowels).pipe(Effect.provide(backend), quiet)
  })

const lastMean = (rows: ReadonlyArray<Record<string, number>>, key: string) => {
  const xs = rows.slice(-6).map((r) => r[key]).filter((x): x is number => x !== undefined)
  return xs.reduce((a, b) => a + b, 0) / xs.length
}

describe("the KL penalty in the runner", () => {
  it.effect("logs kl/policy_ref_*, and a large coefficient keeps the policy nearer the base", () =>
    Effect.gen(function* () {
      const off = yield* runWith(0)
      assert.isFalse("kl/policy_ref_k3" in off[0]!)
      // a negligible coefficient: the same training, with the KL measured
      const loose = yield* runWith(1e-9)
      const tight = yield* runWith(1)
      assert.isBelow(Math.abs(loose[0]!["kl/policy_ref_v1"]!), 1e-4, "on-policy at step 1: the policy is the base")
      const kLoose = lastMean(loose, "kl/policy_ref_k3")
      const kTight = lastMean(tight, "kl/policy_ref_k3")
      assert.isBelow(kTight, kLoose * 0.6, `k3 ${kTight} with coef 1 vs ${kLoose} with ~0`)
    }))

  it.effect("a negative coefficient stops the run before any work", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(runWith(-1))
      assert.strictEqual(error._tag, "RunError")
      assert.match(error.message, /--kl-coef must be a finite number >= 0/)
    }))
})

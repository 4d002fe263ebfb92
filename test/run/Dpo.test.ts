/**
 * DPO: `CustomLoss.dpo` against the formula written out here (values, and central
 * differences of it for the gradient, to 1e-5); a step on the embedded trainer that widens
 * the chosen completion's margin; and `--dpo` through the runner: pairs built from the
 * env's `preference`, held-out preference accuracy logged, flags it cannot go with.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as fc from "fast-check"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { Local } from "../../src/backends/local/index.ts"
import { adamParams, type Datum } from "../../src/contract/Contract.ts"
import * as CustomLoss from "../../src/vocabulary/CustomLoss.ts"
import * as DatumM from "../../src/vocabulary/Datum.ts"
import { Reference } from "../../src/services/Reference.ts"
import { Trainer } from "../../src/services/Trainer.ts"
import { train } from "../../src/app/Training.ts"
import * as Dpo from "../../src/run/Dpo.ts"
import { tinyConfig, tinyLora } from "../backends/local/helpers.ts"

/** The DPO loss, written from the paper: mean over pairs of -log sigmoid(beta * ((c - cr) - (r - rr))), sums over completion positions. */
const dpoLoss = (beta: number, completion: ReadonlyArray<ReadonlyArray<boolean>>, lps: ReadonlyArray<ReadonlyArray<number>>, refs: ReadonlyArray<ReadonlyArray<number>>) => {
  const sum = (k: number, xs: ReadonlyArray<number>) => xs.reduce((s, x, t) => (completion[k]![t] ? s + x : s), 0)
  let total = 0
  const pairs = lps.length / 2
  for (let p = 0; p < pairs; p++) {
    const z = beta * ((sum(2 * p, lps[2 * p]!) - sum(2 * p, refs[2 * p]!)) - (sum(2 * p + 1, lps[2 * p + 1]!) - sum(2 * p + 1, refs[2 * p + 1]!)))
    total += -Math.log(1 / (1 + Math.exp(-z)))
  }
  return total / pairs
}

const datumOf = (prompt: number, completion: number): Datum => DatumM.sft({ prompt: Array.from({ length: prompt }, (_, i) => 3 + i), completion: Array.from({ length: completion }, (_, i) => 10 + i) })

describe("CustomLoss.dpo", () => {
  it("equals the paper's formula, and its gradient is the formula's central differences (to 1e-5)", () => {
    const shapes = fc.array(fc.record({ prompt: fc.integer({ min: 1, max: 4 }), chosen: fc.integer({ min: 1, max: 4 }), rejected: fc.integer({ min: 1, max: 4 }) }), { minLength: 1, maxLength: 3 })
    fc.assert(
      fc.property(shapes, fc.double({ min: 0.01, max: 2, noNaN: true }), fc.integer({ min: 0, max: 1000 }), (pairs, beta, seed) => {
        const data = pairs.flatMap((p) => [datumOf(p.prompt, p.chosen), datumOf(p.prompt, p.rejected)])
        let state = seed + 1
        const rand = () => ((state = (state * 1103515245 + 12345) % 2 ** 31) / 2 ** 31) * -3 - 0.01
        const lps = data.map((d) => d.lossFnInputs["target_tokens"]!.data.map((_, t) => (t === 0 ? 0 : rand())))
        const refs = data.map((d) => d.lossFnInputs["target_tokens"]!.data.map((_, t) => (t === 0 ? 0 : rand())))
        const completion = data.map((d) => d.lossFnInputs["target_tokens"]!.data.map((x, t) => t > 0 && x !== -100))
        const out = Effect.runSync(CustomLoss.dpo(beta, refs).fn(data, lps))
        assert.isBelow(Math.abs(out.loss - dpoLoss(beta, completion, lps, refs)), 1e-9)
        const h = 1e-5
        lps.forEach((row, k) =>
          row.forEach((_, t) => {
            const bump = (d: number) => lps.map((r, kk) => r.map((x, tt) => (kk === k && tt === t ? x + d : x)))
            const fd = (dpoLoss(beta, completion, bump(h), refs) - dpoLoss(beta, completion, bump(-h), refs)) / (2 * h)
            assert.isBelow(Math.abs(fd - out.gradients[k]![t]!), 1e-5, `datum ${k} position ${t}`)
          })
        )
      }),
      { numRuns: 60 },
    )
  })

  it.effect("a step on the embedded trainer widens the chosen completion's margin over the reference", () =>
    Effect.gen(function* () {
      const data = [datumOf(3, 3), datumOf(3, 2)]
      const reference = yield* (yield* Reference).logprobs(data.map((d) => d.modelInput))
      const first = yield* CustomLoss.forwardBackward(data, CustomLoss.dpo(0.5, reference))
      yield* (yield* Trainer).optimStep(adamParams({ learningRate: 0.02 }))
      const second = yield* CustomLoss.forwardBackward(data, CustomLoss.dpo(0.5, reference))
      const [m1, m2]: Array<Readonly<Record<string, number>>> = [first.metrics, second.metrics]
      assert.isBelow(Math.abs(m1!["dpo/margin"]!), 1e-6, "the policy starts as the reference")
      assert.isAbove(m2!["dpo/margin"]!, 0)
      assert.isBelow(m2!["loss"]!, m1!["loss"]!)
    }).pipe(Effect.provide(Layer.fresh(Local.layer({ config: tinyConfig, lora: tinyLora, seed: 1, stateDir: Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-dpo-")) })))))
})

describe("--dpo", () => {
  const out = () => Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-dpo-run-"))

  it.live("trains math's preference pairs and logs held-out preference accuracy", () =>
    Effect.gen(function* () {
      const run = yield* train({ env: "math", dpo: true, dpoBeta: 0.2, steps: 2, groups: 4, groupSize: 2, evalEvery: 2, evalSize: 20, saveEvery: 0, out: out() })
      assert.deepStrictEqual(run.settings.dpo, { beta: 0.2 })
      // the base policy's row (step 0) and step 2's carry the held-out accuracy
      const rows = Fs.readFileSync(Path.join(run.outDir, "metrics.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l) as Record<string, number>)
      assert.deepStrictEqual(rows.filter((r) => r["test/dpo/accuracy"] !== undefined).map((r) => r["step"]), [0, 2])
      const last = run.metrics.at(-1)!
      assert.strictEqual(last["dpo/pairs"], 4)
      assert.isDefined(last["dpo/policy_accuracy"])
      // config.json records it, and --resume goes on with DPO at the same beta
      assert.deepStrictEqual(JSON.parse(Fs.readFileSync(Path.join(run.outDir, "config.json"), "utf8")).dpo, { beta: 0.2 })
      const resumed = yield* train({ resume: run.outDir, steps: 3 })
      assert.deepStrictEqual(resumed.settings.dpo, { beta: 0.2 })
      assert.strictEqual(resumed.metrics.at(-1)!["dpo/pairs"], 4)
    }))

  it.live("from an SFT run (--init-from) its reference is that policy: step 1's loss is log 2 and no held-out pair is preferred yet", () =>
    Effect.gen(function* () {
      const sft = yield* train({ env: "math", sft: true, steps: 4, groups: 4, lr: 0.02, evalEvery: 0, saveEvery: 0, out: out() })
      const run = yield* train({ env: "math", dpo: true, dpoBeta: 0.5, initFrom: sft.outDir, steps: 1, groups: 4, groupSize: 2, evalEvery: 1, evalSize: 20, saveEvery: 0, out: out() })
      // the policy is its reference at step 1: every margin is 0, sigma(0) = 1/2
      assert.closeTo(run.metrics[0]!["train/loss"]!, Math.log(2), 1e-5)
      assert.isBelow(Math.abs(run.metrics[0]!["dpo/margin"]!), 1e-5)
      // the starting policy's row: its implicit rewards are all 0, so no pair counts as preferred
      const rows = Fs.readFileSync(Path.join(run.outDir, "metrics.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l) as Record<string, number>)
      assert.strictEqual(rows.find((r) => r["step"] === 0)!["test/dpo/accuracy"], 0)
    }))

  it("accuracy is DPO's reward accuracy: the implicit reward margin beta·[(c - c_ref) - (r - r_ref)], not the policy's summed log-probs", () => {
    // pair 0: the chosen answer is longer, so its summed log-prob is lower, but the policy raised it over the reference
    const policy = [-9, -4, -3, -5]
    const reference = [-10, -4, -3, -4]
    assert.deepStrictEqual(Dpo.margins(0.5, policy, reference), [0.5 * ((-9 + 10) - (-4 + 4)), 0.5 * ((-3 + 3) - (-5 + 4))])
    assert.deepStrictEqual(Dpo.margins(0.5, policy, reference).map((z) => z > 0), [true, true])
  })

  it.effect("needs the env's preference pairs, and goes with no --sft, --teacher or --kl-coef", () =>
    Effect.gen(function* () {
      const e = yield* Effect.flip(train({ env: "calculator", dpo: true, steps: 1, evalEvery: 0, out: out() }))
      assert.include(e.message, "--dpo needs env calculator to define preference(problem)")
      assert.include((yield* Effect.flip(train({ env: "math", dpo: true, sft: true, steps: 1, out: out() }))).message, "--dpo trains on the env's preference pairs against the policy it starts from; it goes with none of --sft")
    }))
})

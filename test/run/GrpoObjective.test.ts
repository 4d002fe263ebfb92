/**
 * `--recipe grpo` against GRPO as TRL's GRPOTrainer computes it (`loss_type="grpo"`),
 * written out here from its source, independently of gyre's modules:
 *
 *     A_i   = (r_i - mean(r)) / (torch.std(r) + 1e-4)           (Bessel-corrected std)
 *     l_it  = -min(rho·A_i, clip(rho, 0.8, 1.2)·A_i) + beta·(exp(ref - lp) - (ref - lp) - 1)
 *     loss  = mean over EVERY sample i of the batch of (sum_t l_it / |o_i|)
 *
 * gyre's pieces (`Advantage.compute` with `group_sample_std`, `aggregationWeights` with
 * `denominator: "batch"`, `KlLoss.objective`) must give that loss and its gradient with
 * respect to the learner log-probs (central differences of the reference, to 1e-6), in random
 * batches where some groups are constant and some rewards tie the mean. Without the KL term
 * the weighted sum over the trained samples alone must equal the reference too, and the old
 * denominator (`trained`) must be the reference times G / (samples that train).
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as fc from "fast-check"
import { Local } from "../../src/backends/local/index.ts"
import * as RunLog from "../../src/folder/RunLog.ts"
import * as K from "../../src/metrics/MetricKeys.ts"
import * as Runner from "../../src/Runner.ts"
import { RECIPES } from "../../src/run/Recipes.ts"
import { Trainer } from "../../src/services/Trainer.ts"
import vowels, { toySettings } from "../envs/vowels.ts"
import type { Datum } from "../../src/contract/Contract.ts"
import * as Advantage from "../../src/vocabulary/Advantage.ts"
import * as DatumM from "../../src/vocabulary/Datum.ts"
import * as KlLoss from "../../src/loss/KlLoss.ts"
import { resolveLoss } from "../../src/loss/Loss.ts"
import { aggregationWeights } from "../../src/loss/MicroBatch.ts"

const BETA = 0.04

interface Sample {
  readonly reward: number
  /** per completion token: learner, sampler and reference log-probs */
  readonly lp: ReadonlyArray<number>
  readonly q: ReadonlyArray<number>
  readonly ref: ReadonlyArray<number>
}

/** torch.std: the Bessel-corrected sample std. */
const torchStd = (xs: ReadonlyArray<number>) => {
  const m = xs.reduce((a, b) => a + b, 0) / xs.length
  return Math.sqrt(xs.reduce((a, x) => a + (x - m) ** 2, 0) / (xs.length - 1))
}

/** TRL's advantages and loss_type="grpo" loss over a batch of groups. */
const trl = (groups: ReadonlyArray<ReadonlyArray<Sample>>, beta: number, lps?: ReadonlyArray<ReadonlyArray<number>>) => {
  let total = 0
  let count = 0
  let k = 0
  for (const g of groups) {
    const r = g.map((s) => s.reward)
    const mean = r.reduce((a, b) => a + b, 0) / r.length
    const std = torchStd(r)
    for (const s of g) {
      const A = (s.reward - mean) / (std + 1e-4)
      const lp = lps?.[k] ?? s.lp
      let sum = 0
      lp.forEach((l, t) => {
        const rho = Math.exp(l - s.q[t]!)
        const clipped = Math.min(Math.max(rho, 0.8), 1.2)
        const d = s.ref[t]! - l
        sum += -Math.min(rho * A, clipped * A) + beta * (Math.exp(d) - d - 1)
      })
      total += sum / lp.length
      count++
      k++
    }
  }
  return total / count
}

const P = 2
const prompt = [1, 2]

/** gyre's datums of the batch (every sample, or only those whose advantage is not 0), with their positions' inputs. */
const gyre = (groups: ReadonlyArray<ReadonlyArray<Sample>>, keepAll: boolean) => {
  const advantages = Advantage.compute(groups.map((g) => g.map((s) => s.reward)), "group_sample_std").advantages
  const data: Array<Datum> = []
  const masks: Array<ReadonlyArray<number>> = []
  const lps: Array<Array<number>> = []
  const refs: Array<Array<number>> = []
  const index: Array<number> = []
  let samples = 0
  let tokens = 0
  let k = 0
  groups.forEach((g, gi) =>
    g.forEach((s, si) => {
      const A = advantages[gi]![si]!
      samples++
      tokens += s.lp.length
      const completion = s.lp.map((_, t) => 5 + t)
      if (keepAll || A !== 0) {
        data.push(DatumM.rl({ prompt, completion, samplerLogprobs: s.q, advantage: A }))
        masks.push(DatumM.rl({ prompt, completion, samplerLogprobs: s.q, advantage: 1 }).lossFnInputs["advantages"]!.data)
        lps.push([0, 0, ...s.lp])
        refs.push([0, 0, ...s.ref])
        index.push(k)
      }
      k++
    })
  )
  return { data, masks, lps, refs, index, batch: { samples, tokens } }
}

const ppo = (() => {
  const r = resolveLoss("ppo", { clip_low_threshold: 0.8, clip_high_threshold: 1.2 })
  if (!r.ok) throw new Error(r.message)
  return r.value
})()

const sample = fc.integer({ min: 1, max: 6 }).chain((T) =>
  fc.record({
    // few distinct rewards: constant groups and rewards equal to the mean happen
    reward: fc.constantFrom(0, 0.5, 1),
    lp: fc.array(fc.double({ min: -3, max: -0.05, noNaN: true }), { minLength: T, maxLength: T }),
    q: fc.array(fc.double({ min: -3, max: -0.05, noNaN: true }), { minLength: T, maxLength: T }),
    ref: fc.array(fc.double({ min: -3, max: -0.05, noNaN: true }), { minLength: T, maxLength: T }),
  })
)
const batch = fc.array(fc.array(sample, { minLength: 2, maxLength: 4 }), { minLength: 1, maxLength: 4 })

describe("--recipe grpo is TRL's GRPO", () => {
  it("group_sample_std is (r - mean) / (torch.std + 1e-4); a constant group is all 0", () => {
    const out = Advantage.compute([[1, 0, 0, 1, 1], [2, 2]], "group_sample_std")
    const std = torchStd([1, 0, 0, 1, 1])
    assert.deepStrictEqual(out.advantages[0], [1, 0, 0, 1, 1].map((r) => (r - 0.6) / (std + 1e-4)))
    assert.deepStrictEqual(out.advantages[1], [0, 0])
    assert.strictEqual(out.noOpGroups, 1)
  })

  it("the loss with the k3 term, over every sample of the batch, and its gradient (central differences)", () => {
    fc.assert(
      fc.property(batch, (groups) => {
        const g = gyre(groups, true)
        const weights = aggregationWeights(
          g.data.map((d, j) => ({ ...d, lossFnInputs: { ...d.lossFnInputs, advantages: { ...d.lossFnInputs["advantages"]!, data: g.masks[j]! } } })),
          "ppo",
          { kind: "sequence_mean", denominator: "batch" },
          undefined,
          g.batch,
        )
        const out = KlLoss.objective({ data: g.data, logprobs: g.lps, reference: g.refs, masks: g.masks, loss: ppo, coef: BETA, weights })
        const expected = trl(groups, BETA)
        assert.closeTo(out.loss, expected, 1e-9 * Math.max(1, Math.abs(expected)))
        const h = 1e-6
        g.lps.forEach((row, j) =>
          row.forEach((_, t) => {
            if (t < P) return assert.strictEqual(out.gradients[j]![t], 0)
            const bumped = (d: number) => groups.flat().map((s, k) => (k === g.index[j] ? s.lp.map((l, u) => (u === t - P ? l + d : l)) : s.lp))
            const fd = (trl(groups, BETA, bumped(h)) - trl(groups, BETA, bumped(-h))) / (2 * h)
            // the clip's kink: a finite difference across it is neither side's derivative
            const s = groups.flat()[g.index[j]!]!
            const rho = Math.exp(s.lp[t - P]! - s.q[t - P]!)
            if (Math.abs(rho - 0.8) < 1e-4 || Math.abs(rho - 1.2) < 1e-4) return
            assert.closeTo(out.gradients[j]![t]!, fd, 1e-6, `datum ${j} position ${t}`)
          })
        )
      }),
      { numRuns: 150 },
    )
  })

  it("without the KL term the trained samples alone give it (zero-advantage samples still count in 1/G); the old denominator is G / trained times it", () => {
    fc.assert(
      fc.property(batch, (groups) => {
        const g = gyre(groups, false)
        const expected = trl(groups, 0)
        const origins = g.data.map((_, j) => j)
        const lossOf = (weights: ReadonlyArray<number> | undefined) =>
          KlLoss.objective({ data: g.data, logprobs: g.lps, reference: g.lps, masks: g.masks, loss: ppo, coef: 0, weights }).loss
        const batchWeights = aggregationWeights(g.data, "ppo", { kind: "sequence_mean", denominator: "batch" }, origins, g.batch)
        assert.closeTo(g.data.length === 0 ? 0 : lossOf(batchWeights), expected, 1e-9)
        if (g.data.length === 0) return
        const trainedWeights = aggregationWeights(g.data, "ppo", { kind: "sequence_mean" }, origins, g.batch)
        assert.closeTo(lossOf(trainedWeights), (expected * g.batch.samples) / g.data.length, 1e-9)
      }),
      { numRuns: 150 },
    )
  })

  it("token_mean over the batch divides by every sampled token, zero-advantage samples' included (DAPO's 1/sum|o_i|)", () => {
    const groups = [[{ reward: 1, lp: [-1, -1], q: [-1, -1], ref: [-1, -1] }, { reward: 0, lp: [-1, -1, -1], q: [-1, -1, -1], ref: [-1, -1, -1] }], [
      { reward: 1, lp: [-1], q: [-1], ref: [-1] },
      { reward: 1, lp: [-1, -1, -1, -1], q: [-1, -1, -1, -1], ref: [-1, -1, -1, -1] },
    ]]
    const g = gyre(groups, false)
    assert.deepStrictEqual(aggregationWeights(g.data, "ppo", { kind: "token_mean", denominator: "batch" }, undefined, g.batch), [1 / 10, 1 / 10])
    assert.isUndefined(aggregationWeights(g.data, "ppo", { kind: "token_mean" }, undefined, g.batch))
  })

  it("k3 is exp(ref - lp) - (ref - lp) - 1 and its derivative 1 - exp(ref - lp)", () => {
    for (const [lp, ref] of [[-1, -2], [-2, -1], [-0.5, -0.5], [-3, -0.1]] as const) {
      const d = ref - lp
      const k = KlLoss.k3(lp, ref)
      assert.closeTo(k.value, Math.exp(d) - d - 1, 1e-12)
      assert.closeTo(k.dlp, 1 - Math.exp(d), 1e-12)
    }
  })
})

describe("--recipe grpo through the runner", () => {
  /** Test double: the embedded trainer, counting the datums of each forward (the custom loss's pass for the learner's log-probs). */
  const counting = (dir: string, forwards: Array<number>) =>
    Layer.effect(
      Trainer,
      Effect.gen(function* () {
        const inner = yield* Trainer
        return Trainer.of({ ...inner, forward: (data, lossFn, options) => Effect.sync(() => forwards.push(data.length)).pipe(Effect.andThen(inner.forward(data, lossFn, options))) })
      }),
    ).pipe(
      Layer.provideMerge(Layer.fresh(Local.layer({ config: { vocabSize: 98, contextLength: 32, nLayers: 1, dModel: 32, nHeads: 2, mlpRatio: 2 }, seed: 0, stateDir: RunLog.paths(dir).state, lora: { rank: 4, alpha: 8, targets: ["q", "k", "v", "o", "w1", "w2"] } }))),
    )
  const quiet = Effect.provideService(Runner.Progress, { onStep: () => Effect.void, onPhase: () => Effect.void })

  it.effect("trains every unmasked sample (zero-advantage ones carry the KL term) and logs the k3 KL to the base", () =>
    Effect.gen(function* () {
      const dir = Path.join(Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-grpo-")), "r")
      const forwards: Array<number> = []
      const settings = toySettings(dir, { steps: 2, groups: 4, groupSize: 4, saveEvery: 0, ...RECIPES.grpo.settings, recipe: "grpo" })
      const metrics = yield* Runner.run(settings, vowels).pipe(Effect.provide(counting(dir, forwards)), quiet)
      // one forward per step, over all 4 x 4 samples (none is masked in vowels)
      assert.deepStrictEqual(forwards, [16, 16])
      const k3 = metrics.map((m) => m["kl/policy_ref_k3"])
      // the policy starts as the base (LoRA B = 0): no KL at step 1; after an update, some
      assert.isBelow(k3[0]!, 1e-6)
      assert.isAbove(k3[1]!, 1e-6)
      // the loss's tokens are every sampled token of the batch
      assert.strictEqual(metrics[1]![K.Train.activeTokens], metrics[1]!["kl/policy_ref_tokens"])
    }))

  it.effect("--kl-loss-coef goes with none of --kl-coef, --teacher, --sft, --dpo, --stream-minibatches; the message names both", () =>
    Effect.gen(function* () {
      const dir = Path.join(Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-grpo-")), "r")
      const e = yield* Runner.run(toySettings(dir, { steps: 1, ...RECIPES.grpo.settings, recipe: "grpo", klCoef: 0.1 }), vowels).pipe(Effect.provide(counting(dir, [])), quiet, Effect.flip)
      assert.strictEqual(e.reason, "Settings")
      assert.include(e.message, "--kl-loss-coef 0.04")
      assert.include(e.message, "--kl-coef 0.1")
      assert.include(e.message, "--recipe grpo sets --kl-loss-coef 0.04")
    }))
})

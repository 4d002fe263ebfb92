/**
 * GSPO (sequence-level importance ratios), against a formula written out here from the
 * paper: s_i = (prod_t rho_t)^(1/n_i) over a datum's active positions, the sequence term
 * -min(s_i·A, clip(s_i, lo, hi)·A), carried by each active position. Checked on the pure
 * loss (values and central differences of the datum's total), on the embedded trainer's
 * own log-probs, and through `sequence_mean` aggregation, where the step's loss is the
 * mean of the sequence terms.
 */
import { assert, describe, it } from "@effect/vitest"
import * as fc from "fast-check"
import { beforeAll } from "vitest"
import type { Datum } from "../../../src/contract/Contract.ts"
import { isClipped, resolveLoss, sequenceOf, tokenLoss } from "../../../src/loss/Loss.ts"
import { Rng } from "../../../src/backends/local/Rng.ts"
import { makeEngines, rlDatum } from "./helpers.ts"

const gspo = (config: Record<string, number> = {}) => {
  const r = resolveLoss("gspo", config)
  if (!r.ok) throw new Error(r.message)
  return r.value
}

/** The paper's sequence term, written independently: the ratio as a product of token ratios, then its n-th root. */
const sequenceTerm = (lps: ReadonlyArray<number>, qs: ReadonlyArray<number>, A: number, lo: number, hi: number) => {
  const s = Math.pow(lps.reduce((p, lp, t) => p * Math.exp(lp - qs[t]!), 1), 1 / lps.length)
  return -Math.min(s * A, Math.min(Math.max(s, lo), hi) * A)
}

/** A datum's total gspo loss under `tokenLoss`: positions 1..n active, the ratio recomputed from `lps`. */
const total = (r: ReturnType<typeof gspo>, lps: ReadonlyArray<number>, qs: ReadonlyArray<number>, A: number) => {
  const lp = [0, ...lps]
  const q = [0, ...qs]
  const sequence = sequenceOf(lp, q, (i) => i > 0)
  return lps.reduce((sum, _, t) => sum + tokenLoss(r, lp[t + 1]!, q[t + 1]!, A, 1, sequence).loss, 0)
}

describe("gspo (pure)", () => {
  it("each active position carries the sequence term; its derivative is that of the datum's total (central differences)", () => {
    const values = fc.array(fc.double({ min: -6, max: -0.01, noNaN: true }), { minLength: 1, maxLength: 12 })
    fc.assert(
      fc.property(values, fc.array(fc.double({ min: -0.3, max: 0.3, noNaN: true }), { minLength: 12, maxLength: 12 }), fc.double({ min: -3, max: 3, noNaN: true }), fc.double({ min: 0.5, max: 1, noNaN: true }), fc.double({ min: 1, max: 1.5, noNaN: true }), (qs, shift, A, lo, hi) => {
        const r = gspo({ clip_low_threshold: lo, clip_high_threshold: hi })
        const lps = qs.map((q, t) => q + shift[t]!)
        const expected = sequenceTerm(lps, qs, A, lo, hi)
        const sequence = sequenceOf([0, ...lps], [0, ...qs], (i) => i > 0)
        for (let t = 0; t < lps.length; t++) {
          const here = tokenLoss(r, lps[t]!, qs[t]!, A, 1, sequence)
          assert.isTrue(Math.abs(here.loss - expected) < 1e-9 * (1 + Math.abs(expected)), `${here.loss} vs ${expected}`)
          const h = 1e-6
          const bump = (d: number) => lps.map((lp, k) => (k === t ? lp + d : lp))
          const clipState = (x: ReadonlyArray<number>) => isClipped(r, 0, 0, A, sequenceOf([0, ...x], [0, ...qs], (i) => i > 0))
          if (clipState(bump(-h)) !== clipState(lps) || clipState(bump(h)) !== clipState(lps)) continue
          const fd = (total(r, bump(h), qs, A) - total(r, bump(-h), qs, A)) / (2 * h)
          assert.isTrue(Math.abs(fd - here.dlp) < 1e-4 * (1 + Math.abs(here.dlp)), `dlp ${here.dlp} vs ${fd}`)
        }
      }),
      { numRuns: 200 },
    )
  })

  it("defaults to the paper's clip range, and refuses a low bound over the high one", () => {
    assert.deepStrictEqual(gspo().config, { clip_low_threshold: 1 - 3e-4, clip_high_threshold: 1 + 4e-4 })
    const bad = resolveLoss("gspo", { clip_low_threshold: 1, clip_high_threshold: 1 })
    assert.isTrue(bad.ok)
    const worse = resolveLoss("gspo", { clip_low_threshold: 0.9, clip_high_threshold: 0.95 })
    assert.isFalse(worse.ok)
  })
})

describe("gspo (embedded trainer)", () => {
  let engines: Awaited<ReturnType<typeof makeEngines>>
  beforeAll(async () => {
    engines = await makeEngines({ randomB: true })
  })

  it("the trainer's loss is the sum over datums of n_i copies of the sequence term, on its own log-probs", () => {
    const rng = new Rng(9)
    const data: Array<Datum> = [rlDatum(rng, 5, 7, { zeroSome: true }), rlDatum(rng, 3, 12), rlDatum(rng, 9, 4, { zeroSome: true })]
    // one advantage per datum, as the runner writes them
    const flat = data.map((d): Datum => {
      const adv = d.lossFnInputs["advantages"]!.data
      const A = adv.find((a) => a !== 0) ?? 1
      return { ...d, lossFnInputs: { ...d.lossFnInputs, advantages: { ...d.lossFnInputs["advantages"]!, data: adv.map((a) => (a === 0 ? 0 : A)) } } }
    })
    for (const config of [{}, { clip_low_threshold: 0, clip_high_threshold: 100 }] as Array<Record<string, number>>) {
      const r = gspo(config)
      const out = engines.trainer.run(flat, r, { backward: false })
      let sum = 0
      let active = 0
      let clipped = 0
      flat.forEach((d, k) => {
        const lps = out.lossFnOutputs[k]!.logprobs
        const adv = d.lossFnInputs["advantages"]!.data
        const on = lps.map((_, i) => i > 0 && adv[i] !== 0)
        const mine = lps.filter((_, i) => on[i])
        const qs = d.lossFnInputs["logprobs"]!.data.filter((_, i) => on[i])
        const A = adv.find((a) => a !== 0)!
        const term = sequenceTerm(mine, qs, A, r.config["clip_low_threshold"]!, r.config["clip_high_threshold"]!)
        sum += mine.length * term
        active += mine.length
        const s = Math.pow(mine.reduce((p, lp, t) => p * Math.exp(lp - qs[t]!), 1), 1 / mine.length)
        if (s * A > Math.min(Math.max(s, r.config["clip_low_threshold"]!), r.config["clip_high_threshold"]!) * A) clipped += mine.length
      })
      assert.strictEqual(out.metrics["active_tokens"], active)
      assert.isTrue(Math.abs(out.metrics["loss:sum"]! - sum) < 1e-5 * (1 + Math.abs(sum)), `${out.metrics["loss:sum"]} vs ${sum}`)
      assert.isTrue(Math.abs((out.metrics["clip_fraction"] ?? 0) - clipped / active) < 1e-9)
    }
  })
})

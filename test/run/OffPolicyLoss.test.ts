/**
 * The off-policy corrections under ppo and cispo, against verl's formula written out here
 * (`compute_policy_loss_vanilla` with `tis_imp_ratio_cap`, and `rollout_rs: sequence`):
 *
 *     r_t   = exp(lp_t - old_t)                      old = the trainer's log-prob before the update
 *     w_t   = sg(min(exp(old_t - q_t), cap))         q = the sampler's
 *     ppo   l_t = -w_t · min(r_t·A, clip(r_t, lo, hi)·A)
 *     cispo l_t = -w_t · sg(clip(r_t, lo, hi)) · A · lp_t
 *     a datum whose exp(sum_t (old_t - q_t)) leaves [mis_seq_low, mis_seq_high] trains nothing
 *
 * gyre takes one optimizer step per batch, so `old` is the learner's log-prob at the call:
 * the loss and its derivative (central differences in `lp` with `old` held) are compared
 * there. The sequence mask is checked on the embedded trainer too: a datum it masks adds
 * nothing to the gradient or the denominator.
 */
import { assert, describe, it } from "@effect/vitest"
import * as fc from "fast-check"
import { Rng } from "../../src/backends/local/Rng.ts"
import type { Datum } from "../../src/contract/Contract.ts"
import { isClipped, resolveLoss, type ResolvedLoss, sequenceOf, tokenLoss } from "../../src/loss/Loss.ts"
import { makeEngines, rlDatum } from "../backends/local/helpers.ts"

const resolved = (lossFn: string, config: Record<string, number>): ResolvedLoss => {
  const r = resolveLoss(lossFn, config)
  if (!r.ok) throw new Error(r.message)
  return r.value
}

const clip = (x: number, lo: number, hi: number) => Math.min(Math.max(x, lo), hi)

/** verl's decoupled per-token losses, with `old` detached. */
const verl = {
  ppo: (lp: number, old: number, q: number, A: number, cap: number, lo: number, hi: number) => {
    const r = Math.exp(lp - old)
    return -Math.min(Math.exp(old - q), cap) * Math.min(r * A, clip(r, lo, hi) * A)
  },
  // the clipped ratio is detached: its value is taken at lp = old, where it is clip(1)
  cispo: (lp: number, old: number, q: number, A: number, cap: number, lo: number, hi: number) => -Math.min(Math.exp(old - q), cap) * clip(1, lo, hi) * A * lp,
}

describe("tis_cap under ppo and cispo is verl's decoupled truncated importance weight", () => {
  for (const lossFn of ["ppo", "cispo"] as const) {
    it(`${lossFn}: the loss and its derivative at lp = pi_old`, () => {
      fc.assert(
        fc.property(
          fc.double({ min: -4, max: -0.01, noNaN: true }),
          fc.double({ min: -4, max: -0.01, noNaN: true }),
          fc.double({ min: -3, max: 3, noNaN: true }),
          fc.double({ min: 1, max: 3, noNaN: true }),
          (lp, q, A, cap) => {
            const lo = lossFn === "ppo" ? 0.8 : 0
            const hi = lossFn === "ppo" ? 1.2 : 4
            const r = resolved(lossFn, { tis_cap: cap })
            const t = tokenLoss(r, lp, q, A, 1)
            const f = verl[lossFn]
            assert.closeTo(t.loss, f(lp, lp, q, A, cap, lo, hi), 1e-9)
            const h = 1e-6
            const fd = (f(lp + h, lp, q, A, cap, lo, hi) - f(lp - h, lp, q, A, cap, lo, hi)) / (2 * h)
            assert.closeTo(t.dlp, fd, 1e-5 * Math.max(1, Math.abs(fd)))
            // truncation is what clip_fraction counts
            assert.strictEqual(isClipped(r, lp, q, A), Math.exp(lp - q) > cap)
          },
        ),
        { numRuns: 300 },
      )
    })
  }

  it("without tis_cap ppo and cispo are as before; the keys are validated as importance_sampling's", () => {
    const ppo = resolved("ppo", {})
    assert.deepStrictEqual(tokenLoss(ppo, -1, -1.5, 2, 1), { loss: -1.2 * 2, dlp: 0 })
    const bad = (lossFn: string, config: Record<string, number>) => {
      const r = resolveLoss(lossFn, config)
      return r.ok ? "" : r.message
    }
    assert.include(bad("ppo", { tis_cap: 0.5 }), "loss_fn_config.tis_cap must be >= 1 for ppo, got 0.5")
    assert.include(bad("cispo", { mis_seq_low: 2 }), "loss_fn_config.mis_seq_low must be in [0, 1] for cispo, got 2")
    assert.include(bad("ppo", { tis: 2 }), "allowed keys: clip_low_threshold, clip_high_threshold, tis_cap, mis_low, mis_high, mis_seq_low, mis_seq_high")
    assert.strictEqual(bad("importance_sampling", { mis_seq_high: 3 }), "")
  })
})

describe("sequence-level masked importance sampling", () => {
  it("masks every token of a datum whose sequence ratio leaves the bounds, and no token of one inside them", () => {
    fc.assert(
      fc.property(
        fc.constantFrom("ppo", "cispo", "importance_sampling"),
        fc.array(fc.tuple(fc.double({ min: -4, max: -0.01, noNaN: true }), fc.double({ min: -4, max: -0.01, noNaN: true })), { minLength: 1, maxLength: 6 }),
        fc.double({ min: 0.05, max: 1, noNaN: true }),
        fc.double({ min: 1, max: 20, noNaN: true }),
        (lossFn, tokens, low, high) => {
          const lps = [0, ...tokens.map(([lp]) => lp)]
          const qs = [0, ...tokens.map(([, q]) => q)]
          const ratio = Math.exp(tokens.reduce((s, [lp, q]) => s + lp - q, 0))
          const sequence = sequenceOf(lps, qs, (i) => i > 0)
          const masked = resolved(lossFn, { mis_seq_low: low, mis_seq_high: high })
          const plain = resolved(lossFn, {})
          const out = ratio < low || ratio > high
          tokens.forEach(([lp, q]) => {
            const t = tokenLoss(masked, lp, q, 1.5, 1, sequence)
            assert.deepStrictEqual(t, out ? { loss: 0, dlp: 0 } : tokenLoss(plain, lp, q, 1.5, 1))
            assert.strictEqual(isClipped(masked, lp, q, 1.5, sequence), out || isClipped(plain, lp, q, 1.5))
          })
        },
      ),
      { numRuns: 300 },
    )
  })

  it("on the embedded trainer a masked datum adds nothing to the gradient (its tokens stay in the denominator, as the token mask's do)", async () => {
    const engines = await makeEngines({ seed: 4, randomB: true })
    try {
      const rng = new Rng(9)
      const kept = rlDatum(rng, 2, 4)
      const drifted = rlDatum(rng, 2, 5)
      // the sampler's log-probs of the drifted datum are far below the learner's: its ratio is huge
      const far: Datum = { ...drifted, lossFnInputs: { ...drifted.lossFnInputs, logprobs: { ...drifted.lossFnInputs["logprobs"]!, data: drifted.lossFnInputs["logprobs"]!.data.map((x, i) => (i < 2 ? 0 : -30)) } } }
      const ppo = resolved("ppo", { mis_seq_high: 100 })
      const run = (data: ReadonlyArray<Datum>, loss: ResolvedLoss) => {
        engines.trainer.zeroGrad()
        const out = engines.trainer.run([...data], loss, { backward: true })
        return { grads: engines.trainer.gradients(), metrics: out.metrics }
      }
      const both = run([kept, far], ppo)
      const alone = run([kept], resolved("ppo", {}))
      assert.strictEqual(both.metrics["active_tokens"], 4 + 5)
      // the masked datum's tokens count in the denominator (they are active), but train nothing
      for (const [k, g] of Object.entries(alone.grads)) {
        const got = both.grads[k]!
        g.forEach((x, i) => assert.closeTo(got[i]!, (x * 4) / 9, 1e-6 + 1e-4 * Math.abs(x), k))
      }
      // clip_fraction counts the masked datum's 5 tokens beside the kept datum's clipped ones
      assert.closeTo(both.metrics["clip_fraction"]!, (alone.metrics["clip_fraction"]! * 4 + 5) / 9, 1e-9)
    } finally {
      engines.trainer.dispose()
      engines.sampler.dispose()
      engines.model.dispose()
    }
  })
})

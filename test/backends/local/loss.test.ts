import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fc from "fast-check"
import { beforeAll } from "vitest"
import { type Datum, float32, type LossFn } from "../../../src/contract/Contract.ts"
import { isClipped, isSequenceLoss, LOSS_NAMES, resolveLoss, tokenLoss, validateLoss } from "../../../src/loss/Loss.ts"
import { Rng } from "../../../src/backends/local/Rng.ts"
import { ceDatum, makeEngines, rlDatum } from "./helpers.ts"

const resolved = (name: string, config: Record<string, number> = {}) => {
  const r = resolveLoss(name, config)
  if (!r.ok) throw new Error(r.message)
  return r.value
}

const clip = (x: number, lo: number, hi: number) => Math.min(Math.max(x, lo), hi)

/** the formulas, written out directly */
const direct = (name: LossFn, c: Record<string, number>, lp: number, q: number, A: number, w: number): number => {
  const rho = Math.exp(lp - q)
  switch (name) {
    case "cross_entropy":
      return -lp * w
    case "importance_sampling":
      // the off-policy correction: masked outside [mis_low, mis_high], the weight truncated at tis_cap
      return rho < c["mis_low"]! || rho > c["mis_high"]! ? 0 : -(Math.min(rho, c["tis_cap"]!) * A)
    case "ppo":
      return -Math.min(rho * A, clip(rho, c["clip_low_threshold"]!, c["clip_high_threshold"]!) * A)
    case "cispo":
      return -(clip(rho, c["clip_low_threshold"]!, c["clip_high_threshold"]!) * lp * A)
    case "dro":
      return -(lp * A - 0.5 * c["beta"]! * (lp - q) ** 2)
    case "dppo": {
      const d = Math.exp(lp) - Math.exp(q)
      const masked = (A > 0 && d > c["delta_high"]!) || (A < 0 && d < -c["delta_low"]!)
      return masked ? 0 : -(rho * A)
    }
    case "gspo":
      throw new Error("gspo is a sequence loss: test/backends/local/gspo.test.ts checks it")
  }
}

/** the losses of one position each (gspo reads its whole datum: gspo.test.ts) */
const TOKEN_LOSSES = LOSS_NAMES.filter((n) => !isSequenceLoss(n))

const configArb = (name: LossFn): fc.Arbitrary<Record<string, number>> => {
  switch (name) {
    case "ppo":
    case "cispo":
      return fc.record({ clip_low_threshold: fc.double({ min: 0, max: 1, noNaN: true }), clip_high_threshold: fc.double({ min: 1, max: 5, noNaN: true }) })
    case "dro":
      return fc.record({ beta: fc.double({ min: 0, max: 2, noNaN: true }) })
    case "dppo":
      return fc.record({ delta_low: fc.double({ min: 0, max: 1, noNaN: true }), delta_high: fc.double({ min: 0, max: 1, noNaN: true }) })
    case "importance_sampling":
      return fc.record(
        { tis_cap: fc.double({ min: 1, max: 3, noNaN: true }), mis_low: fc.double({ min: 0, max: 1, noNaN: true }), mis_high: fc.double({ min: 1, max: 3, noNaN: true }) },
        { requiredKeys: [] },
      )
    default:
      return fc.constant({})
  }
}

describe("Loss (pure)", () => {
  for (const name of TOKEN_LOSSES) {
    it(`${name}: tokenLoss equals the formula and its derivative`, () => {
      fc.assert(
        fc.property(
          configArb(name),
          fc.double({ min: -8, max: -1e-3, noNaN: true }),
          fc.double({ min: -8, max: -1e-3, noNaN: true }),
          fc.double({ min: -3, max: 3, noNaN: true }),
          fc.double({ min: 0, max: 2, noNaN: true }),
          (config, lp, q, A, w) => {
            const r = resolved(name, config)
            const t = tokenLoss(r, lp, q, A, w)
            const expected = direct(name, r.config, lp, q, A, w)
            assert.isTrue(Math.abs(t.loss - expected) <= 1e-9 * (1 + Math.abs(expected)), `${t.loss} vs ${expected}`)
            // the derivative: cispo's clipped ratio is detached, so its gradient is -clip(rho)·A;
            // the others by central differences where no clip or mask switches around lp
            const h = 1e-6
            if (name === "cispo") {
              const c = clip(Math.exp(lp - q), r.config["clip_low_threshold"]!, r.config["clip_high_threshold"]!)
              assert.isTrue(Math.abs(t.dlp + c * A) < 1e-12)
            } else if (name === "importance_sampling" && isClipped(r, lp, q, A)) {
              // truncated: the weight min(rho, cap) is detached from rho (-cap·A), masked: nothing
              const rho = Math.exp(lp - q)
              const masked = rho < r.config["mis_low"]! || rho > r.config["mis_high"]!
              assert.strictEqual(t.dlp, masked ? 0 : -r.config["tis_cap"]! * A)
            } else if (isClipped(r, lp - h, q, A) === isClipped(r, lp, q, A) && isClipped(r, lp + h, q, A) === isClipped(r, lp, q, A)) {
              const fd = (direct(name, r.config, lp + h, q, A, w) - direct(name, r.config, lp - h, q, A, w)) / (2 * h)
              assert.isTrue(Math.abs(fd - t.dlp) < 1e-4 * (1 + Math.abs(t.dlp)), `dlp ${t.dlp} vs ${fd}`)
            }
          },
        ),
        { numRuns: 300 },
      )
    })
  }

  it("clip boundaries: ppo and cispo at rho = clip_low and rho = clip_high", () => {
    for (const name of ["ppo", "cispo"] as const) {
      const r = resolved(name, { clip_low_threshold: 0.8, clip_high_threshold: 1.2 })
      for (const rho of [0.8, 1.2]) {
        for (const A of [-1.5, 0.7]) {
          const q = -2
          const lp = q + Math.log(rho)
          const t = tokenLoss(r, lp, q, A, 1)
          assert.isTrue(Math.abs(t.loss - direct(name, r.config, lp, q, A, 1)) < 1e-12)
        }
      }
    }
    // dppo at exactly delta: not masked (strict inequality)
    const d = resolved("dppo", { delta_low: 0.25, delta_high: 0.25 })
    const q = Math.log(0.5)
    assert.isTrue(tokenLoss(d, Math.log(0.75), q, 1, 1).loss !== 0)
    assert.strictEqual(tokenLoss(d, Math.log(0.9), q, 1, 1).loss, 0)
    assert.strictEqual(tokenLoss(d, Math.log(0.2), q, -1, 1).loss, 0)
    assert.isTrue(tokenLoss(d, Math.log(0.9), q, -1, 1).loss !== 0)
  })

})

describe("Loss config", () => {
  it("defaults and validation messages", () => {
    // the off-policy corrections (importance_sampling, ppo, cispo) are off unless asked for
    const off = { tis_cap: Number.MAX_VALUE, mis_low: 0, mis_high: Number.MAX_VALUE, mis_seq_low: 0, mis_seq_high: Number.MAX_VALUE }
    assert.deepStrictEqual(resolved("ppo").config, { clip_low_threshold: 0.8, clip_high_threshold: 1.2, ...off })
    assert.deepStrictEqual(resolved("cispo").config, { clip_low_threshold: 0, clip_high_threshold: 4, ...off })
    assert.deepStrictEqual(resolved("dro").config, { beta: 0.05 })
    assert.deepStrictEqual(resolved("dppo").config, { delta_low: 0.2, delta_high: 0.2 })
    assert.deepStrictEqual(resolved("importance_sampling").config, off)
    const bad = (name: string, config: Record<string, unknown>) => {
      const r = resolveLoss(name, config)
      assert.isFalse(r.ok)
      return r.ok ? "" : r.message
    }
    assert.include(bad("ppoo", {}), "unknown loss")
    const m = bad("ppo", { clip_low: 0.9 })
    assert.include(m, "clip_low")
    assert.include(m, "clip_low_threshold, clip_high_threshold")
    assert.include(bad("ppo", { clip_low_threshold: 1.5 }), "clip_low_threshold must be in [0, 1]")
    assert.include(bad("ppo", { clip_high_threshold: 0.5 }), "clip_high_threshold must be >= 1")
    assert.include(bad("cross_entropy", { beta: 1 }), "takes no config")
    assert.include(bad("importance_sampling", { beta: 1 }), "tis_cap, mis_low, mis_high")
    assert.include(bad("importance_sampling", { tis_cap: 0.5 }), "tis_cap must be >= 1")
    assert.include(bad("dro", { beta: Number.NaN }), "finite")
    assert.include(bad("dppo", { delta_low: -0.1 }), "delta_low")
  })

  it.effect("validateLoss fails with BackendError InvalidInput", () =>
    Effect.gen(function* () {
      const e = yield* Effect.flip(validateLoss("op", "ppo", { eps: 0.2 }))
      assert.strictEqual(e.reason, "InvalidInput")
      assert.include(e.message, "eps")
    }))
})

describe("Loss (trainer)", () => {
  let engines: Awaited<ReturnType<typeof makeEngines>>
  beforeAll(async () => {
    engines = await makeEngines({ randomB: true })
  })

  for (const name of TOKEN_LOSSES) {
    it(`${name}: the trainer's loss equals the formula on its own logprobs`, () => {
      const rng = new Rng(42 + name.length)
      const data: Array<Datum> =
        name === "cross_entropy"
          ? [ceDatum(rng, 5, 7, { weights: true }), ceDatum(rng, 3, 12), ceDatum(rng, 9, 4, { weights: true })]
          : [rlDatum(rng, 5, 7, { zeroSome: true }), rlDatum(rng, 3, 12), rlDatum(rng, 9, 4, { zeroSome: true })]
      const config: Record<string, number> = name === "dppo" ? { delta_low: 0.003, delta_high: 0.003 } : name === "ppo" ? { clip_low_threshold: 0.9, clip_high_threshold: 1.1 } : {}
      const r = resolved(name, config)
      engines.trainer.zeroGrad()
      const out = engines.trainer.run(data, r, { backward: false })
      let sum = 0
      let active = 0
      data.forEach((d, k) => {
        const lps = out.lossFnOutputs[k]!.logprobs
        const inp = d.lossFnInputs
        assert.strictEqual(lps.length, inp["target_tokens"]?.data.length ?? inp["advantages"]!.data.length)
        assert.strictEqual(lps[0], 0)
        for (let i = 1; i < lps.length; i++) {
          const tgt = inp["target_tokens"]?.data[i] ?? 0
          const w = inp["weights"]?.data[i] ?? 1
          const A = inp["advantages"]?.data[i] ?? 0
          const on = name === "cross_entropy" ? tgt !== -100 && w > 0 : A !== 0
          if (!on) continue
          active++
          sum += direct(name, r.config, lps[i]!, inp["logprobs"]?.data[i] ?? 0, A, w)
        }
      })
      assert.strictEqual(out.metrics["active_tokens"], active)
      assert.isTrue(Math.abs(out.metrics["loss:sum"]! - sum) < 1e-5 * (1 + Math.abs(sum)))
      assert.isTrue(Math.abs(out.metrics["loss"]! - sum / active) < 1e-5)
    })
  }

  it("importance_sampling with an off-policy correction: the trainer truncates and masks as the formula says, and reports clip_fraction", () => {
    const rng = new Rng(77)
    const data = [rlDatum(rng, 5, 7), rlDatum(rng, 3, 12), rlDatum(rng, 9, 4)]
    const plain = engines.trainer.run(data, resolved("importance_sampling"), { backward: false })
    assert.isUndefined(plain.metrics["clip_fraction"])
    // the ratios of these datums, to put the cap and the band between them
    const rhos = data.flatMap((d, k) => plain.lossFnOutputs[k]!.logprobs.map((lp, i) => ({ rho: Math.exp(lp - d.lossFnInputs["logprobs"]!.data[i]!), A: d.lossFnInputs["advantages"]!.data[i]! })).filter((x, i) => i > 0 && x.A !== 0)).map((x) => x.rho).sort((a, b) => a - b)
    const config = { tis_cap: Math.max(1, rhos[Math.floor(rhos.length * 0.8)]!), mis_low: Math.min(1, rhos[Math.floor(rhos.length * 0.1)]!) }
    const r = resolved("importance_sampling", config)
    const out = engines.trainer.run(data, r, { backward: false })
    let sum = 0
    let clipped = 0
    data.forEach((d, k) => {
      const lps = out.lossFnOutputs[k]!.logprobs
      for (let i = 1; i < lps.length; i++) {
        const A = d.lossFnInputs["advantages"]!.data[i]!
        if (A === 0) continue
        const q = d.lossFnInputs["logprobs"]!.data[i]!
        sum += direct("importance_sampling", r.config, lps[i]!, q, A, 1)
        if (isClipped(r, lps[i]!, q, A)) clipped++
      }
    })
    assert.isAbove(clipped, 0)
    assert.isTrue(Math.abs(out.metrics["loss:sum"]! - sum) < 1e-5 * (1 + Math.abs(sum)))
    assert.closeTo(out.metrics["clip_fraction"]!, clipped / out.metrics["active_tokens"]!, 1e-9)
  })

  it("all-inactive calls report zero loss (never NaN) and add no gradient", () => {
    const rng = new Rng(3)
    const d = rlDatum(rng, 4, 4)
    const zero: Datum = { ...d, lossFnInputs: { ...d.lossFnInputs, advantages: float32(new Array(8).fill(0)) } }
    engines.trainer.zeroGrad()
    const out = engines.trainer.run([zero], resolved("ppo"), { backward: true })
    assert.strictEqual(out.metrics["loss"], 0)
    assert.strictEqual(out.metrics["active_tokens"], 0)
    for (const g of Object.values(engines.trainer.grads)) assert.isTrue(g.every((x) => x === 0))
  })
})

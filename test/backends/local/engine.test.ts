import { assert, describe, it } from "@effect/vitest"
import * as tf from "@tensorflow/tfjs"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, beforeAll } from "vitest"
import { type Datum, float32, modelInputFromTokens } from "../../../src/contract/Contract.ts"
import { LOSS_NAMES, resolveLoss } from "../../../src/loss/Loss.ts"
import * as Checkpoint from "../../../src/backends/local/Checkpoint.ts"
import { Rng } from "../../../src/backends/local/Rng.ts"
import type { Weights } from "../../../src/backends/local/Model.ts"
import { adam, ceDatum, makeEngines, maxAbsDiff, rlDatum } from "./helpers.ts"

const resolved = (name: string, config: Record<string, number> = {}) => {
  const r = resolveLoss(name, config)
  if (!r.ok) throw new Error(r.message)
  return r.value
}

let tmp: string
beforeAll(() => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), "gyre-local-"))
})
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }))

describe("gradients", () => {
  for (const name of LOSS_NAMES) {
    it(`${name}: backprop matches central finite differences`, async () => {
      const { trainer, model } = await makeEngines({ randomB: true, seed: 11 })
      const rng = new Rng(5 + name.length)
      // gspo: a clip wide open, so every sequence takes the unclipped branch the differences see
      const config: Record<string, number> = name === "dppo" ? { delta_low: 0.003, delta_high: 0.003 } : name === "gspo" ? { clip_low_threshold: 0, clip_high_threshold: 100 } : {}
      const r = resolved(name, config)
      let data: Array<Datum> =
        name === "cross_entropy" ? [ceDatum(rng, 4, 6, { weights: true }), ceDatum(rng, 6, 3)] : [rlDatum(rng, 4, 6, { zeroSome: true }), rlDatum(rng, 6, 3)]
      // gspo: one advantage per datum, as the runner writes them (with per-token advantages its gradient is GSPO-token's)
      if (name === "gspo") data = data.map((d) => ({ ...d, lossFnInputs: { ...d.lossFnInputs, advantages: float32(d.lossFnInputs["advantages"]!.data.map((a) => (a === 0 ? 0 : 0.7))) } }))
      if (name !== "cross_entropy") {
        // sampler logprobs placed well away from every clip / mask boundary
        const lps = trainer.run(data, r, { backward: false }).lossFnOutputs.map((o) => o.logprobs)
        data = data.map((d, k) => {
          const q = lps[k]!.map((lp, i) => {
            if (i === 0) return 0
            const p = Math.exp(lp)
            const ratios = [0.5, 1, 1.6].map((x) => x * (1 + 0.05 * rng.normal()))
            for (const ratio of ratios.sort(() => rng.next() - 0.5)) {
              const delta = p - p / ratio
              if (name !== "dppo" || Math.abs(Math.abs(delta) - 0.003) > 0.001) return lp - Math.log(ratio)
            }
            return lp
          })
          return { ...d, lossFnInputs: { ...d.lossFnInputs, logprobs: float32(q) } }
        })
      }
      trainer.zeroGrad()
      trainer.run(data, r, { backward: true })
      const g = trainer.gradients()
      const theta: Weights = {}
      for (const [k, p] of Object.entries(trainer.params)) theta[k] = p.slice()
      // direction: half the gradient direction, half random
      const gn = Math.sqrt(Object.values(g).reduce((s, a) => s + a.reduce((t, x) => t + x * x, 0), 0))
      assert.isTrue(gn > 0)
      const u: Weights = {}
      let un = 0
      for (const [k, a] of Object.entries(g)) {
        u[k] = a.map((x) => x / gn + rng.normal() / Math.sqrt(4000))
        un += u[k]!.reduce((t, x) => t + x * x, 0)
      }
      for (const a of Object.values(u)) for (let i = 0; i < a.length; i++) a[i] = a[i]! / Math.sqrt(un)
      // cispo's clipped ratio is detached: its gradient is that of -Σ sg(c)·A·lp / n with c fixed at theta
      const base = trainer.run(data, r, { backward: false })
      const detached = (out: typeof base) => {
        let s = 0
        data.forEach((d, k) =>
          out.lossFnOutputs[k]!.logprobs.forEach((lp, i) => {
            const A = d.lossFnInputs["advantages"]!.data[i]!
            if (i === 0 || A === 0) return
            const rho = Math.exp(base.lossFnOutputs[k]!.logprobs[i]! - d.lossFnInputs["logprobs"]!.data[i]!)
            s += -Math.min(Math.max(rho, r.config["clip_low_threshold"]!), r.config["clip_high_threshold"]!) * A * lp
          })
        )
        return s / base.metrics["active_tokens"]!
      }
      const lossAt = (t: number) => {
        const w: Weights = {}
        for (const [k, p] of Object.entries(theta)) w[k] = p.map((x, i) => x + t * u[k]![i]!)
        trainer.setParams(w)
        const out = trainer.run(data, r, { backward: false })
        return name === "cispo" ? detached(out) : out.metrics["loss"]!
      }
      const eps = 3e-3
      const fd = (lossAt(eps) - lossAt(-eps)) / (2 * eps)
      trainer.setParams(theta)
      let an = 0
      for (const [k, a] of Object.entries(g)) for (let i = 0; i < a.length; i++) an += a[i]! * u[k]![i]!
      assert.isTrue(Math.abs(fd - an) <= 2e-3 + 1e-2 * Math.abs(an), `finite difference ${fd} vs backprop ${an}`)
      trainer.dispose()
      model.dispose()
    })
  }
})

describe("sampler and trainer agree", () => {
  const check = async (options: { useKvCache: boolean; prefixCacheSize: number; prefixReuse?: boolean }) => {
    const { trainer, sampler, model } = await makeEngines({ randomB: true, seed: 21, sampler: options })
    sampler.setAdapter(trainer.publish())
    const rng = new Rng(9)
    const prompts = [0, 1, 2].map(() => [1, ...Array.from({ length: 6 }, () => 4 + rng.int(95))])
    prompts.push([1, ...Array.from({ length: 9 }, () => 4 + rng.int(95))])
    // concurrent requests: batched by prompt length
    const results = await Promise.all([
      ...prompts.map((p) => sampler.sample(p, { maxTokens: 10, temperature: 1 }, { numSamples: 3, includePromptLogprobs: true })),
      sampler.sample(prompts[0]!, { maxTokens: 10, temperature: 1 }, { numSamples: 2 }),
    ])
    assert.isTrue(sampler.stats.maxRequestsPerBatch >= 3, `batched ${sampler.stats.maxRequestsPerBatch}`)
    const data: Array<Datum> = []
    const expected: Array<{ P: number; lps: ReadonlyArray<number>; prompt?: ReadonlyArray<number> }> = []
    results.forEach((res, j) => {
      const prompt = j < prompts.length ? prompts[j]! : prompts[0]!
      for (const s of res.sequences) {
        assert.isTrue(s.tokens.length >= 1 && s.tokens.length <= 10)
        assert.strictEqual(s.logprobs.length, s.tokens.length)
        data.push({ modelInput: modelInputFromTokens([...prompt, ...s.tokens]), lossFnInputs: {} })
        expected.push({ P: prompt.length, lps: s.logprobs, ...(res.promptLogprobs ? { prompt: res.promptLogprobs } : {}) })
      }
    })
    const out = trainer.run(data, resolved("cross_entropy"), { backward: false })
    let worst = 0
    out.lossFnOutputs.forEach((o, k) => {
      const e = expected[k]!
      worst = Math.max(worst, maxAbsDiff(o.logprobs.slice(e.P), e.lps))
      if (e.prompt) worst = Math.max(worst, maxAbsDiff(o.logprobs.slice(0, e.P), e.prompt))
    })
    assert.isTrue(worst < 1e-4, `max |diff| ${worst}`)
    // computeLogprobs too
    const cl = sampler.computeLogprobs(data[0]!.modelInput.chunks[0]!.tokens)
    assert.isTrue(maxAbsDiff(cl, out.lossFnOutputs[0]!.logprobs) < 1e-4)
    sampler.dispose()
    trainer.dispose()
    model.dispose()
  }
  it("with the KV cache and prefix reuse", () => check({ useKvCache: true, prefixCacheSize: 16 }))
  it("with the KV cache, no prefix cache", () => check({ useKvCache: true, prefixCacheSize: 0 }))
  it("with the KV cache, every row prefilled separately", () => check({ useKvCache: true, prefixCacheSize: 0, prefixReuse: false }))
  it("without the KV cache", () => check({ useKvCache: false, prefixCacheSize: 16 }))

  it("decoding with and without the KV cache gives the same samples, also when rows stop early", async () => {
    const run = async (useKvCache: boolean) => {
      const { sampler, model } = await makeEngines({ seed: 8, randomB: true, sampler: { useKvCache } })
      // many stop ids so that rows finish at different steps
      const stop = Array.from({ length: 30 }, (_, i) => 4 + 3 * i)
      const r = await sampler.sample([1, 10, 20, 30], { maxTokens: 12, temperature: 1, seed: 3, stop }, { numSamples: 16 })
      sampler.dispose()
      model.dispose()
      return r
    }
    const withCache = await run(true)
    const without = await run(false)
    const lengths = new Set(withCache.sequences.map((q) => q.tokens.length))
    assert.isTrue(lengths.size > 2, "rows should stop at different steps")
    withCache.sequences.forEach((q, i) => {
      const o = without.sequences[i]!
      assert.deepStrictEqual(o.tokens, q.tokens)
      assert.strictEqual(o.stopReason, q.stopReason)
      assert.isTrue(maxAbsDiff(o.logprobs, q.logprobs) < 1e-4)
    })
  })

  it("repeat requests hit the prefix cache and give the same samples for the same seed", async () => {
    const { sampler, model } = await makeEngines({ seed: 3 })
    const p = [1, 10, 20, 30, 40]
    const a = await sampler.sample(p, { maxTokens: 8, temperature: 1, seed: 7 }, { numSamples: 4 })
    const b = await sampler.sample(p, { maxTokens: 8, temperature: 1, seed: 7 }, { numSamples: 4 })
    assert.deepStrictEqual(a, b)
    assert.strictEqual(sampler.stats.prefixHits, 1)
    // batched with another request: still the same samples
    const [c] = await Promise.all([
      sampler.sample(p, { maxTokens: 8, temperature: 1, seed: 7 }, { numSamples: 4 }),
      sampler.sample([1, 11, 21, 31, 41], { maxTokens: 5, temperature: 0.7, topK: 5 }, { numSamples: 3 }),
    ])
    assert.deepStrictEqual(c, a)
    sampler.dispose()
    model.dispose()
  })

  it("padding: a sequence's logprobs do not depend on the other rows of its batch", async () => {
    const { trainer, model } = await makeEngines({ randomB: true, seed: 4 })
    const rng = new Rng(1)
    const short = ceDatum(rng, 3, 4)
    const long = ceDatum(rng, 10, 12)
    const ce = resolved("cross_entropy")
    const alone = trainer.run([short], ce, { backward: false }).lossFnOutputs[0]!.logprobs
    const batched = trainer.run([long, short], ce, { backward: false }).lossFnOutputs[1]!.logprobs
    assert.isTrue(maxAbsDiff(alone, batched) < 1e-5)
    trainer.dispose()
    model.dispose()
  })
})

describe("trainer", () => {
  it("forward leaves accumulated gradients unchanged", async () => {
    const { trainer, model } = await makeEngines({ randomB: true, seed: 5 })
    const rng = new Rng(2)
    const data = [rlDatum(rng, 4, 5), rlDatum(rng, 5, 3)]
    trainer.run(data, resolved("ppo"), { backward: true })
    const before = trainer.gradients()
    trainer.run([rlDatum(rng, 3, 3)], resolved("importance_sampling"), { backward: false })
    for (const [k, g] of Object.entries(before)) assert.deepStrictEqual(trainer.grads[k], g)
    // and accumulation adds up
    trainer.run(data, resolved("ppo"), { backward: true })
    for (const [k, g] of Object.entries(before)) assert.isTrue(maxAbsDiff(Array.from(trainer.grads[k]!), Array.from(g.map((x) => 2 * x))) < 1e-6)
    trainer.dispose()
    model.dispose()
  })

  it("a few cross_entropy steps lower the loss", async () => {
    const { trainer, model } = await makeEngines({ seed: 6 })
    const rng = new Rng(8)
    const data = [ceDatum(rng, 4, 8), ceDatum(rng, 4, 8), ceDatum(rng, 6, 6)]
    const ce = resolved("cross_entropy")
    const first = trainer.run(data, ce, { backward: true }).metrics["loss"]!
    trainer.optimStep(adam)
    for (let i = 0; i < 8; i++) {
      trainer.run(data, ce, { backward: true })
      trainer.optimStep(adam)
    }
    const last = trainer.run(data, ce, { backward: false }).metrics["loss"]!
    assert.isTrue(last < first - 0.5, `${first} -> ${last}`)
    assert.strictEqual(trainer.version, 9)
    trainer.dispose()
    model.dispose()
  })

  it("a few RL steps on a toy reward raise it", async () => {
    const { trainer, sampler, model } = await makeEngines({ seed: 7 })
    // reward: fraction of completion tokens that are the character "a" (id 4 + 65)
    const A_ID = 4 + ("a".charCodeAt(0) - 32)
    const prompt = [1, 40, 41, 42]
    const params = { maxTokens: 4, temperature: 1 }
    const meanReward = async (n: number) => {
      const r = await sampler.sample(prompt, params, { numSamples: n })
      return r.sequences.reduce((s, q) => s + q.tokens.filter((t) => t === A_ID).length / q.tokens.length, 0) / n
    }
    const before = await meanReward(64)
    for (let step = 0; step < 12; step++) {
      const res = await sampler.sample(prompt, params, { numSamples: 16 })
      const rewards = res.sequences.map((q) => q.tokens.filter((t) => t === A_ID).length / q.tokens.length)
      const mean = rewards.reduce((a, b) => a + b, 0) / rewards.length
      const std = Math.sqrt(rewards.reduce((a, b) => a + (b - mean) ** 2, 0) / rewards.length)
      const data: Array<Datum> = res.sequences.map((q, i) => {
        const adv = std === 0 ? 0 : (rewards[i]! - mean) / std
        const L = prompt.length + q.tokens.length
        return {
          modelInput: modelInputFromTokens([...prompt, ...q.tokens]),
          lossFnInputs: {
            logprobs: float32([...new Array(prompt.length).fill(0), ...q.logprobs]),
            advantages: float32(Array.from({ length: L }, (_, k) => (k < prompt.length ? 0 : adv))),
          },
        }
      })
      trainer.run(data, resolved("ppo"), { backward: true })
      trainer.optimStep({ ...adam, learningRate: 3e-2 })
      sampler.setAdapter(trainer.publish())
    }
    const after = await meanReward(64)
    assert.isTrue(after > before + 0.1, `${before} -> ${after}`)
    sampler.dispose()
    trainer.dispose()
    model.dispose()
  })

  it("saveState -> loadState(withOptimizer) -> continue equals never stopping", async () => {
    const rng = new Rng(12)
    const data = [rlDatum(rng, 4, 5), rlDatum(rng, 5, 4)]
    const ppo = resolved("ppo")
    const steps = async (t: Awaited<ReturnType<typeof makeEngines>>["trainer"], n: number) => {
      for (let i = 0; i < n; i++) {
        t.run(data, ppo, { backward: true })
        t.optimStep(adam)
      }
    }
    const a = await makeEngines({ seed: 13 })
    await steps(a.trainer, 3)
    const file = path.join(tmp, "mid.ckpt")
    await a.trainer.saveState(file)
    await steps(a.trainer, 3)
    const ref = a.trainer.run(data, ppo, { backward: false }).lossFnOutputs

    const b = await makeEngines({ seed: 99 })
    // same base, different adapter init: loading must restore everything
    const c = await makeEngines({ seed: 13 })
    c.trainer.setParams(b.trainer.params)
    await c.trainer.loadState(file, true)
    assert.strictEqual(c.trainer.version, 3)
    await steps(c.trainer, 3)
    const got = c.trainer.run(data, ppo, { backward: false }).lossFnOutputs
    got.forEach((o, k) => assert.isTrue(maxAbsDiff(o.logprobs, ref[k]!.logprobs) <= 1e-6))
    for (const e of [a, b, c]) {
      e.trainer.dispose()
      e.sampler.dispose()
      e.model.dispose()
    }
  })

  it("a state file whose Adam moment is short fails naming it, and leaves the trainer as it was", async () => {
    const rng = new Rng(21)
    const data = [rlDatum(rng, 4, 5)]
    const ppo = resolved("ppo")
    const a = await makeEngines({ seed: 22 })
    a.trainer.run(data, ppo, { backward: true })
    a.trainer.optimStep(adam)
    const file = path.join(tmp, "short-moment.ckpt")
    await a.trainer.saveState(file)
    const ck = await Checkpoint.read(file)
    const name = Object.keys(ck.tensors).find((k) => k.startsWith("adam_v/"))!
    await Checkpoint.write(file, ck.meta, { ...ck.tensors, [name]: ck.tensors[name]!.slice(1) })
    const b = await makeEngines({ seed: 23 })
    const before = b.trainer.run(data, ppo, { backward: false }).lossFnOutputs
    const versionBefore = b.trainer.version
    let message = ""
    await b.trainer.loadState(file, true).catch((e: Error) => {
      message = e.message
    })
    assert.include(message, `${name} is missing or has the wrong size`)
    assert.strictEqual(b.trainer.version, versionBefore)
    const after = b.trainer.run(data, ppo, { backward: false }).lossFnOutputs
    assert.deepStrictEqual(after.map((o) => [...o.logprobs]), before.map((o) => [...o.logprobs]))
    for (const e of [a, b]) {
      e.trainer.dispose()
      e.sampler.dispose()
      e.model.dispose()
    }
  })

  it("tensor count is stable over 20 train + sample steps", async () => {
    const { trainer, sampler, model } = await makeEngines({ seed: 14, sampler: { prefixCacheSize: 4 } })
    const rng = new Rng(3)
    const ppo = resolved("ppo")
    const step = async (i: number) => {
      const prompts = [0, 1, 2].map((g) => [1, 5 + g, 6 + ((i + g) % 7), 7])
      const res = await Promise.all(prompts.map((p) => sampler.sample(p, { maxTokens: 5, temperature: 1 }, { numSamples: 4, includePromptLogprobs: true })))
      const data = res.flatMap((r, g) => r.sequences.map((q) => {
        const L = prompts[g]!.length + q.tokens.length
        return {
          modelInput: modelInputFromTokens([...prompts[g]!, ...q.tokens]),
          lossFnInputs: {
            logprobs: float32([...new Array(prompts[g]!.length).fill(0), ...q.logprobs]),
            advantages: float32(Array.from({ length: L }, (_, k) => (k < 4 ? 0 : rng.normal()))),
          },
        }
      }))
      trainer.run(data, ppo, { backward: true, topK: 3 })
      trainer.run(data, ppo, { backward: false })
      trainer.optimStep(adam)
      sampler.setAdapter(trainer.publish())
      sampler.computeLogprobs([1, 2, 3, 4])
    }
    for (let i = 0; i < 3; i++) await step(i)
    const n0 = tf.memory().numTensors
    for (let i = 3; i < 20; i++) await step(i)
    assert.strictEqual(tf.memory().numTensors, n0)
    sampler.dispose()
    trainer.dispose()
    model.dispose()
  })
})

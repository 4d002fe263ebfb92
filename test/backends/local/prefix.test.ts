/**
 * Reuse of K/V across the turns of an episode in the embedded sampler.
 *
 * A later turn's prompt is the previous turn's prompt ++ its sampled tokens ++ an
 * observation. With reuse the sampler prefills only what the cache does not hold; the
 * reference is a second sampler on the same weights with no cache at all
 * (`prefixCacheSize: 0`), which prefills every prompt whole. For the same seeds both must
 * sample the same tokens with the same log-probs (and the same prompt log-probs).
 */
import { assert, describe, it } from "@effect/vitest"
import fc from "fast-check"
import * as tf from "@tensorflow/tfjs"
import type { SampleResult, SamplingParams } from "../../../src/contract/Contract.ts"
import { resolveLoss } from "../../../src/loss/Loss.ts"
import { initTf } from "../../../src/backends/local/index.ts"
import { Rng } from "../../../src/backends/local/Rng.ts"
import { LocalSamplerEngine, type SamplerEngineOptions } from "../../../src/backends/local/SamplerEngine.ts"
import { adam, ceDatum, makeEngines, maxAbsDiff, tinyConfig } from "./helpers.ts"

/** log-probs with and without reuse agree to this (tokens must be identical) */
const TOL = 1e-5

const setup = async (seed: number, options: SamplerEngineOptions = {}) => {
  const { model, trainer, sampler } = await makeEngines({ seed, randomB: true, sampler: options })
  const adapter = trainer.publish()
  sampler.setAdapter(adapter)
  const reference = new LocalSamplerEngine(model, { seed: 99, prefixCacheSize: 0 })
  reference.setAdapter(adapter)
  const dispose = () => {
    sampler.dispose()
    reference.dispose()
    trainer.dispose()
    model.dispose()
  }
  return { model, trainer, sampler, reference, dispose }
}

const same = (a: SampleResult, b: SampleResult, what: string) => {
  assert.strictEqual(a.sequences.length, b.sequences.length, what)
  a.sequences.forEach((s, i) => {
    const o = b.sequences[i]!
    assert.deepStrictEqual(s.tokens, o.tokens, `${what}: tokens of row ${i}`)
    assert.strictEqual(s.stopReason, o.stopReason, `${what}: stop reason of row ${i}`)
    const d = maxAbsDiff(s.logprobs, o.logprobs)
    assert.isTrue(d < TOL, `${what}: logprobs of row ${i} differ by ${d}`)
  })
  if (a.promptLogprobs || b.promptLogprobs) {
    const d = maxAbsDiff(a.promptLogprobs ?? [], b.promptLogprobs ?? [])
    assert.isTrue(d < TOL, `${what}: prompt logprobs differ by ${d}`)
  }
}

const OBS = [[62, 30, 31, 60], [62, 40, 60], [62, 33, 34, 35, 60]]
const params = (seed: number): SamplingParams => ({ maxTokens: 5, temperature: 1, seed })

describe("K/V reuse across turns", () => {
  it("three turns with observations: each later turn prefills only its new tokens and samples what a full prefill samples", async () => {
    const { sampler, reference, dispose } = await setup(31)
    const prompt = [1, 20, 21, 22, 23, 24, 25, 26]
    const G = 4
    // turn 1: one request for the group, as the runner sends it
    const first = await sampler.sample(prompt, params(5), { numSamples: G, includePromptLogprobs: true })
    same(first, await reference.sample(prompt, params(5), { numSamples: G, includePromptLogprobs: true }), "turn 1")
    // later turns: one request per episode, all episodes concurrently, prompts of different lengths
    let inputs = first.sequences.map((s) => [...prompt, ...s.tokens, ...OBS[0]!])
    let expectedReuse = first.sequences.map((s) => prompt.length + s.tokens.length - 1)
    for (const turn of [2, 3]) {
      const before = { ...sampler.stats }
      const outs = await Promise.all(inputs.map((p, i) => sampler.sample(p, params(100 * turn + i), { numSamples: 1, includePromptLogprobs: true })))
      const refs = await Promise.all(inputs.map((p, i) => reference.sample(p, params(100 * turn + i), { numSamples: 1, includePromptLogprobs: true })))
      outs.forEach((o, i) => same(o, refs[i]!, `turn ${turn}, episode ${i}`))
      const reused = expectedReuse.reduce((a, b) => a + b, 0)
      assert.strictEqual(sampler.stats.partialHits - before.partialHits, G, `turn ${turn}: every episode continues from its previous turn`)
      assert.strictEqual(sampler.stats.reusedTokens - before.reusedTokens, reused, `turn ${turn}: the previous turn's positions are reused`)
      assert.strictEqual(
        sampler.stats.prefilledTokens - before.prefilledTokens,
        inputs.reduce((a, p) => a + p.length, 0) - reused,
        `turn ${turn}: only the last sampled token and the observation are prefilled`,
      )
      expectedReuse = inputs.map((p, i) => p.length + outs[i]!.sequences[0]!.tokens.length - 1)
      inputs = inputs.map((p, i) => [...p, ...outs[i]!.sequences[0]!.tokens, ...OBS[turn - 1]!])
    }
    assert.strictEqual(reference.stats.partialHits + reference.stats.prefixHits, 0, "the reference never reuses")
    dispose()
  })

  it("a publish between turns: nothing cached under the old adapter is reused; the turn is that of the new weights", async () => {
    const { model, trainer, sampler, dispose } = await setup(32)
    const prompt = [1, 40, 41, 42, 43, 44]
    const t1 = await sampler.sample(prompt, params(1), { numSamples: 1 })
    const p2 = [...prompt, ...t1.sequences[0]!.tokens, ...OBS[0]!]
    const t2 = await sampler.sample(p2, params(2), { numSamples: 1 })
    assert.strictEqual(sampler.stats.partialHits, 1, "turn 2 continues turn 1 at the same version")
    const p3 = [...p2, ...t2.sequences[0]!.tokens, ...OBS[1]!]
    // one training step, then publish, as the runner does between steps
    const ce = resolveLoss("cross_entropy", {})
    if (!ce.ok) throw new Error(ce.message)
    const rng = new Rng(3)
    trainer.run([ceDatum(rng, 4, 8), ceDatum(rng, 5, 6)], ce.value, { backward: true })
    trainer.optimStep({ ...adam, learningRate: 0.1 })
    const adapter = trainer.publish()
    sampler.setAdapter(adapter)
    const stats = { ...sampler.stats }
    const t3 = await sampler.sample(p3, params(3), { numSamples: 2, includePromptLogprobs: true })
    assert.strictEqual(sampler.stats.partialHits, stats.partialHits, "no partial reuse after a publish")
    assert.strictEqual(sampler.stats.prefixHits, stats.prefixHits, "no whole-prompt reuse after a publish")
    assert.strictEqual(sampler.stats.reusedTokens, stats.reusedTokens)
    const fresh = new LocalSamplerEngine(model, { seed: 0, prefixCacheSize: 0 })
    fresh.setAdapter(adapter)
    same(t3, await fresh.sample(p3, params(3), { numSamples: 2, includePromptLogprobs: true }), "turn 3 after the publish")
    // and the old weights would have given other log-probs (so the comparison above can fail)
    const old = new LocalSamplerEngine(model, { seed: 0, prefixCacheSize: 0 })
    const stale = await old.sample(p3, params(3), { numSamples: 2, includePromptLogprobs: true })
    assert.isTrue(maxAbsDiff(stale.promptLogprobs!, t3.promptLogprobs!) > 1e-3, "the step changed the weights")
    fresh.dispose()
    old.dispose()
    dispose()
  })

  it("a prompt that shares only part of a cached sequence reuses the common part (less one position) and is still right", async () => {
    const { sampler, reference, dispose } = await setup(33)
    const prompt = [1, 50, 51, 52, 53, 54, 55]
    const p = { maxTokens: 6, temperature: 1, seed: 11 }
    const t1 = await sampler.sample(prompt, p, { numSamples: 1 })
    const sampled = t1.sequences[0]!.tokens
    assert.isTrue(sampled.length >= 3, `this seed samples ${sampled.length} tokens`)
    const cases: Array<{ name: string; input: Array<number>; reuse: number }> = [
      // diverges inside the sampled tokens: the common prefix is prompt ++ sampled[0..2)
      { name: "diverges after 2 sampled tokens", input: [...prompt, ...sampled.slice(0, 2), (sampled[2]! + 1) % 90 + 5, ...OBS[0]!], reuse: prompt.length + 2 - 1 },
      // diverges inside the prompt
      { name: "diverges at prompt position 4", input: [...prompt.slice(0, 4), 77, 78, 79, 80, 81], reuse: 4 - 1 },
      // a strict prefix of the cached sequence: everything but its last position
      { name: "a strict prefix", input: [...prompt, sampled[0]!], reuse: prompt.length + 1 - 1 },
      // only the first token in common: nothing worth reusing
      { name: "shares one token", input: [1, 90, 91, 92, 93, 94], reuse: 0 },
    ]
    for (const [i, c] of cases.entries()) {
      const before = { ...sampler.stats }
      const out = await sampler.sample(c.input, { ...p, seed: 20 + i }, { numSamples: 3, includePromptLogprobs: true })
      same(out, await reference.sample(c.input, { ...p, seed: 20 + i }, { numSamples: 3, includePromptLogprobs: true }), c.name)
      assert.strictEqual(sampler.stats.reusedTokens - before.reusedTokens, c.reuse, `${c.name}: positions reused`)
      assert.strictEqual(sampler.stats.partialHits - before.partialHits, c.reuse > 0 ? 1 : 0, `${c.name}: partial hit`)
    }
    dispose()
  })

  for (const prefillCallCost of [0, undefined]) {
    it(`requests batched together with different cached lengths (and one with none) each sample what a full prefill samples (prefillCallCost ${prefillCallCost ?? "default"})`, async () => {
      const { sampler, reference, dispose } = await setup(34, prefillCallCost === undefined ? {} : { prefillCallCost })
      const base = [1, 60, 61, 62, 63]
      const prompts = [base, [1, 70, 71, 72], [1, 80, 81, 82, 83, 84, 85]]
      const firsts = await Promise.all(prompts.map((q, i) => sampler.sample(q, { maxTokens: 4, temperature: 1, seed: 40 + i }, { numSamples: 2 })))
      // second turns padded with observation tokens to one length, so that they are batched
      const L = 20
      const inputs: Array<Array<number>> = []
      firsts.forEach((r, i) =>
        r.sequences.forEach((s) => {
          const head = [...prompts[i]!, ...s.tokens]
          inputs.push([...head, ...Array.from({ length: L - head.length }, (_, k) => 30 + k)])
        })
      )
      inputs.push([1, ...Array.from({ length: L - 1 }, (_, k) => 10 + k)]) // nothing cached
      const before = { ...sampler.stats }
      const outs = await Promise.all(inputs.map((q, i) => sampler.sample(q, params(50 + i), { numSamples: 2, includePromptLogprobs: true })))
      assert.strictEqual(sampler.stats.batches - before.batches, 1, "all second turns were decoded as one batch")
      const distinct = new Set(firsts.flatMap((r, i) => r.sequences.map((s) => prompts[i]!.length + s.tokens.length - 1)))
      assert.isTrue(distinct.size >= 3, `cached lengths ${[...distinct]}`)
      const refs = await Promise.all(inputs.map((q, i) => reference.sample(q, params(50 + i), { numSamples: 2, includePromptLogprobs: true })))
      outs.forEach((o, i) => same(o, refs[i]!, `request ${i}`))
      if (prefillCallCost === 0) {
        // one call per distinct cached length: every prompt with a cached prefix reuses all of it
        assert.strictEqual(sampler.stats.partialHits - before.partialHits, inputs.length - 1)
        const cached = firsts.flatMap((r, i) => r.sequences.map((s) => prompts[i]!.length + s.tokens.length - 1))
        assert.strictEqual(sampler.stats.reusedTokens - before.reusedTokens, cached.reduce((a, b) => a + b, 0))
      }
      dispose()
    })
  }

  it("property: random episodes (turn lengths, observations, edits, sampling settings) sample the same with and without reuse", async () => {
    const { sampler, reference, dispose } = await setup(35)
    const token = fc.integer({ min: 4, max: 98 })
    await fc.assert(
      fc.asyncProperty(
        fc.array(token, { minLength: 1, maxLength: 8 }),
        fc.array(fc.record({ obs: fc.array(token, { minLength: 1, maxLength: 4 }), seed: fc.nat(), edit: fc.option(fc.nat(), { freq: 4 }) }), { minLength: 1, maxLength: 3 }),
        fc.constantFrom<Partial<SamplingParams>>({}, { temperature: 0.7 }, { topK: 5 }, { topP: 0.8, temperature: 1.3 }),
        async (promptTail, turns, extra) => {
          let input = [1, ...promptTail]
          for (const [t, turn] of turns.entries()) {
            const sp: SamplingParams = { maxTokens: 4, temperature: 1, ...extra, seed: turn.seed }
            if (input.length + sp.maxTokens >= tinyConfig.contextLength) return
            const out = await sampler.sample(input, sp, { numSamples: 1 + (t === 0 ? 2 : 0), includePromptLogprobs: true })
            same(out, await reference.sample(input, sp, { numSamples: 1 + (t === 0 ? 2 : 0), includePromptLogprobs: true }), `turn ${t + 1}`)
            const next = [...input, ...out.sequences[0]!.tokens, ...turn.obs]
            // sometimes change one token of the history: the next prompt then shares only part of it
            if (turn.edit !== null && next.length > 1) {
              const at = 1 + (turn.edit % (next.length - 1))
              next[at] = 4 + ((next[at]! - 4 + 1) % 95)
            }
            input = next
          }
        },
      ),
      { numRuns: 25, seed: 7 },
    )
    assert.isTrue(sampler.stats.partialHits > 10, `partial hits ${sampler.stats.partialHits}`)
    dispose()
  })

  it("memory is bounded by prefixCacheSize; a publish empties the cache; no tensor outlives a request", async () => {
    await initTf()
    const start = tf.memory().numTensors
    const { sampler, reference, trainer, dispose } = await setup(36, { prefixCacheSize: 3 })
    // the model keeps one causal mask per sequence length: make them all first
    for (let L = 2; L <= tinyConfig.contextLength; L++) reference.computeLogprobs(Array.from({ length: L }, () => 5))
    const held = tf.memory().numTensors
    const { nLayers, contextLength, dModel, vocabSize } = tinyConfig
    const entryBytes = 4 * (2 * nLayers * contextLength * dModel + vocabSize)
    let input = [1, 20, 21, 22]
    let most = 0
    for (let turn = 0; turn < 8; turn++) {
      const out = await sampler.sample(input, { maxTokens: 3, temperature: 1, seed: turn }, { numSamples: 4 })
      const size = sampler.cacheSize()
      most = Math.max(most, size.entries)
      assert.isTrue(size.entries <= 3 && size.bytes <= 3 * entryBytes, `turn ${turn}: ${JSON.stringify(size)}`)
      assert.strictEqual(tf.memory().numTensors, held, `turn ${turn}: tensors left behind`)
      input = [...input, ...out.sequences[0]!.tokens, 40]
      if (input.length > 26) input = [1, 20, 21, 22]
    }
    assert.strictEqual(most, 3, "the cache fills up to its bound")
    assert.isTrue(sampler.stats.partialHits > 0)
    sampler.setAdapter(trainer.publish())
    assert.deepStrictEqual(sampler.cacheSize(), { entries: 0, bytes: 0 }, "a publish empties the cache")
    dispose()
    assert.strictEqual(tf.memory().numTensors, start, "nothing leaks")
  })
})

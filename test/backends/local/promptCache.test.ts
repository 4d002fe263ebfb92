/**
 * What the embedded sampler's prompt cache reuses within one turn and across versions
 * (reuse across the turns of an episode is in prefix.test.ts).
 */
import { assert, describe, it } from "@effect/vitest"
import { resolveLoss } from "../../../src/loss/Loss.ts"
import { Rng } from "../../../src/backends/local/Rng.ts"
import { LocalSamplerEngine } from "../../../src/backends/local/SamplerEngine.ts"
import { adam, ceDatum, makeEngines } from "./helpers.ts"

describe("prompt K/V reuse (what the sampler's prompt cache does and does not do)", () => {
  it("a group's prompt is prefilled once; an identical prompt at the same version is reused; a prompt sharing all but its last token reuses the shared part", async () => {
    const { sampler, trainer, model } = await makeEngines({ seed: 9, randomB: true })
    sampler.setAdapter(trainer.publish())
    const p = [1, 30, 31, 32, 33, 34]
    // one request of 8 samples, and 4 concurrent single-sample requests of one prompt: one prefill each
    await sampler.sample(p, { maxTokens: 3, temperature: 1 }, { numSamples: 8 })
    assert.deepStrictEqual([sampler.stats.prefixMisses, sampler.stats.prefixHits], [1, 0])
    const q = [1, 40, 41, 42, 43, 44]
    await Promise.all([0, 1, 2, 3].map(() => sampler.sample(q, { maxTokens: 3, temperature: 1 }, { numSamples: 1 })))
    assert.deepStrictEqual([sampler.stats.prefixMisses, sampler.stats.prefixHits, sampler.stats.batches], [2, 0, 2])
    // the same prompt again at the same version: from the cache
    await sampler.sample(p, { maxTokens: 3, temperature: 1 }, { numSamples: 2 })
    assert.deepStrictEqual([sampler.stats.prefixMisses, sampler.stats.prefixHits], [2, 1])
    // sharing all but the last token: a miss for the whole-prompt key, a partial hit for the prefix
    await sampler.sample([...p.slice(0, -1), 35], { maxTokens: 3, temperature: 1 }, { numSamples: 2 })
    assert.deepStrictEqual([sampler.stats.prefixMisses, sampler.stats.prefixHits], [3, 1])
    assert.strictEqual(sampler.stats.partialHits, 1)
    sampler.dispose()
    trainer.dispose()
    model.dispose()
  })

  it("a publish invalidates every cached prompt: after it, samples are those of the new weights", async () => {
    const { sampler, trainer, model } = await makeEngines({ seed: 10, randomB: true })
    sampler.setAdapter(trainer.publish())
    const p = [1, 20, 21, 22, 23]
    const params = { maxTokens: 6, temperature: 1, seed: 4 }
    const before = await sampler.sample(p, params, { numSamples: 4, includePromptLogprobs: true })
    // one training step, then publish (as a runner does between steps)
    const ce = resolveLoss("cross_entropy", {})
    if (!ce.ok) throw new Error(ce.message)
    const rng = new Rng(3)
    trainer.run([ceDatum(rng, 4, 8), ceDatum(rng, 5, 6)], ce.value, { backward: true })
    trainer.optimStep({ ...adam, learningRate: 0.1 })
    const adapter = trainer.publish()
    sampler.setAdapter(adapter)
    const hits = sampler.stats.prefixHits
    const after = await sampler.sample(p, params, { numSamples: 4, includePromptLogprobs: true })
    assert.strictEqual(sampler.stats.prefixHits, hits, "nothing cached under the old adapter is reused")
    // a fresh sampler that has only ever seen the new adapter gives the same result
    const fresh = new LocalSamplerEngine(model, { seed: 0 })
    fresh.setAdapter(adapter)
    const expected = await fresh.sample(p, params, { numSamples: 4, includePromptLogprobs: true })
    assert.deepStrictEqual(after, expected)
    assert.notDeepEqual(after.promptLogprobs, before.promptLogprobs, "the step changed the prompt's logprobs")
    fresh.dispose()
    sampler.dispose()
    trainer.dispose()
    model.dispose()
  })
})

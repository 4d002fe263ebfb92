/**
 * Stop sequences and stop reasons of the embedded sampler: what a stop string cuts, and
 * why each sample stopped, checked against the same seed's unstopped sample.
 */
import { assert, describe, it } from "@effect/vitest"
import { afterAll, beforeAll } from "vitest"
import type { SamplingParams } from "../../../src/contract/Contract.ts"
import { decodeChars, EOS } from "../../../src/backends/local/CharTokenizer.ts"
import type { LocalModel } from "../../../src/backends/local/Model.ts"
import type { LocalSamplerEngine } from "../../../src/backends/local/SamplerEngine.ts"
import type { LocalTrainerEngine } from "../../../src/backends/local/TrainerEngine.ts"
import { makeEngines, tinyConfig } from "./helpers.ts"

describe("stop sequences and stop reasons", () => {
  let engines: { sampler: LocalSamplerEngine; trainer: LocalTrainerEngine; model: LocalModel }
  const prompt = [1, 50, 60, 70]
  const maxTokens = 20
  beforeAll(async () => {
    engines = await makeEngines({ seed: 5, randomB: true })
    engines.sampler.setAdapter(engines.trainer.publish())
  })
  afterAll(() => {
    engines.sampler.dispose()
    engines.trainer.dispose()
    engines.model.dispose()
  })
  const one = async (params: Partial<SamplingParams> & { seed: number }) => {
    const r = await engines.sampler.sample(prompt, { maxTokens, temperature: 1, ...params }, { numSamples: 1 })
    return r.sequences[0]!
  }
  const printable = (t: number) => t >= 4 + 1 && t < tinyConfig.vocabSize // a visible character (not space, newline or special)
  /** a seed whose unstopped sample has at least `n` leading printable tokens (one request with one row: a fixed random stream) */
  const seedWith = async (n: number) => {
    for (let seed = 0; seed < 200; seed++) {
      const s = await one({ seed })
      if (s.tokens.length >= n && s.tokens.slice(0, n).every(printable)) return { seed, free: s }
    }
    throw new Error(`no seed gives ${n} printable tokens`)
  }
  /** what stopping at string `stop` must return, derived from the unstopped sample */
  const cutAt = (tokens: ReadonlyArray<number>, stop: string) => {
    for (let e = 0; e < tokens.length; e++) if (decodeChars(tokens.slice(0, e + 1)).includes(stop)) return e + 1
    return undefined
  }

  for (const span of [2, 3]) {
    it(`a stop string spanning ${span} sampled tokens stops the sample; its tokens are returned`, async () => {
      const { seed, free } = await seedWith(6)
      const stop = decodeChars(free.tokens.slice(2, 2 + span))
      assert.strictEqual(stop.length, span)
      const end = cutAt(free.tokens, stop)!
      assert.isTrue(end <= 2 + span)
      const s = await one({ seed, stop: [stop] })
      // the same random stream up to the stop: the first `end` tokens, stop string included
      assert.deepStrictEqual(s.tokens, free.tokens.slice(0, end))
      assert.deepStrictEqual(s.logprobs, free.logprobs.slice(0, end))
      assert.strictEqual(s.stopReason, "stop")
      assert.isTrue(decodeChars(s.tokens).endsWith(stop))
      // a string that never occurs leaves the sample as it was
      const never = await one({ seed, stop: ["\n\n\n"] })
      assert.deepStrictEqual(never, free)
    })
  }

  it("the first of several stop strings to complete wins; a stop token id stops too", async () => {
    const { seed, free } = await seedWith(6)
    const late = decodeChars(free.tokens.slice(3, 6))
    const early = decodeChars(free.tokens.slice(1, 3))
    const s = await one({ seed, stop: [late, early] })
    assert.deepStrictEqual(s.tokens, free.tokens.slice(0, Math.min(cutAt(free.tokens, early)!, cutAt(free.tokens, late)!)))
    assert.strictEqual(s.stopReason, "stop")
    const id = free.tokens[4]!
    const t = await one({ seed, stop: [id] })
    assert.deepStrictEqual(t.tokens, free.tokens.slice(0, free.tokens.indexOf(id) + 1))
    assert.strictEqual(t.stopReason, "stop")
  })

  it("a stop string completed by the last allowed token is a 'stop', not a 'length'", async () => {
    const { seed, free } = await seedWith(6)
    const stop = decodeChars(free.tokens.slice(3, 5))
    const end = cutAt(free.tokens, stop)!
    const s = await one({ seed, stop: [stop], maxTokens: end })
    assert.strictEqual(s.tokens.length, end)
    assert.strictEqual(s.stopReason, "stop")
    const cut = await one({ seed, stop: [stop], maxTokens: end - 1 })
    assert.deepStrictEqual(cut.tokens, free.tokens.slice(0, end - 1))
    assert.strictEqual(cut.stopReason, "length")
  })

  it("EOS ends a row with 'stop' (EOS included); maxTokens ends it with 'length'; rows of one request stop independently", async () => {
    const r = await engines.sampler.sample(prompt, { maxTokens: 12, temperature: 1.5, seed: 1 }, { numSamples: 400 })
    let eos = 0
    let length = 0
    for (const s of r.sequences) {
      assert.strictEqual(s.logprobs.length, s.tokens.length)
      assert.isFalse(s.tokens.slice(0, -1).includes(EOS), "nothing is sampled after EOS")
      if (s.tokens[s.tokens.length - 1] === EOS) {
        assert.strictEqual(s.stopReason, "stop")
        eos++
      } else {
        assert.strictEqual(s.tokens.length, 12)
        assert.strictEqual(s.stopReason, "length")
        length++
      }
    }
    assert.isTrue(eos > 0 && length > 0, `${eos} rows ended with EOS, ${length} at maxTokens`)
  })

  it("stop strings in a batch of many rows: each row stops at its first occurrence", async () => {
    const stops = ["ab", "x", "Q!"]
    const r = await engines.sampler.sample(prompt, { maxTokens: 16, temperature: 1.5, seed: 2, stop: stops }, { numSamples: 300 })
    let stopped = 0
    for (const s of r.sequences) {
      const before = decodeChars(s.tokens.slice(0, -1))
      assert.isFalse(stops.some((x) => before.includes(x)), `a stop string occurs before the end of ${JSON.stringify(decodeChars(s.tokens))}`)
      const text = decodeChars(s.tokens)
      const byString = stops.some((x) => text.endsWith(x))
      if (byString) stopped++
      assert.strictEqual(s.stopReason, byString || s.tokens[s.tokens.length - 1] === EOS ? "stop" : "length")
      if (s.stopReason === "length") assert.strictEqual(s.tokens.length, 16)
    }
    assert.isTrue(stopped > 0, "some rows stopped at a stop string")
  })

  it("maxTokens beyond the context ends at the context with 'length'", async () => {
    const long = [1, ...Array.from({ length: tinyConfig.contextLength - 4 }, (_, i) => 10 + i)]
    const r = await engines.sampler.sample(long, { maxTokens: 10, temperature: 1, seed: 3 }, { numSamples: 8 })
    let checked = 0
    for (const s of r.sequences) {
      if (s.tokens.includes(EOS)) continue // a row can end with EOS before the context does
      assert.strictEqual(s.tokens.length, tinyConfig.contextLength - long.length)
      assert.strictEqual(s.stopReason, "length")
      checked++
    }
    assert.isTrue(checked > 0)
  })
})

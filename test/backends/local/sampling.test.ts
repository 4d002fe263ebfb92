/**
 * Statistical tests of the embedded sampler's temperature, top-k and top-p; tests of stop
 * sequences and stop reasons; and of what its prompt cache reuses.
 *
 * The distribution a request samples one next token from is, by definition:
 *
 *   q = softmax(logits / T)                               (temperature)
 *   K = the topK most probable tokens under q             (top-k; 0 = no limit; ties: lower id first)
 *   N = the smallest set of most probable tokens under q
 *       whose mass under q reaches topP                   (top-p: the token that crosses topP is in)
 *   sample from q restricted to K ∩ N, renormalised
 *
 * Top-k and top-p are both measured on q itself (top-p is not recomputed on the top-k
 * renormalised distribution), so the kept set is the intersection of the two filters.
 *
 * Each test draws many tokens with a fixed seed and compares the counts with that
 * distribution: a token outside K ∩ N must never be drawn, and Pearson's chi-square over
 * the kept tokens must stay below its 1 - 1e-6 quantile. A correct sampler passes with
 * overwhelming probability; a sampler that ignores the temperature, keeps one token too
 * many or too few in top-k, or misplaces the top-p boundary token fails by a wide margin.
 *
 * Log-probs: the per-token logprob returned with each sampled token is log q'(token),
 * where q' is the tempered, truncated, renormalised distribution above (the distribution
 * actually sampled from), NOT the model's raw log-softmax. The two agree only at
 * temperature 1 without truncation. The trainer computes logprobs at temperature 1 with no
 * truncation, which is why the runner warns when a ratio-based loss samples otherwise.
 */
import { assert, describe, it } from "@effect/vitest"
import { afterAll, beforeAll } from "vitest"
import type { SamplingParams } from "../../../src/Contract.ts"
import { resolveLoss } from "../../../src/Loss.ts"
import { decodeChars, EOS } from "../../../src/backends/local/CharTokenizer.ts"
import type { LocalModel } from "../../../src/backends/local/Model.ts"
import { Rng } from "../../../src/backends/local/Rng.ts"
import { LocalSamplerEngine, sampleRow } from "../../../src/backends/local/SamplerEngine.ts"
import type { LocalTrainerEngine } from "../../../src/backends/local/TrainerEngine.ts"
import { adam, ceDatum, makeEngines, tinyConfig } from "./helpers.ts"

type Truncation = { readonly temperature: number; readonly topK?: number; readonly topP?: number }

/** the distribution defined in the header, from logits (or log-probs: a constant shift changes nothing) */
const implied = (logits: ArrayLike<number>, { temperature: T, topK = 0, topP = 1 }: Truncation): Float64Array => {
  const V = logits.length
  const z = Array.from({ length: V }, (_, v) => logits[v]! / T)
  const m = Math.max(...z)
  const e = z.map((x) => Math.exp(x - m))
  const total = e.reduce((a, b) => a + b, 0)
  const q = e.map((x) => x / total)
  const order = Array.from({ length: V }, (_, v) => v).sort((a, b) => q[b]! - q[a]! || a - b)
  const topKSet = new Set(topK > 0 ? order.slice(0, topK) : order)
  const nucleus = new Set<number>()
  let mass = 0
  for (const v of order) {
    nucleus.add(v)
    mass += q[v]!
    if (mass >= topP) break
  }
  const out = new Float64Array(V)
  let kept = 0
  for (let v = 0; v < V; v++) if (topKSet.has(v) && nucleus.has(v)) kept += q[v]!
  for (let v = 0; v < V; v++) if (topKSet.has(v) && nucleus.has(v)) out[v] = q[v]! / kept
  return out
}

/** upper quantile of chi-square with df degrees of freedom (Wilson-Hilferty), at a standard-normal z */
const chiSquareQuantile = (df: number, z: number) => df * (1 - 2 / (9 * df) + z * Math.sqrt(2 / (9 * df))) ** 3
/** z of the 1 - 1e-6 quantile of the standard normal */
const Z_1E6 = 4.753

/**
 * Fails unless the counts could come from `probs`: no draw of a zero-probability token,
 * and Pearson's chi-square (bins with fewer than 5 expected draws pooled) below its
 * 1 - 1e-6 quantile.
 */
const assertDrawnFrom = (counts: ArrayLike<number>, probs: ArrayLike<number>, what: string) => {
  let n = 0
  for (let v = 0; v < counts.length; v++) n += counts[v]!
  for (let v = 0; v < counts.length; v++) {
    if (probs[v] === 0) assert.strictEqual(counts[v], 0, `${what}: token ${v} is outside the kept set but was drawn ${counts[v]} times`)
  }
  const bins: Array<{ o: number; e: number }> = []
  let pool = { o: 0, e: 0 }
  for (let v = 0; v < counts.length; v++) {
    if (probs[v] === 0) continue
    const e = n * probs[v]!
    if (e < 5) pool = { o: pool.o + counts[v]!, e: pool.e + e }
    else bins.push({ o: counts[v]!, e })
  }
  if (pool.e > 0) {
    if (pool.e >= 5 || bins.length === 0) bins.push(pool)
    else {
      // too small a pool: merge it into the smallest bin
      const i = bins.reduce((best, b, k) => (b.e < bins[best]!.e ? k : best), 0)
      bins[i] = { o: bins[i]!.o + pool.o, e: bins[i]!.e + pool.e }
    }
  }
  const stat = bins.reduce((s, b) => s + (b.o - b.e) ** 2 / b.e, 0)
  const df = bins.length - 1
  if (df === 0) return // one kept token: the zero-probability check above is the whole test
  const bound = chiSquareQuantile(df, Z_1E6)
  assert.isTrue(stat < bound, `${what}: chi-square ${stat.toFixed(1)} over ${df} degrees of freedom exceeds ${bound.toFixed(1)}`)
}

const countTokens = (tokens: ReadonlyArray<number>, V: number) => {
  const counts = new Float64Array(V)
  for (const t of tokens) counts[t]!++
  return counts
}

const DRAWS = 20_000

describe("sampleRow on designed logits", () => {
  // probabilities 0.4, 0.3, 0.2, 0.07, 0.03 (token 0..4) with the ids shuffled, so that
  // sorting matters; the boundaries of top-k and top-p below are chosen well away from ties
  const probs = [0.2, 0.03, 0.4, 0.07, 0.3]
  const logits = Float32Array.from(probs.map(Math.log))
  const draw = (params: Truncation, seed: number) => {
    const rng = new Rng(seed)
    const full: SamplingParams = { maxTokens: 1, ...params }
    const tokens: Array<number> = []
    const logprobs: Array<number> = []
    for (let i = 0; i < DRAWS; i++) {
      const { token, logprob } = sampleRow(logits, 0, logits.length, full, rng)
      tokens.push(token)
      logprobs.push(logprob)
    }
    return { tokens, logprobs }
  }
  const cases: Array<[string, Truncation]> = [
    ["plain softmax", { temperature: 1 }],
    ["temperature 0.5 (sharper)", { temperature: 0.5 }],
    ["temperature 2 (flatter)", { temperature: 2 }],
    ["top-k 1", { temperature: 1, topK: 1 }],
    ["top-k 2", { temperature: 1, topK: 2 }],
    ["top-k 3 at temperature 0.7", { temperature: 0.7, topK: 3 }],
    // mass before each token in order: 0, 0.4, 0.7, 0.9, 0.97
    ["top-p 0.35: the most probable token only", { temperature: 1, topP: 0.35 }],
    ["top-p 0.5: the token that crosses 0.5 is kept", { temperature: 1, topP: 0.5 }],
    ["top-p 0.69: two tokens", { temperature: 1, topP: 0.69 }],
    ["top-p 0.71: the third token crosses", { temperature: 1, topP: 0.71 }],
    ["top-p 0.95 at temperature 1.5", { temperature: 1.5, topP: 0.95 }],
    ["top-k 2 with top-p 0.8: top-k is the tighter one", { temperature: 1, topK: 2, topP: 0.8 }],
    ["top-k 4 with top-p 0.6: top-p is the tighter one", { temperature: 1, topK: 4, topP: 0.6 }],
  ]
  cases.forEach(([name, params], i) => {
    it(`${name}: draws follow the implied distribution; logprobs are of that distribution`, () => {
      const expected = implied(logits, params)
      const { tokens, logprobs } = draw(params, 100 + i)
      assertDrawnFrom(countTokens(tokens, logits.length), expected, name)
      const worst = tokens.reduce((w, t, k) => Math.max(w, Math.abs(logprobs[k]! - Math.log(expected[t]!))), 0)
      assert.isTrue(worst < 1e-6, `logprob off by ${worst}`)
    })
  })

  it("the implied distributions differ where they should (so the tests above can tell them apart)", () => {
    // a sampler that ignored the temperature, or kept one token more or fewer, would be
    // measured against one of these neighbours and fail on the zero-probability check or
    // the chi-square bound
    const { tokens } = draw({ temperature: 0.5 }, 1)
    assert.throws(() => assertDrawnFrom(countTokens(tokens, 5), implied(logits, { temperature: 1 }), "T=0.5 vs T=1"))
    const k2 = draw({ temperature: 1, topK: 2 }, 2).tokens
    assert.throws(() => assertDrawnFrom(countTokens(k2, 5), implied(logits, { temperature: 1, topK: 3 }), "k=2 vs k=3"))
    assert.throws(() => assertDrawnFrom(countTokens(k2, 5), implied(logits, { temperature: 1, topK: 1 }), "k=2 vs k=1"))
    const p71 = draw({ temperature: 1, topP: 0.71 }, 3).tokens
    assert.throws(() => assertDrawnFrom(countTokens(p71, 5), implied(logits, { temperature: 1, topP: 0.69 }), "p=0.71 vs p=0.69"))
  })

  it("temperature 0 is greedy and reports logprob 0", () => {
    const { tokens, logprobs } = draw({ temperature: 0 }, 4)
    assert.isTrue(tokens.every((t) => t === 2))
    assert.isTrue(logprobs.every((lp) => lp === 0))
  })
})

describe("the engine's first token, on the tiny model's own logits", () => {
  let engines: { sampler: LocalSamplerEngine; trainer: LocalTrainerEngine; model: LocalModel }
  const prompt = [1, 40, 41, 42, 43]
  /** log p(v | prompt) at temperature 1 for every v: the trainer's log-softmax, through computeLogprobs */
  let lsm: Array<number>
  beforeAll(async () => {
    engines = await makeEngines({ seed: 3, randomB: true })
    engines.sampler.setAdapter(engines.trainer.publish())
    lsm = Array.from({ length: tinyConfig.vocabSize }, (_, v) => engines.sampler.computeLogprobs([...prompt, v])[prompt.length]!)
  })
  afterAll(() => {
    engines.sampler.dispose()
    engines.trainer.dispose()
    engines.model.dispose()
  })

  const cases: Array<[string, Truncation]> = [
    ["temperature 1", { temperature: 1 }],
    ["temperature 0.5", { temperature: 0.5 }],
    ["temperature 1.7", { temperature: 1.7 }],
    ["top-k 5", { temperature: 1, topK: 5 }],
    ["top-k 12 at temperature 0.8", { temperature: 0.8, topK: 12 }],
    ["top-p 0.3", { temperature: 1, topP: 0.3 }],
    ["top-p 0.8 at temperature 1.3", { temperature: 1.3, topP: 0.8 }],
    ["top-k 20 with top-p 0.5", { temperature: 0.9, topK: 20, topP: 0.5 }],
  ]
  cases.forEach(([name, params], i) => {
    it(`${name}: ${DRAWS} first tokens follow the implied distribution`, async () => {
      const expected = implied(lsm, params)
      const kept = expected.filter((p) => p > 0).length
      const r = await engines.sampler.sample(prompt, { maxTokens: 1, seed: 10 + i, ...params }, { numSamples: DRAWS })
      const tokens = r.sequences.map((s) => s.tokens[0]!)
      assertDrawnFrom(countTokens(tokens, tinyConfig.vocabSize), expected, name)
      if (params.topK !== undefined || params.topP !== undefined) assert.isTrue(kept > 1 && kept < tinyConfig.vocabSize, `${name} keeps ${kept} tokens`)
      // the returned logprob is that of the distribution sampled from (tempered, truncated,
      // renormalised), not the model's log-softmax
      const worst = r.sequences.reduce((w, s) => Math.max(w, Math.abs(s.logprobs[0]! - Math.log(expected[s.tokens[0]!]!))), 0)
      assert.isTrue(worst < 1e-4, `logprob off by ${worst}`)
      const plain = params.temperature === 1 && params.topK === undefined && params.topP === undefined
      const differs = r.sequences.some((s) => Math.abs(s.logprobs[0]! - lsm[s.tokens[0]!]!) > 1e-3)
      assert.strictEqual(differs, !plain, plain ? "at T=1 without truncation the logprob is the model's" : "the logprob is not the model's T=1 one")
    })
  })

  it("temperature 0 picks the argmax and reports logprob 0", async () => {
    const r = await engines.sampler.sample(prompt, { maxTokens: 1, temperature: 0 }, { numSamples: 3 })
    const argmax = lsm.indexOf(Math.max(...lsm))
    for (const s of r.sequences) {
      assert.deepStrictEqual(s.tokens, [argmax])
      assert.deepStrictEqual(s.logprobs, [0])
    }
  })
})

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

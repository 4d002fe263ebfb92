/**
 * Statistical tests of the embedded sampler's temperature, top-k and top-p (its stop
 * sequences and stop reasons are in stopReasons.test.ts, its prompt cache in
 * promptCache.test.ts).
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
import type { SamplingParams } from "../../../src/contract/Contract.ts"
import type { LocalModel } from "../../../src/backends/local/Model.ts"
import { Rng } from "../../../src/backends/local/Rng.ts"
import { LocalSamplerEngine, sampleRow } from "../../../src/backends/local/SamplerEngine.ts"
import type { LocalTrainerEngine } from "../../../src/backends/local/TrainerEngine.ts"
import { makeEngines, tinyConfig } from "./helpers.ts"

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

/**
 * pass@k and maj@k: the unbiased estimator against its binomial definition, its laws
 * (pass@1 is the success rate, monotone in k and c, pass@n is 1 with a correct sample),
 * maj@1 equal to pass@1, majority vote with ties, the seeded bootstrap interval and the
 * list of ks.
 */
import { assert, describe, it } from "@effect/vitest"
import { Result } from "effect"
import * as fc from "fast-check"
import { bootstrapMean, defaultKs, estimates, majAtK, normalizeAnswer, parseKs, passAtK, type Sample } from "../src/metrics/PassAtK.ts"

/** n ≥ 1 samples with c correct. */
const nc = fc.integer({ min: 1, max: 60 }).chain((n) => fc.tuple(fc.constant(n), fc.integer({ min: 0, max: n })))

/** One problem's samples: answers from a few values, correctness per sample. */
const problem = fc.array(fc.record({ correct: fc.boolean(), answer: fc.constantFrom("1", "2", "3", "4") }), { minLength: 1, maxLength: 24 })

const binomial = (n: number, k: number): bigint => {
  if (k < 0 || k > n) return 0n
  let r = 1n
  for (let i = 0; i < k; i++) r = (r * BigInt(n - i)) / BigInt(i + 1)
  return r
}

describe("passAtK", () => {
  it("equals 1 - C(n-c, k)/C(n, k)", () =>
    fc.assert(fc.property(nc.chain(([n, c]) => fc.tuple(fc.constant(n), fc.constant(c), fc.integer({ min: 1, max: n }))), ([n, c, k]) => {
      const exact = 1 - Number((binomial(n - c, k) * 1_000_000_000_000n) / binomial(n, k)) / 1e12
      assert.closeTo(passAtK(n, c, k), exact, 1e-9)
    })))

  it("pass@1 is the success rate c/n", () => fc.assert(fc.property(nc, ([n, c]) => assert.closeTo(passAtK(n, c, 1), c / n, 1e-12))))

  it("is monotone in k and in c, and stays in [0, 1]", () =>
    fc.assert(fc.property(nc, ([n, c]) => {
      for (let k = 1; k <= n; k++) {
        const p = passAtK(n, c, k)
        assert.isAtLeast(p, 0)
        assert.isAtMost(p, 1)
        if (k < n) assert.isAtMost(p, passAtK(n, c, k + 1) + 1e-12)
        if (c < n) assert.isAtMost(p, passAtK(n, c + 1, k) + 1e-12)
      }
    })))

  it("pass@n is 1 with a correct sample, and pass@k is 0 without one", () =>
    fc.assert(fc.property(nc, ([n, c]) => {
      assert.strictEqual(passAtK(n, c, n), c >= 1 ? 1 : 0)
      for (let k = 1; k <= n; k++) if (c === 0) assert.strictEqual(passAtK(n, 0, k), 0)
    })))

  it("stays finite and exact for large n", () => {
    assert.closeTo(passAtK(10_000, 1, 1), 1e-4, 1e-15)
    assert.closeTo(passAtK(10_000, 1, 100), 0.01, 1e-12)
    assert.strictEqual(passAtK(10_000, 9_950, 100), 1)
  })

  it("refuses k outside 1..n", () => {
    assert.throws(() => passAtK(4, 1, 5), RangeError)
    assert.throws(() => passAtK(4, 1, 0), RangeError)
  })
})

describe("majAtK", () => {
  const s = (answer: string, correct: boolean): Sample => ({ answer, correct })

  it("maj@1 equals pass@1 on every problem", () =>
    fc.assert(fc.property(problem, (p) => assert.closeTo(majAtK(p, 1), passAtK(p.length, p.filter((x) => x.correct).length, 1), 1e-12))))

  it("counts the most common answer, a tie as the mean of the tied answers", () => {
    assert.strictEqual(majAtK([s("5", true), s("7", false), s("5", true)], 3), 1)
    assert.strictEqual(majAtK([s("7", false), s("5", true), s("7", false)], 3), 0)
    assert.strictEqual(majAtK([s("5", true), s("7", false)], 2), 0.5)
    // two runs of 2: [5 5] right, [7 5] a tie
    assert.strictEqual(majAtK([s("5", true), s("5", true), s("7", false), s("5", true)], 2), 0.75)
    // samples past the last full run are not used
    assert.strictEqual(majAtK([s("5", true), s("5", true), s("7", false)], 2), 1)
  })

  it("stays in [0, 1] and is 1 when every sample is correct", () =>
    fc.assert(fc.property(problem, fc.integer({ min: 1, max: 24 }), (p, k0) => {
      const k = Math.min(k0, p.length)
      const m = majAtK(p, k)
      assert.isAtLeast(m, 0)
      assert.isAtMost(m, 1)
      assert.strictEqual(majAtK(p.map((x) => ({ ...x, correct: true })), k), 1)
    })))

  it("groups answers by their normalized text", () => {
    assert.strictEqual(normalizeAnswer(" 56\n"), "56")
    assert.strictEqual(normalizeAnswer("The  Answer\tIS 7 "), "the answer is 7")
  })
})

describe("estimates", () => {
  it("pass@1 and maj@1 are the mean success rate over problems, with the interval around it", () =>
    fc.assert(fc.property(fc.array(problem, { minLength: 1, maxLength: 12 }), (problems) => {
      const [pass1, maj1] = estimates(problems, [1])
      const rate = problems.reduce((a, p) => a + p.filter((x) => x.correct).length / p.length, 0) / problems.length
      assert.strictEqual(pass1!.name, "pass@1")
      assert.strictEqual(maj1!.name, "maj@1")
      assert.closeTo(pass1!.mean, rate, 1e-12)
      assert.closeTo(maj1!.mean, rate, 1e-12)
      assert.isAtMost(pass1!.low, pass1!.mean)
      assert.isAtLeast(pass1!.high, pass1!.mean)
      assert.strictEqual(pass1!.problems, problems.length)
    }), { numRuns: 50 }))

  it("leaves out of a k's mean the problems with fewer than k scored samples", () => {
    const one = [{ correct: true, answer: "1" }]
    const four = Array.from({ length: 4 }, (_, i) => ({ correct: i === 0, answer: String(i) }))
    const byName = Object.fromEntries(estimates([one, four], [1, 4]).map((e) => [e.name, e]))
    assert.strictEqual(byName["pass@1"]!.problems, 2)
    assert.closeTo(byName["pass@1"]!.mean, (1 + 0.25) / 2, 1e-12)
    assert.strictEqual(byName["pass@4"]!.problems, 1)
    assert.strictEqual(byName["pass@4"]!.mean, 1)
    assert.strictEqual(byName["maj@4"]!.mean, 0.25)
  })

  it("the bootstrap interval is seeded, inside the values' range, and a point for equal values", () => {
    const values = Array.from({ length: 50 }, (_, i) => (i % 3 === 0 ? 1 : 0))
    const a = bootstrapMean(values, { seed: 7 })
    assert.deepStrictEqual(bootstrapMean(values, { seed: 7 }), a)
    assert.isAtLeast(a.low, 0)
    assert.isBelow(a.low, a.mean)
    assert.isAbove(a.high, a.mean)
    assert.isAtMost(a.high, 1)
    // a binomial proportion of 17/50: the interval is about ±1.96·√(p(1-p)/n) = ±0.13
    assert.closeTo(a.high - a.low, 2 * 1.96 * Math.sqrt((0.34 * 0.66) / 50), 0.04)
    assert.deepStrictEqual(bootstrapMean([0.5, 0.5, 0.5]), { mean: 0.5, low: 0.5, high: 0.5 })
    assert.isNaN(bootstrapMean([]).mean)
  })
})

describe("ks", () => {
  it("defaults to 1 and the number of samples", () => {
    assert.deepStrictEqual(defaultKs(1), [1])
    assert.deepStrictEqual(defaultKs(8), [1, 8])
  })

  it("reads a list, sorted and without repeats, and refuses a k past --samples", () => {
    assert.deepStrictEqual(parseKs("16, 1,4,4", 16), Result.succeed([1, 4, 16]))
    const tooLarge = parseKs("1,32", 16)
    assert.isTrue(Result.isFailure(tooLarge) && tooLarge.failure.includes("\"32\""))
    assert.isTrue(Result.isFailure(parseKs("", 4)))
    assert.isTrue(Result.isFailure(parseKs("1.5", 4)))
  })
})

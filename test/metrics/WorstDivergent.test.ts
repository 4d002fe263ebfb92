/**
 * `Metrics.worstDivergent` picks the k largest gaps in one pass; it must agree with sorting
 * every index (largest gap first, NaN as the largest, ties by index), and `klSampleTrain`'s
 * quantiles with a plain sort.
 */
import { describe, expect, it } from "@effect/vitest"
import fc from "fast-check"
import * as Metrics from "../../src/metrics/Metrics.ts"

const bySort = (pairs: Metrics.LogprobPairs, k: number) => {
  const gap = (i: number) => {
    const d = Math.abs(pairs.sampler[i]! - pairs.trainer[i]!)
    return Number.isNaN(d) ? Infinity : d
  }
  return Array.from({ length: pairs.sampler.length }, (_, i) => i)
    .sort((a, b) => gap(b) - gap(a) || a - b)
    .slice(0, Math.max(0, k))
}

// few distinct values, so ties are common; NaN and infinities too
const logprob = fc.oneof(fc.constantFrom(0, -0.5, -1, -2, Number.NaN, -Infinity), fc.double({ min: -5, max: 0, noNaN: true }))
const pairs = fc.integer({ min: 0, max: 200 }).chain((n) =>
  fc.record({ sampler: fc.array(logprob, { minLength: n, maxLength: n }), trainer: fc.array(logprob, { minLength: n, maxLength: n }) }),
)

describe("Metrics.worstDivergent", () => {
  it("agrees with sorting every index by gap", () => {
    fc.assert(fc.property(pairs, fc.integer({ min: -1, max: 100 }), (p, k) => {
      expect(Metrics.worstDivergent(p, k)).toEqual(bySort(p, k))
    }), { numRuns: 500 })
  })
})

describe("Metrics.klSampleTrain", () => {
  it("takes its ratio quantiles from the sorted ratios", () => {
    const finite = fc.double({ min: -5, max: 0, noNaN: true })
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 300 }).chain((n) => fc.tuple(fc.array(finite, { minLength: n, maxLength: n }), fc.array(finite, { minLength: n, maxLength: n }))), ([s, t]) => {
        const ws = s.map((v, i) => Math.exp(Math.max(-50, Math.min(50, -(v - t[i]!))))).sort((a, b) => a - b)
        const m = Metrics.klSampleTrain({ sampler: s, trainer: t })
        expect(m["optim/is_ratio/max"]).toBe(ws[ws.length - 1])
        expect(m["optim/is_ratio/p99"]).toBe(ws[Math.min(ws.length - 1, Math.max(0, Math.ceil(0.99 * ws.length) - 1))])
      }),
      { numRuns: 200 },
    )
  })
})

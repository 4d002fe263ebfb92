/**
 * The report's line chart: it takes its column's width, labels its x axis at round steps
 * (not only at its ends), and draws a series measured every N steps (held-out) as dots
 * joined by a dashed line, a per-step series as a solid one.
 */
import { assert, describe, it } from "@effect/vitest"
import fc from "fast-check"
import { chart, niceTicks } from "../src/app/ReportHtml.ts"

const rows = Array.from({ length: 201 }, (_, step) => ({
  step,
  "env/all/correct": step / 200,
  ...(step % 50 === 0 ? { "test/env/all/correct": step / 400 } : {}),
}))

/** The x-axis labels of a chart: the texts centred under its vertical grid lines. */
const xLabels = (svg: string) => [...svg.matchAll(/stroke="#f3f4f6"\/><text [^>]*text-anchor="middle">([^<]+)<\/text>/g)].map((m) => Number(m[1]))

describe("the report's chart", () => {
  const svg = chart("correct", rows, ["env/all/correct", "test/env/all/correct"], { span: [0, 1] })

  it("is as wide as its column", () => {
    assert.include(svg, `width="100%"`)
    assert.notMatch(svg, /<svg [^>]*height="\d/)
  })

  it("labels its x axis at round steps", () => {
    assert.deepStrictEqual(xLabels(svg), [0, 50, 100, 150, 200])
  })

  it("draws the held-out series dashed, with a dot per evaluation, and the per-step series solid", () => {
    const paths = [...svg.matchAll(/<path [^>]*\/>/g)].map((m) => m[0])
    assert.strictEqual(paths.length, 2)
    assert.notInclude(paths[0]!, "stroke-dasharray")
    assert.include(paths[1]!, `stroke-dasharray="4 3"`)
    assert.strictEqual((svg.match(/<circle /g) ?? []).length, 5, "no dots on a 201-point series, one per evaluation on the other")
  })

  it("labels a run of one step with whole steps", () => {
    assert.deepStrictEqual(niceTicks(0, 1, 5, 1), [0, 1])
  })

  it("ticks are round, inside the range, and about as many as asked", () =>
    fc.assert(fc.property(fc.integer({ min: 0, max: 10_000 }), fc.integer({ min: 1, max: 100_000 }), (lo, span) => {
      const ticks = niceTicks(lo, lo + span)
      assert.isAtLeast(ticks.length, 2)
      assert.isAtMost(ticks.length, 11)
      for (const t of ticks) assert.isTrue(t >= lo && t <= lo + span, `${t} outside [${lo}, ${lo + span}]`)
      const gap = Number((ticks[1]! - ticks[0]!).toPrecision(6))
      assert.isTrue(/^[125]0*$/.test(String(gap)) || /^0\.0*[125]$/.test(String(gap)), `gap ${gap}`)
    })))
})

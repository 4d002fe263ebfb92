/**
 * The masked-step rule's laws under the default patience, on simulated time: a tool server
 * down for up to 5 s never stops a run of steps up to 20 s long; one down for good stops a
 * run of steps up to 10 s long within a minute of going down (if the run lasts that long).
 * And its end-of-run verdict.
 */
import { assert, describe, it } from "@effect/vitest"
import * as fc from "fast-check"
import * as MaskedWatch from "../../src/run/MaskedWatch.ts"

/**
 * Steps of the given lengths (seconds), the server down over [from, to): a step that runs
 * at any time inside that window masks all its samples. Returns when the run stopped, if it did.
 */
const simulate = (lengths: ReadonlyArray<number>, from: number, to: number): { readonly stoppedAt: number | undefined; readonly end: number; readonly watch: MaskedWatch.Watch } => {
  let watch = MaskedWatch.empty
  let t = 0
  for (const length of lengths) {
    const start = t
    t += length
    const down = start < to && t > from
    const decided = MaskedWatch.next(watch, { masked: down ? ["infra_failed: server down", "infra_failed: server down"] : [], samples: 2, bound: 0.5, now: t * 1000 }, MaskedWatch.DEFAULT_PATIENCE)
    watch = decided.watch
    if (decided.decision._tag === "Stop") return { stoppedAt: t, end: t, watch }
    if (decided.decision._tag === "Wait") t += decided.decision.millis / 1000
  }
  return { stoppedAt: undefined, end: t, watch }
}

describe("the masked-step rule (default patience)", () => {
  it("waits 1 s after the first masked step, doubling up to 8 s", () => {
    assert.deepStrictEqual([1, 2, 3, 4, 5, 6, 7].map((n) => MaskedWatch.waitAfter(MaskedWatch.DEFAULT_PATIENCE, n)), [1000, 2000, 4000, 8000, 8000, 8000, 8000])
  })

  it("a server down for good stops a run of instant steps after about 31 s", () => {
    assert.strictEqual(simulate(Array.from({ length: 100 }, () => 0), -1, Infinity).stoppedAt, 31)
  })

  it("3 masked steps in a row, 0.3 s apart, do not stop a run (they did before the rule lasted in time)", () => {
    const first = MaskedWatch.next(MaskedWatch.empty, { masked: ["x", "x"], samples: 2, bound: 0.5, now: 0 }, MaskedWatch.DEFAULT_PATIENCE)
    const second = MaskedWatch.next(first.watch, { masked: ["x", "x"], samples: 2, bound: 0.5, now: 100 }, MaskedWatch.DEFAULT_PATIENCE)
    const third = MaskedWatch.next(second.watch, { masked: ["x", "x"], samples: 2, bound: 0.5, now: 300 }, MaskedWatch.DEFAULT_PATIENCE)
    assert.deepStrictEqual(third.decision, { _tag: "Wait", millis: 4000 })
  })

  it("a server down for up to 5 s never stops a run of steps up to 20 s", () =>
    fc.assert(fc.property(
      fc.array(fc.double({ min: 0, max: 20, noNaN: true }), { minLength: 1, maxLength: 60 }),
      fc.double({ min: 0, max: 300, noNaN: true }),
      fc.double({ min: 0, max: 5, noNaN: true }),
      (lengths, from, outage) => simulate(lengths, from, from + outage).stoppedAt === undefined,
    )))

  it("a server down for good stops a run of steps up to 10 s within a minute", () =>
    fc.assert(fc.property(
      fc.array(fc.double({ min: 0, max: 10, noNaN: true }), { minLength: 200, maxLength: 200 }),
      fc.double({ min: 0, max: 100, noNaN: true }),
      (lengths, from) => {
        const { stoppedAt, end } = simulate(lengths, from, Infinity)
        // a run whose steps all end before the minute is up (short steps, a late outage) need not stop
        return stoppedAt !== undefined ? stoppedAt - from <= 60 : end <= from + 60
      },
    )))

  it("--max-masked 1 never waits nor stops", () => {
    const decided = MaskedWatch.next(MaskedWatch.empty, { masked: ["x", "x"], samples: 2, bound: 1, now: 0 }, MaskedWatch.DEFAULT_PATIENCE)
    assert.deepStrictEqual(decided.decision, { _tag: "Go" })
    assert.isUndefined(MaskedWatch.verdict(decided.watch, 1, "runs/x"))
  })
})

describe("the run's end", () => {
  const after = (over: number, fine: number) => simulate([...Array.from({ length: fine }, () => 1), ...Array.from({ length: over }, () => 1)], fine, Infinity).watch

  it("says nothing when no step was over --max-masked", () => {
    assert.isUndefined(MaskedWatch.verdict(after(0, 5), 0.5, "runs/x"))
  })

  it("warns when some were, naming how many and why", () => {
    const v = MaskedWatch.verdict(after(2, 3), 0.5, "runs/x")
    assert.strictEqual(v?._tag, "Warn")
    assert.include(v?.message, "2 of the 5 steps run masked more than 0.5 of their samples (the most common reason (4): infra_failed: server down)")
  })

  it("fails when more than half were", () => {
    const v = MaskedWatch.verdict(after(3, 2), 0.5, "runs/x")
    assert.strictEqual(v?._tag, "Fail")
    assert.include(v?.message, "3 of the 5 steps run masked more than 0.5")
    assert.include(v?.message, "--max-masked 1")
  })
})

import { assert, describe, it } from "@effect/vitest"
import * as fc from "fast-check"
import { Advantage } from "gyre"

/** A reward: binary, small integers, or any double in [-1e6, 1e6]. */
const reward = fc.oneof(
  fc.constantFrom(0, 1),
  fc.integer({ min: -5, max: 5 }),
  fc.double({ min: -1e6, max: 1e6, noNaN: true }),
)
/** A group of rewards; `undefined` is a masked sample. */
const rewardGroup = fc.array(fc.option(reward, { nil: undefined, freq: 6 }), { minLength: 1, maxLength: 16 })
const batch = fc.array(rewardGroup, { minLength: 1, maxLength: 8 })

const defined = (xs: ReadonlyArray<number | undefined>) => xs.filter((x): x is number => x !== undefined)
const sum = (xs: ReadonlyArray<number>) => xs.reduce((a, b) => a + b, 0)
const maxAbs = (xs: ReadonlyArray<number>) => xs.reduce((m, x) => Math.max(m, Math.abs(x)), 0)
const isConstant = (g: ReadonlyArray<number | undefined>) => {
  const s = Advantage.stats(g)
  return s.n < 2 || s.std <= Advantage.STD_EPSILON
}

/** Advantages of the usable members of each group, with the group's stats. */
const perGroup = (groups: ReadonlyArray<ReadonlyArray<number | undefined>>, mode: Advantage.Mode) => {
  const { advantages } = Advantage.compute(groups, mode)
  return groups.map((g, i) => ({
    rewards: g,
    stats: Advantage.stats(g),
    all: advantages[i]!,
    usable: advantages[i]!.filter((_, j) => g[j] !== undefined),
  }))
}

describe("Advantage.compute", () => {
  it("is never NaN or infinite, keeps the shape, and gives masked samples 0", () =>
    fc.assert(fc.property(batch, fc.constantFrom<Advantage.Mode>("group_std", "mean_only", "batch_std", "none"), (groups, mode) => {
      const { advantages } = Advantage.compute(groups, mode)
      assert.strictEqual(advantages.length, groups.length)
      groups.forEach((g, i) => {
        assert.strictEqual(advantages[i]!.length, g.length)
        g.forEach((r, j) => {
          assert.isTrue(Number.isFinite(advantages[i]![j]), `advantage ${advantages[i]![j]}`)
          if (r === undefined) assert.strictEqual(advantages[i]![j], 0)
        })
      })
    })))

  it("group_std: each group sums to 0", () =>
    fc.assert(fc.property(batch, (groups) => {
      for (const g of perGroup(groups, "group_std")) {
        const tolerance = 1e-9 * g.usable.length * (1 + maxAbs(defined(g.rewards))) / Math.max(g.stats.std, Advantage.STD_EPSILON)
        assert.isAtMost(Math.abs(sum(g.usable)), Math.max(tolerance, 1e-9))
      }
    })))

  it("group_std: unit population variance when the group's std is above the guard", () =>
    fc.assert(fc.property(batch, (groups) => {
      for (const g of perGroup(groups, "group_std")) {
        if (isConstant(g.rewards)) continue
        const mean = sum(g.usable) / g.usable.length
        const variance = sum(g.usable.map((a) => (a - mean) ** 2)) / g.usable.length
        assert.closeTo(variance, 1, 1e-6)
      }
    })))

  it("all modes but none: a constant group (or one with fewer than 2 usable samples) is all 0 and counted as a no-op", () =>
    fc.assert(fc.property(
      fc.array(fc.oneof(rewardGroup, fc.tuple(reward, fc.integer({ min: 1, max: 8 })).map(([r, n]) => Array.from({ length: n }, () => r))), { minLength: 1, maxLength: 8 }),
      fc.constantFrom<Advantage.Mode>("group_std", "mean_only", "batch_std"),
      (groups, mode) => {
        const { advantages, noOpGroups } = Advantage.compute(groups, mode)
        let constant = 0
        groups.forEach((g, i) => {
          if (!isConstant(g)) return
          constant++
          assert.isTrue(advantages[i]!.every((a) => a === 0))
        })
        assert.strictEqual(noOpGroups, constant)
      },
    )))

  it("group_std does not change under a positive affine map of the rewards", () =>
    fc.assert(fc.property(
      fc.array(fc.integer({ min: -100, max: 100 }), { minLength: 2, maxLength: 16 }),
      fc.double({ min: 0.01, max: 100, noNaN: true }),
      fc.double({ min: -100, max: 100, noNaN: true }),
      (rewards, scale, shift) => {
        const [a] = Advantage.compute([rewards], "group_std").advantages
        const [b] = Advantage.compute([rewards.map((r) => scale * r + shift)], "group_std").advantages
        a!.forEach((x, i) => assert.closeTo(b![i]!, x, 1e-6))
      },
    )))

  it("mean_only centers each group without scaling; none passes rewards through", () =>
    fc.assert(fc.property(batch, (groups) => {
      for (const g of perGroup(groups, "mean_only")) {
        if (isConstant(g.rewards)) continue
        const rs = defined(g.rewards)
        g.usable.forEach((a, j) => assert.closeTo(a, rs[j]! - g.stats.mean, 1e-6 * (1 + maxAbs(rs))))
      }
      const { advantages } = Advantage.compute(groups, "none")
      groups.forEach((g, i) => g.forEach((r, j) => assert.strictEqual(advantages[i]![j], r ?? 0)))
    })))

  it("batch_std scales by the std of the whole batch", () => {
    const { advantages } = Advantage.compute([[0, 1], [0, 0, 2, 2]], "batch_std")
    const batchStd = Advantage.stats([0, 1, 0, 0, 2, 2]).std
    assert.closeTo(advantages[0]![0]!, -0.5 / batchStd, 1e-12)
    assert.closeTo(advantages[1]![2]!, 1 / batchStd, 1e-12)
  })

  it("examples: GRPO on a binary group, and a masked sample", () => {
    const { advantages, noOpGroups } = Advantage.compute([[1, 0, 0, 1], [1, 1, 1], [1, undefined, 0]])
    assert.deepStrictEqual(advantages, [[1, -1, -1, 1], [0, 0, 0], [1, 0, -1]])
    assert.strictEqual(noOpGroups, 1)
  })

  it("stats ignores masked samples", () => {
    assert.deepStrictEqual(Advantage.stats([undefined, 2, 4]), { mean: 3, std: 1, n: 2 })
    assert.deepStrictEqual(Advantage.stats([undefined]), { mean: 0, std: 0, n: 0 })
  })
})

describe("rewards that overflow", () => {
  it("are reported for every mode, and never give a non-finite or silent advantage", () => {
    for (const mode of ["group_std", "mean_only", "batch_std", "none"] as const) {
      const { advantages, overflowGroups } = Advantage.compute([[0, 1, 0, 1], [1e300, 0, 1e300, 0]], mode)
      // batch_std: the batch's std overflows, so every group is reported
      assert.deepStrictEqual(overflowGroups, mode === "batch_std" ? [0, 1] : [1], mode)
      assert.deepStrictEqual(advantages[1], [0, 0, 0, 0], mode)
      for (const a of advantages.flat()) assert.isTrue(Number.isFinite(a))
    }
    assert.deepStrictEqual(Advantage.compute([[1e30, 0, 2e30]], "group_std").overflowGroups, [])
  })
})

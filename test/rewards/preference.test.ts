/**
 * Preference rewards: a group ranked by the judge in one question (scores from places,
 * the reply noted with every rollout, an unreadable reply a judge's fault), and pairwise
 * preferences fitted with Bradley-Terry, checked against a maximum-likelihood fit written
 * out here (gradient ascent on the same likelihood) and the two-player closed form.
 * The judge is a test double answering from a script.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as fc from "fast-check"
import { Judge } from "../../rewards/judge.ts"
import { bradleyTerry, pairOrders, pairwiseJudge, rankingOf, rankJudge, rankScores } from "../../rewards/preference.ts"
import * as Reward from "../../src/vocabulary/Reward.ts"
import { rollout as testRollout } from "../../src/testing/Rollouts.ts"
import { arb, laws } from "gyre/testing"

type Problem = { readonly n: number }
const group = (...completions: ReadonlyArray<string>) => completions.map((c, i): Reward.Rollout<Problem> => ({ ...testRollout({ n: 1 }, c, { prompt: "Say:", tokens: [] }), index: i, groupSize: completions.length }))

/** Test double: a judge answering from a script, counting its questions. */
const scripted = (reply: (question: string) => string) => {
  const asked: Array<string> = []
  return { asked, layer: Layer.succeed(Judge, Judge.of({ ask: (q) => Effect.sync(() => (asked.push(q), reply(q))) })) }
}

/** The same likelihood, maximized by plain gradient ascent: sum over i != j of w'_ij (t_i - log(e^t_i + e^t_j)), w' = w + 1/2. */
const mlFit = (wins: ReadonlyArray<ReadonlyArray<number>>): Array<number> => {
  const n = wins.length
  let t = new Array<number>(n).fill(0)
  for (let it = 0; it < 20000; it++) {
    const grad = t.map((ti, i) => {
      let g = 0
      for (let j = 0; j < n; j++) {
        if (j === i) continue
        const wij = wins[i]![j]! + 0.5
        const wji = wins[j]![i]! + 0.5
        g += wij - (wij + wji) / (1 + Math.exp(t[j]! - ti))
      }
      return g
    })
    t = t.map((ti, i) => ti + 0.05 * grad[i]!)
  }
  const mean = t.reduce((a, b) => a + b, 0) / n
  return t.map((x) => x - mean)
}

describe("rankJudge", () => {
  it("reads a ranking and scores places; the unranked share the places left", () => {
    assert.deepStrictEqual(rankingOf("3 > 1 > 9 > 3", 4), [3, 1])
    assert.deepStrictEqual(rankScores([3, 1], 4), [2 / 3, 1 / 6, 1, 1 / 6])
    assert.deepStrictEqual(rankScores([2, 1, 3], 3), [0.5, 1, 0])
  })

  it.effect("asks once per group, notes the reply with every rollout, and faults an unreadable one", () =>
    Effect.gen(function* () {
      const judge = scripted((q) => (q.includes("bad") ? "I cannot say" : "2, 3, 1"))
      const reward = Reward.weighted({ ranked: [rankJudge<Problem>({ question: (g) => g.map((r, i) => `${i + 1}. ${r.completion}`).join("\n") }), 1] })
      const scores = yield* Reward.evaluate(reward, group("x", "yy", "zzz")).pipe(Effect.provide(judge.layer))
      assert.deepStrictEqual(scores.map((s) => s.value), [0, 1, 0.5])
      assert.deepStrictEqual(scores.map((s) => s.notes), Array.from({ length: 3 }, () => ({ ranked: ["2, 3, 1"] })))
      assert.strictEqual(judge.asked.length, 1)
      const faulted = yield* Reward.evaluate(reward, group("bad", "worse")).pipe(Effect.provide(judge.layer))
      assert.deepStrictEqual(faulted.map((s) => s.value), [0, 0])
    }))
})

describe("pairwiseJudge and Bradley-Terry", () => {
  it("the MM fit is the maximum of the likelihood (gradient ascent agrees to 1e-4), and two players follow the closed form", () => {
    fc.assert(
      fc.property(fc.integer({ min: 2, max: 5 }).chain((n) => fc.array(fc.array(fc.integer({ min: 0, max: 4 }), { minLength: n, maxLength: n }), { minLength: n, maxLength: n })), (wins) => {
        const mm = bradleyTerry(wins)
        const ml = mlFit(wins)
        mm.forEach((t, i) => assert.isBelow(Math.abs(t - ml[i]!), 1e-4, `player ${i}: ${t} vs ${ml[i]}`))
      }),
      { numRuns: 25 },
    )
    const [a, b] = bradleyTerry([[0, 3], [1, 0]])
    assert.isBelow(Math.abs(1 / (1 + Math.exp(b! - a!)) - 3.5 / 5), 1e-9)
  })

  it.effect("a judge that always prefers the answer shown first gives every completion the same score", () =>
    Effect.gen(function* () {
      const judge = scripted(() => "A")
      const reward = pairwiseJudge<Problem>({ question: (a, b) => `A: ${a.completion} B: ${b.completion}` })
      const scores = yield* Reward.evaluate(reward, group("w", "x", "y", "z")).pipe(Effect.provide(judge.layer))
      assert.strictEqual(judge.asked.length, 12, "each pair in both orders")
      for (const s of scores) assert.strictEqual(s.value, 0.5)
    }))

  it("balanced orders ask each pair once and show each completion first about as often as second", () => {
    fc.assert(fc.property(fc.integer({ min: 2, max: 16 }), (G) => {
      const pairs = pairOrders(G, "balanced")
      assert.strictEqual(pairs.length, (G * (G - 1)) / 2)
      assert.strictEqual(new Set(pairs.map(([a, b]) => `${Math.min(a, b)}/${Math.max(a, b)}`)).size, pairs.length)
      for (let i = 0; i < G; i++) {
        const first = pairs.filter(([a]) => a === i).length
        const second = pairs.filter(([, b]) => b === i).length
        assert.isAtMost(Math.abs(first - second), 1, `completion ${i} of ${G}: first ${first}, second ${second}`)
      }
    }))
    assert.deepStrictEqual(pairOrders(2, "both"), [[0, 1], [1, 0]])
  })

  it.effect("asks each pair in both orders and scores the judge's favourite highest", () =>
    Effect.gen(function* () {
      // the judge prefers the longer completion
      const judge = scripted((q) => {
        const [, a = "", b = ""] = /A: (\w*) B: (\w*)/.exec(q) ?? []
        return a.length >= b.length ? "A" : "B"
      })
      const reward = pairwiseJudge<Problem>({ question: (a, b) => `A: ${a.completion} B: ${b.completion}` })
      const scores = yield* Reward.evaluate(reward, group("aa", "a", "aaaa", "aaa")).pipe(Effect.provide(judge.layer))
      assert.strictEqual(judge.asked.length, 12)
      const order = scores.map((s, i) => [s.value!, i] as const).sort((x, y) => y[0] - x[0]).map(([, i]) => i)
      assert.deepStrictEqual(order, [2, 3, 0, 1])
      for (const s of scores) assert.isTrue(s.value! > 0 && s.value! < 1)
    }))
})

describe("preference rewards' laws", () => {
  // a judge that ranks by content: the completions' order in the question must not matter
  const byLength = scripted((q) => {
    const lines = q.split("\n").map((l, i) => ({ i: i + 1, text: l.replace(/^\d+\. /, "") }))
    return lines.sort((a, b) => b.text.length - a.text.length || (a.text < b.text ? -1 : a.text > b.text ? 1 : 0)).map((l) => l.i).join(" > ")
  })
  const prefersLonger = scripted((q) => {
    const [, a = "", b = ""] = /A: ([^]*) B: ([^]*)$/.exec(q) ?? []
    return a.length > b.length || (a.length === b.length && a < b) ? "A" : "B"
  })
  const provide = (layer: Layer.Layer<Judge>) => <A, E, R>(e: Effect.Effect<A, E, R>) => Effect.provide(e, layer)

  it("rankJudge and pairwiseJudge are bounded in [0, 1] and do not score by position", async () => {
    const ranked = rankJudge<null>({ question: (g) => g.map((r, i) => `${i + 1}. ${r.completion.replaceAll("\n", " ")}`).join("\n") })
    const paired = pairwiseJudge<null>({ question: (a, b) => `A: ${a.completion} B: ${b.completion}` })
    for (const [reward, layer] of [[ranked, byLength.layer], [paired, prefersLonger.layer]] as const) {
      await laws.orderIndependent(reward, { problems: [null], completions: arb.noise(), provide: provide(layer) })
      await laws.bounded(reward, { min: 0, max: 1, problems: [null], groupSize: 4, provide: provide(layer) })
    }
  })
})

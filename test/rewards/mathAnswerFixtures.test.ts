/**
 * `mathAnswer` against Math-Verify's own public test cases (test/fixtures/math-verify/):
 * each case scored by the reward with the options its test used, agreement reported per
 * category, and the thresholds asserted: at least 95% overall and in every category, and
 * no wrong answer accepted.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { score } from "gyre/testing"
import { readFileSync } from "node:fs"
import { mathAnswer, type MathAnswerOptions } from "../../rewards/answers.ts"

interface Case {
  readonly category: string
  readonly gold: string
  readonly pred: string
  readonly expected: 0 | 1
  readonly options: MathAnswerOptions
  readonly source: { readonly path: string; readonly test: string; readonly index: number }
}

const fixtures: { readonly cases: ReadonlyArray<Case> } = JSON.parse(
  readFileSync(new URL("../fixtures/math-verify/cases.json", import.meta.url), "utf8"),
)

describe("mathAnswer on Math-Verify's test cases", () => {
  it.effect("agrees with Math-Verify's verdicts (>= 95% per category) and accepts no wrong answer", () =>
    Effect.gen(function* () {
      const tally = new Map<string, { agree: number; total: number }>()
      const falseAccepts: Array<string> = []
      const misses: Array<string> = []
      for (const c of fixtures.cases) {
        const reward = mathAnswer((p: { gold: string }) => p.gold, c.options)
        const s = yield* score(reward, { gold: c.gold }, c.pred)
        const accepted = s.value === 1 ? 1 : 0
        const t = tally.get(c.category) ?? { agree: 0, total: 0 }
        tally.set(c.category, { agree: t.agree + (accepted === c.expected ? 1 : 0), total: t.total + 1 })
        const where = `${c.source.path} ${c.source.test}[${c.source.index}]`
        if (accepted !== c.expected) (accepted === 1 ? falseAccepts : misses).push(where)
      }
      const rows = [...tally].map(([category, { agree, total }]) => ({ category, agree, total, pct: (100 * agree) / total }))
      const agree = rows.reduce((n, r) => n + r.agree, 0)
      console.info(
        rows.map((r) => `${r.category.padEnd(28)} ${r.agree}/${r.total} ${r.pct.toFixed(1)}%`).join("\n") +
          `\noverall ${agree}/${fixtures.cases.length} ${((100 * agree) / fixtures.cases.length).toFixed(1)}%` +
          `, wrong answers accepted: ${falseAccepts.length}` + (misses.length > 0 ? `\nmissed: ${misses.join(", ")}` : ""),
      )
      assert.deepStrictEqual(falseAccepts, [], "wrong answers accepted")
      assert.isAtLeast(agree / fixtures.cases.length, 0.95, "overall agreement")
      for (const r of rows) assert.isAtLeast(r.pct, 95, `agreement in ${r.category}`)
    }))
})

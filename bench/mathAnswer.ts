/**
 * How long `mathAnswer` takes per check: the engine's first load, then warm checks on
 * Math-Verify's 277 test cases (long solutions included) and on 1,024 short completions
 * like those of one RL step (golds read once and kept). Run: npx tsx bench/mathAnswer.ts
 */
import { Effect } from "effect"
import { score } from "gyre/testing"
import { readFileSync } from "node:fs"
import { mathAnswer } from "../rewards/answers.ts"

interface Case { readonly gold: string; readonly pred: string; readonly options: object }
const cases: ReadonlyArray<Case> = JSON.parse(readFileSync(new URL("../test/fixtures/math-verify/cases.json", import.meta.url), "utf8")).cases

const reward = mathAnswer((p: { gold: string }) => p.gold)
const check = (gold: string, completion: string) => Effect.runPromise(score(reward, { gold }, completion))

const time = async (label: string, items: ReadonlyArray<readonly [string, string]>) => {
  const t0 = performance.now()
  for (const [g, c] of items) await check(g, c)
  const ms = performance.now() - t0
  console.log(`${label}: ${items.length} checks, ${ms.toFixed(0)} ms, ${(ms / items.length).toFixed(2)} ms per check`)
}

const t0 = performance.now()
await check("1", "\\boxed{1}")
console.log(`first check (loads the engine): ${(performance.now() - t0).toFixed(0)} ms`)

const fixturePairs = cases.map((c) => [c.gold, c.pred] as const)
await time("Math-Verify cases, golds read for the first time", fixturePairs)
await time("Math-Verify cases, warm", fixturePairs)

const golds = ["\\frac{3}{4}", "12", "2\\sqrt{3}", "(1, 2]", "x = -\\frac{1}{2}", "\\{1, 2, 3\\}", "0.125", "\\frac{\\pi}{6}"]
const steps = Array.from({ length: 1024 }, (_, i) => {
  const gold = golds[i % golds.length]!
  const answer = i % 3 === 0 ? gold : i % 3 === 1 ? `${i % 17}` : `${gold}+1`
  return [gold, `We compute step by step: ${i} apples and ${i % 7} pears, so $${i % 11}+1$. Therefore the answer is $\\boxed{${answer}}$.`] as const
})
await time("one step of 1,024 short completions (8 golds), first", steps)
await time("one step of 1,024 short completions (8 golds), warm", steps)

import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fc from "fast-check"
import { score } from "gyre/testing"
import { readdirSync, readFileSync } from "node:fs"
import { afterThinking, mathAnswer, mathGoldReadable, unreadableGolds } from "../../rewards/answers.ts"

const byGold = (options: Parameters<typeof mathAnswer>[1] = {}) => mathAnswer((p: { gold: string | number | undefined }) => p.gold, options)
const value = (reward: ReturnType<typeof byGold>, gold: string | number | undefined, completion: string) =>
  score(reward, { gold }, completion).pipe(Effect.map((s) => s.value))

describe("mathAnswer", () => {
  it.effect("reads golds that are not numbers instead of stopping the run", () =>
    Effect.gen(function* () {
      const r = byGold()
      assert.strictEqual(yield* value(r, "\\sqrt{2}", "so $\\boxed{\\sqrt 2}$"), 1)
      assert.strictEqual(yield* value(r, "\\sqrt{2}", "so $\\boxed{2}$"), 0)
      assert.strictEqual(yield* value(r, "(1,2)", "the point is $(1, 2)$"), 1)
      assert.strictEqual(yield* value(r, "(1,2)", "the point is $(2, 1)$"), 0)
      assert.strictEqual(yield* value(r, "x=3", "\\boxed{3}"), 1)
      assert.strictEqual(yield* value(r, "x=3", "\\boxed{x = 4}"), 0)
    }))

  it.effect("compares expressions, not their last number", () =>
    Effect.gen(function* () {
      const r = byGold()
      assert.strictEqual(yield* value(r, "\\frac{\\pi}{4}", "\\boxed{4}"), 0)
      assert.strictEqual(yield* value(r, "\\frac{\\pi}{4}", "\\boxed{\\pi/4}"), 1)
      assert.strictEqual(yield* value(r, "\\frac{\\pi}{4}", "about $0.785398$"), 1)
      assert.strictEqual(yield* value(r, "\\frac{\\pi}{4}", "about $0.7854$"), 0)
      assert.strictEqual(yield* value(r, "\\tan^2(y)+1", "$\\boxed{\\sec^2(y)}$"), 1)
      assert.strictEqual(yield* value(r, "\\tan^2(y)+1", "$\\boxed{\\sec^2(x)}$"), 0)
    }))

  it.effect("keeps open and closed intervals apart, and sets unordered, tuples ordered", () =>
    Effect.gen(function* () {
      const r = byGold()
      assert.strictEqual(yield* value(r, "[0,1)", "\\boxed{[0,1)}"), 1)
      assert.strictEqual(yield* value(r, "[0,1)", "\\boxed{[0,1]}"), 0)
      assert.strictEqual(yield* value(r, "[0,1)", "\\boxed{(0,1)}"), 0)
      assert.strictEqual(yield* value(r, "\\{1,2,3\\}", "\\boxed{\\{3,1,2\\}}"), 1)
      assert.strictEqual(yield* value(r, "(1,2,3)", "\\boxed{(3,1,2)}"), 0)
      assert.strictEqual(yield* value(r, "1\\pm\\sqrt{19}", "\\boxed{1-\\sqrt{19}, 1+\\sqrt{19}}"), 1)
      assert.strictEqual(yield* value(r, "1\\pm\\sqrt{19}", "\\boxed{1+\\sqrt{19}}"), 0)
      assert.strictEqual(yield* value(r, "x \\ge 5", "$\\boxed{5 \\le x}$"), 1)
      assert.strictEqual(yield* value(r, "x \\ge 5", "$\\boxed{x > 5}$"), 0)
    }))

  it.effect("reads thousands separators, percentages and GSM8K's ####", () =>
    Effect.gen(function* () {
      const r = byGold()
      assert.strictEqual(yield* value(r, 1200, "\\boxed{1,\\!200}"), 1)
      assert.strictEqual(yield* value(r, "1200", "so she pays $1,200."), 1)
      assert.strictEqual(yield* value(r, "28\\%", "the loss is 28 percent"), 1)
      assert.strictEqual(yield* value(r, "42", "6 * 7 = 42\n#### 42"), 1)
      assert.strictEqual(yield* value(r, "42", "6 * 7 = 43\n#### 43"), 0)
    }))

  it.effect("with thinking, reads only what follows the thinking block", () =>
    Effect.gen(function* () {
      const completion = "<think>maybe \\boxed{17}? no.</think> The answer is 18."
      assert.strictEqual(yield* value(byGold(), 17, completion), 1, "without the option the box inside wins, as in Math-Verify")
      assert.strictEqual(yield* value(byGold({ thinking: true }), 17, completion), 0)
      assert.strictEqual(yield* value(byGold({ thinking: true }), 18, completion), 1)
      const custom = byGold({ thinking: { start: ["[plan]"], end: ["[/plan]"] } })
      assert.strictEqual(yield* value(custom, 18, "[plan]\\boxed{17}[/plan] so \\boxed{18}"), 1)
      const unfinished = yield* score(byGold({ thinking: true, noAnswerPenalty: -1 }), { gold: 17 }, "<think>\\boxed{17} and then")
      assert.strictEqual(unfinished.value, -1)
      assert.strictEqual(afterThinking("a</think>b</think>c"), "c")
      assert.strictEqual(afterThinking("no block at all"), "no block at all")
    }))

  it.effect("reads answer letters when given the choices", () =>
    Effect.gen(function* () {
      const r = byGold({ choices: ["A", "B", "C", "D"] })
      assert.strictEqual(yield* value(r, "C", "Between B and C, the answer is C."), 1)
      assert.strictEqual(yield* value(r, "C", "**Final answer is B**"), 0)
    }))

  it.effect("a completion without an answer is the model's fault; a problem without a gold does not apply", () =>
    Effect.gen(function* () {
      const none = yield* score(byGold({ noAnswerPenalty: -0.5 }), { gold: "3" }, "I do not know.")
      assert.strictEqual(none.value, -0.5)
      assert.isUndefined(yield* value(byGold(), undefined, "\\boxed{3}"))
    }))

  it.effect("a gold it cannot read is compared as text, counted, and listed by unreadableGolds", () =>
    Effect.gen(function* () {
      const gold = "\\undefinedmacro{3}"
      assert.strictEqual(yield* value(byGold(), gold, `\\boxed{${gold}}`), 1)
      assert.strictEqual(yield* value(byGold(), gold, "\\boxed{3}"), 0)
      const readable = mathGoldReadable((p: { gold: string }) => p.gold)
      assert.strictEqual((yield* score(readable, { gold }, "")).value, 0)
      assert.strictEqual((yield* score(readable, { gold: "\\frac{1}{2}" }, "")).value, 1)
      assert.deepStrictEqual(yield* unreadableGolds(["42", "\\frac{1}{2}", gold, "(1, 2]", "x=3"]), [gold])
    }))

  it("rejects options it cannot honour, naming them", () => {
    assert.throws(() => byGold({ precision: -1 }), /precision must be an integer from 0 to 15.*-1/)
    assert.throws(() => byGold({ choices: [] }), /choices must be non-empty/)
    assert.throws(() => byGold({ thinking: { end: [""] } }), /thinking.end must list non-empty markers/)
    assert.throws(() => byGold({ noAnswerPenalty: Number.NaN }), /noAnswerPenalty must be finite/)
  })

  it("loads the algebra engine only on first use (import \"gyre/rewards\" stays light)", () => {
    const dir = new URL("../../rewards/answers/math/", import.meta.url)
    const files = [...readdirSync(dir).map((f) => new URL(f, dir)), new URL("../../rewards/answers/MathAnswer.ts", import.meta.url)]
    for (const f of files) {
      const source = readFileSync(f, "utf8")
      const staticImports = source.split("\n").filter((l) => /^import .*@cortex-js\/compute-engine/.test(l) && !l.startsWith("import type"))
      assert.deepStrictEqual(staticImports, [], `${f.pathname} imports the engine statically`)
    }
    assert.match(readFileSync(new URL("math/Cas.ts", dir.href.replace(/math\/$/, "")), "utf8"), /import\("@cortex-js\/compute-engine"\)/)
  })
})

// ===== laws =====

/** A gold number and the ways a correct completion may write it. */
const goldValue = fc.oneof(
  fc.integer({ min: -100_000, max: 100_000 }).map((n) => ({ latex: String(n), value: n })),
  fc.tuple(fc.integer({ min: -999, max: 999 }), fc.integer({ min: 2, max: 97 })).map(([a, b]) => ({ latex: `\\frac{${a}}{${b}}`, value: a / b })),
  fc.tuple(fc.integer({ min: 1, max: 9 }), fc.constantFrom(2, 3, 5, 7, 11)).map(([k, m]) => ({ latex: `${k}\\sqrt{${m}}`, value: k * Math.sqrt(m) })),
)

const wrappings: ReadonlyArray<(g: string) => string> = [
  (g) => `so the result is $\\boxed{${g}}$.`,
  (g) => `Some work: $3 + 4 = 7$. The answer is $${g}$`,
  (g) => `Final Answer: The final answer is $${g}$. I hope it is correct.`,
  (g) => `<think>is it $\\boxed{12345}$? no</think> therefore $\\boxed{${g}}$`,
  (g) => `\\[ x = ${g} \\]`,
]

describe("mathAnswer laws", () => {
  const thinking = byGold({ thinking: true })

  it.effect("a gold matches itself written every way the reward accepts", () =>
    Effect.promise(() =>
      fc.assert(
        fc.asyncProperty(goldValue, fc.integer({ min: 0, max: wrappings.length - 1 }), async (g, w) => {
          const completion = wrappings[w]!(g.latex)
          const s = await Effect.runPromise(score(thinking, { gold: g.latex }, completion))
          assert.strictEqual(s.value, 1, `${g.latex} in ${completion}`)
        }),
        { numRuns: 150 },
      )
    ))

  it.effect("a changed number never matches", () =>
    Effect.promise(() =>
      fc.assert(
        fc.asyncProperty(
          goldValue,
          fc.integer({ min: 0, max: wrappings.length - 1 }),
          fc.oneof(fc.integer({ min: -50, max: 50 }).filter((d) => d !== 0), fc.constantFrom(0.5, -0.25, 1e-3)),
          async (g, w, delta) => {
            const changed = `${g.latex}+${delta}`
            const completion = wrappings[w]!(`${g.value + delta}`)
            for (const c of [completion, wrappings[w]!(changed)]) {
              const s = await Effect.runPromise(score(thinking, { gold: g.latex }, c))
              assert.notStrictEqual(s.value, 1, `${g.latex} accepted ${c}`)
            }
          },
        ),
        { numRuns: 150 },
      )
    ))
})

describe("mathAnswer is strict", () => {
  it.effect("does not accept what is equal only for some values of the variables, or a different infinity", () =>
    Effect.gen(function* () {
      const r = byGold()
      assert.strictEqual(yield* value(r, "|x|", "\\boxed{x}"), 0)
      assert.strictEqual(yield* value(r, "x", "\\boxed{\\sqrt{x^2}}"), 0)
      assert.strictEqual(yield* value(r, "\\frac{1}{3\\sqrt[3]{x}^2}", "\\boxed{\\frac{1}{3x^{2/3}}}"), 1)
      assert.strictEqual(yield* value(r, "(1, \\infty)", "\\boxed{(1, +\\infty)}"), 1)
      assert.strictEqual(yield* value(r, "(1, \\infty)", "\\boxed{(1, -\\infty)}"), 0)
      assert.strictEqual(yield* value(r, "5", "\\boxed{x}"), 0)
      assert.strictEqual(yield* value(r, "5", "\\boxed{5 or 6}"), 0)
      assert.strictEqual(yield* value(r, "5", "\\boxed{4}, \\boxed{5}, \\boxed{6}"), 0)
      assert.strictEqual(yield* value(r, "0.0000001", "\\boxed{0.0000004}"), 0, "tiny decimals that both round to 0 differ")
    }))

  it.effect("reads GSM8K's #### before a later number", () =>
    Effect.gen(function* () {
      assert.strictEqual(yield* value(byGold(), 42, "6 * 7 = 42\n#### 42\nDone in 3 steps."), 1)
    }))
})

describe("mathAnswer is strict off the real line", () => {
  it.effect("does not accept an identity that holds only for positive variables", () =>
    Effect.gen(function* () {
      assert.strictEqual(yield* value(byGold(), "\\ln(xy)", "\\boxed{\\ln x+\\ln y}"), 0)
      assert.strictEqual(yield* value(byGold(), "\\ln(xy)", "\\boxed{\\ln(yx)}"), 1)
    }))
})

describe("mathAnswer and hedges", () => {
  it.effect("gives no credit for two answers", () =>
    Effect.gen(function* () {
      for (const hedge of ["The answer is 3 or 4", "The answer is $3$ or $4$", "\\boxed{3} or \\boxed{4}", "\\boxed{3 \\text{ or } 4}"]) {
        assert.notStrictEqual(yield* value(byGold(), "3", hedge), 1, hedge)
      }
    }))
})

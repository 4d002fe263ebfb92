/**
 * Pre-flight checks: a leaf's `check` reaches `Reward.checkProblem` through the
 * combinators, `mathAnswer` flags a gold it cannot read, and `gyre check` reports exactly
 * the problems whose checks find something (the logic and the command, in-process).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { Env, Reward } from "gyre"
import { mathAnswer } from "../../rewards/answers.ts"
import { checkEnv, reportLines } from "../../src/app/Check.ts"
import { check, checkAndPrint } from "../../src/cli/check.ts"

type Problem = { readonly question: string; readonly answer: string }
const Problem = Schema.Struct({ question: Schema.String, answer: Schema.String })

const nonEmpty = Reward.make<Problem>("non_empty", (r) => (r.completion.trim() === "" ? 0 : 1), {
  check: (p) => (p.question === "" ? "the question is empty" : undefined),
})
const correct = mathAnswer((p: Problem) => p.answer)

const rowsEnv = (rows: ReadonlyArray<Problem>) =>
  Env.make({
    name: "golds",
    problem: Problem,
    source: Env.rows<Problem>([...rows]),
    prompt: (p) => p.question,
    reward: Reward.weighted({ correct: [correct, 1], brief: [nonEmpty, 0.1] }),
    eval: { heldOut: 0 },
  })

describe("Reward checks", () => {
  it.effect("a leaf's check is found through weighted, gates, maps and leaf policies, named as its component", () =>
    Effect.gen(function* () {
      const reward = Reward.weighted({
        brief: [nonEmpty, 1],
        gate: [Reward.all("gate", [Reward.rename(nonEmpty, "gated"), Reward.make<Problem>("plain", () => 1)]), 0],
        clamped: [Reward.retry(Reward.clamp(Reward.rename(nonEmpty, "inner"), 0, 1), 2), 0],
      })
      assert.deepStrictEqual(Reward.checksOf(reward).map((c) => c.reward), ["brief", "gated", "inner"])
      assert.deepStrictEqual(yield* Reward.checkProblem(reward, { question: "", answer: "1" }), [
        { reward: "brief", message: "the question is empty" },
        { reward: "gated", message: "the question is empty" },
        { reward: "inner", message: "the question is empty" },
      ])
      assert.deepStrictEqual(yield* Reward.checkProblem(reward, { question: "1?", answer: "1" }), [])
    }))

  it.effect("a check that throws is a finding, not a crash", () =>
    Effect.gen(function* () {
      const broken = Reward.make<Problem>("broken", () => 1, {
        check: () => {
          throw new Error("no field")
        },
      })
      assert.deepStrictEqual(yield* Reward.checkProblem(broken, { question: "", answer: "" }), [{ reward: "broken", message: "the check failed: no field" }])
    }))

  it.effect("mathAnswer's check flags a gold it cannot read as math and passes one it can", () =>
    Effect.gen(function* () {
      const [bad] = yield* Reward.checkProblem(correct, { question: "", answer: "\\notreadable{" })
      assert.strictEqual(bad?.reward, "correct")
      assert.include(bad?.message, JSON.stringify("\\notreadable{"))
      assert.include(bad?.message, "compared as text")
      assert.deepStrictEqual(yield* Reward.checkProblem(correct, { question: "", answer: "\\frac{1}{2}" }), [])
      const none = mathAnswer((_: Problem) => undefined)
      assert.deepStrictEqual(yield* Reward.checkProblem(none, { question: "", answer: "" }), [])
    }))
})

describe("gyre check", () => {
  const rows: Array<Problem> = [
    { question: "1/2?", answer: "\\frac{1}{2}" },
    { question: "2+2?", answer: "4" },
    { question: "what?", answer: "\\notreadable{" },
    { question: "x?", answer: "x=3" },
  ]

  it.effect("checks every row of a row env and returns exactly the unreadable gold", () =>
    Effect.gen(function* () {
      const report = yield* checkEnv(rowsEnv(rows), { split: "all" })
      assert.strictEqual(report.checked, 4)
      assert.strictEqual(report.findings.length, 1)
      const [f] = report.findings
      assert.strictEqual(f?.key, "golds/train/row 2")
      assert.strictEqual(f?.reward, "correct")
      assert.include(f?.message, "\\\\notreadable{")
      assert.deepStrictEqual(reportLines(report).slice(-1), ["checked 4 problems: 1 finding"])
      assert.strictEqual((yield* checkEnv(rowsEnv(rows), { samples: 2 })).checked, 2)
    }))

  it.effect("draws --samples problems of a seeded env per split", () =>
    Effect.gen(function* () {
      const env = Env.make({
        name: "seeded",
        problem: Problem,
        source: Env.seeded(({ random }) => ({ question: String(random.next()), answer: random.next() < 0.5 ? "\\notreadable{" : "1" })),
        prompt: (p) => p.question,
        reward: correct,
        eval: { heldOut: 0.5 },
      })
      const report = yield* checkEnv(env, { samples: 10, split: "train" })
      assert.strictEqual(report.checked, 10)
      for (const f of report.findings) assert.match(f.key, /^seeded\/train\/0\/\d+$/)
      assert.isAbove(report.findings.length, 0)
      assert.strictEqual((yield* checkEnv(env, { samples: 10 })).checked, 20)
      assert.include((yield* Effect.flip(checkEnv(env, { samples: 0 }))).message, "--samples must be a positive integer")
    }))

  it.live("the command's handler prints one line per finding and a summary, and exits 1 on findings and 0 without", () =>
    Effect.gen(function* () {
      const before = process.exitCode
      const lines: Array<string> = []
      const log = console.log
      try {
        console.log = (...args: Array<unknown>) => void lines.push(args.join(" "))
        process.exitCode = undefined
        yield* checkAndPrint(rowsEnv(rows), { split: "train" })
        assert.strictEqual(process.exitCode, 1)
        process.exitCode = undefined
        yield* checkAndPrint(rowsEnv([rows[0]!, rows[1]!]), {})
        assert.strictEqual(process.exitCode, undefined)
      } finally {
        console.log = log
        process.exitCode = before
      }
      assert.deepStrictEqual(lines.join("\n").split("\n").map((l) => l.replace(/:[^:]*$/, "")), [
        "golds/train/row 2: correct",
        "checked 4 problems",
        "checked 2 problems",
      ])
    }))

  it.live("the command reports an env it cannot load, and exits 1", () =>
    Effect.gen(function* () {
      const before = process.exitCode
      try {
        process.exitCode = undefined
        yield* check({ env: "./no/such/env.ts" })
        assert.strictEqual(process.exitCode, 1)
      } finally {
        process.exitCode = before
      }
    }))
})

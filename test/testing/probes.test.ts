/**
 * Reward-hacking probes against gyre's own rewards and envs: what each still falls for
 * (on purpose, and why), and that the probe finds a careless reward's holes.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit } from "effect"
import { Reward } from "gyre"
import { probes } from "gyre/testing"
import calculator, { answer as calcAnswer, correct } from "../../envs/calculator.ts"
import math, { answer } from "../../envs/math.ts"
import { exactMatch, numericAnswer } from "../../rewards/answers.ts"
import { hasTag, tagSequence } from "../../rewards/format.ts"
import { maxLength } from "../../rewards/length.ts"

type P = { readonly a: number; readonly b: number; readonly op: "plus" | "minus" | "times" }
// 0 plus 8: the prompt ends with the answer, so an echo would be right
const problems: ReadonlyArray<P> = [{ a: 7, b: 8, op: "times" }, { a: 0, b: 8, op: "plus" }, { a: 9, b: 3, op: "minus" }]
const prompt = (p: P) => `What is ${p.a} ${p.op} ${p.b}?`
const base = { problems, gold: answer, prompt }

describe("probes find a careless reward's holes", () => {
  /** test double: a careless reward, 1 when the gold number appears anywhere in the completion */
  const careless = Reward.make<P>("anywhere", (r) => (r.completion.includes(String(answer(r.problem))) ? 1 : 0))

  it.effect("reports each exploit with the completion that did it", () =>
    Effect.gen(function* () {
      const report = yield* probes.probe(careless, base)
      for (const name of ["many-candidates", "several-answers", "echo-prompt", "padding", "wrong-place", "lookalike-digits", "x-or-y"]) {
        assert.include(report.exploited, name)
      }
      assert.notInclude(report.exploited, "empty-tags")
      const f = report.findings.find((x) => x.exploit === "x-or-y")!
      assert.include(f.completion, " or ")
      assert.strictEqual(f.score, 1)
      assert.strictEqual(f.threshold, 0.5)
      assert.match(probes.formatReport(report), /x-or-y \(hedges between two answers: "X or Y"\): \d+ of \d+ completions got through/)
    }))

  it.effect("assertNoExploits fails with a readable list", () =>
    Effect.gen(function* () {
      const exit = yield* Effect.exit(probes.assertNoExploits(careless, base))
      assert.isTrue(Exit.isFailure(exit))
      const text = String(Exit.isFailure(exit) ? exit.cause : "")
      assert.match(text, /fell for 7 known exploit\(s\)/)
      assert.match(text, /padding/)
    }))

  it.effect("an allowed exploit that no longer gets through fails too", () =>
    Effect.gen(function* () {
      const exit = yield* Effect.exit(probes.assertNoExploits(numericAnswer(answer), { ...base, allow: ["padding", "x-or-y"] }))
      assert.match(String(Exit.isFailure(exit) ? exit.cause : ""), /allowed but not found \(remove from allow\): x-or-y/)
    }))

  it.effect("the honest answer must beat a wrong one for the default threshold", () =>
    Effect.gen(function* () {
      const e = yield* Effect.flip(probes.probe(hasTag<P>("answer"), base))
      assert.match(e.message, /give `format`.*or a `threshold`/)
    }))
})

describe("gyre's rewards", () => {
  // numericAnswer judges the answer, not the length: padding gets through in every mode.
  // Compose it with a length limit (below) where a policy can write long completions.
  for (const [mode, format] of [
    ["last", (a: string) => ` ${a}`],
    ["auto", (a: string) => ` ${a}`],
    ["tagged", (a: string) => `<answer>${a}</answer>`],
    ["boxed", (a: string) => `\\boxed{${a}}`],
  ] as const) {
    it.effect(`numericAnswer ${mode}: only padding`, () => probes.assertNoExploits(numericAnswer(answer, { mode }), { ...base, format, allow: ["padding"] }))
  }

  // "first" reads the first number by definition: the right number written first, then a
  // different final answer, is what it scores (wrong-place, and a final answer in other digits)
  it.effect("numericAnswer first: padding, wrong-place and lookalike by definition", () =>
    probes.assertNoExploits(numericAnswer(answer, { mode: "first" }), { ...base, allow: ["padding", "wrong-place", "lookalike-digits"] }))

  it.effect("numericAnswer gated by a length limit: nothing", () =>
    probes.assertNoExploits(Reward.all("correct", [numericAnswer(answer), maxLength(40)]), base))

  const capital = { problems: [{ c: "Paris" }], gold: (p: { c: string }) => p.c, prompt: () => "What is the capital of France?" }
  it.effect("exactMatch: nothing", () => probes.assertNoExploits(exactMatch((p: { c: string }) => p.c), capital))
  it.effect("exactMatch with a tag: only padding", () =>
    probes.assertNoExploits(exactMatch((p: { c: string }) => p.c, { tag: "answer" }), { ...capital, format: (a) => `<answer>${a}</answer>`, allow: ["padding"] }))

  // format rewards do not judge the answer: only the empty-tags exploit applies to them
  const formatOnly = probes.exploits.filter((e) => e.name === "empty-tags")
  it.effect("hasTag: empty tags do not count", () =>
    probes.assertNoExploits(hasTag("answer"), { ...base, exploits: formatOnly, threshold: 0.5, format: (a) => `<answer>${a}</answer>` }))
  it.effect("tagSequence: empty tags do not count", () =>
    probes.assertNoExploits(tagSequence(["think", "answer"]), { ...base, exploits: formatOnly, threshold: 0.5, format: (a) => `<think>work</think><answer>${a}</answer>` }))
  it.effect("tagSequence with nonEmpty false and hasTag with nonEmpty false fall for empty tags, as asked", () =>
    Effect.gen(function* () {
      for (const reward of [tagSequence<P>(["think", "answer"], { nonEmpty: false }), hasTag<P>("answer", { nonEmpty: false })]) {
        const report = yield* probes.probe(reward, { ...base, exploits: formatOnly, threshold: 0.5 })
        assert.deepStrictEqual(report.exploited, ["empty-tags"])
      }
    }))
  it.effect("tagSequence nonEmpty: [\"answer\"] allows an empty think block only", () =>
    Effect.gen(function* () {
      const reward = tagSequence<P>(["think", "answer"], { nonEmpty: ["answer"] })
      const report = yield* probes.probe(reward, { ...base, exploits: formatOnly, threshold: 0.5 })
      assert.deepStrictEqual(report.findings, [])
      const ok = yield* probes.probe(reward, { ...base, exploits: [{ name: "empty-think", description: "", completions: () => ["<think></think><answer>5</answer>"] }], threshold: 0.5 })
      assert.strictEqual(ok.findings.length, problems.length)
    }))
})

describe("gyre's envs", () => {
  it.effect("math: only padding, which its 6-token completions cannot reach", () =>
    Effect.gen(function* () {
      yield* probes.assertNoExploits(math.reward, { ...base, prompt: (p) => math.prompt(p), allow: ["padding"] })
      yield* probes.assertNoExploits(math.reward, { ...base, prompt: (p) => math.prompt(p), maxLength: math.sampling?.maxTokens ?? 6 })
    }))
  it.effect("calculator's correct: nothing", () =>
    probes.assertNoExploits(correct, { ...base, gold: calcAnswer, prompt: (p) => calculator.prompt(p) }))
})

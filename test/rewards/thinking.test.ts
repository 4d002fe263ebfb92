/**
 * The `thinking` option every answer and format reward shares: a `\boxed{17}` (or a
 * tagged answer, a match, a JSON object) inside `<think>...</think>` never decides over
 * the final answer after it; a completion that never ends its thinking block gives no
 * answer (the answer rewards' `ModelFault` with `noAnswerPenalty`, the format rewards' 0);
 * `afterThinking`'s laws; markers that cannot be found are refused when the reward is made.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import * as fc from "fast-check"
import { score } from "gyre/testing"
import { afterThinking, exactMatch, mathAnswer, numericAnswer } from "../../rewards/answers.ts"
import { hasTag, jsonObject, matches, tagSequence } from "../../rewards/format.ts"

type P = { readonly gold: number }
const gold = (p: P) => p.gold

/** Thinks of 17 (boxed, tagged, stated), then answers 18 the same way. */
const BOXED = "<think>Maybe \\boxed{17}? No, I missed a term.</think>\nSo the answer is \\boxed{18}."
const TAGGED = "<think>First guess <answer>17</answer>. Wrong.</think>\n<answer>18</answer>"
const PLAIN = "<think>17? no, wait</think>\n18"
const UNCLOSED = "<think>I believe it is \\boxed{17} <answer>17</answer> and then"

const valueOf = <Q>(reward: Parameters<typeof score<Q, never>>[0], problem: Q, completion: string) => score(reward, problem, completion).pipe(Effect.map((s) => s.value))

describe("thinking: the final answer only", () => {
  it.effect("numericAnswer: a box inside the thinking block does not decide over the final box, in every mode", () =>
    Effect.gen(function* () {
      for (const mode of ["boxed", "auto"] as const) {
        const r = numericAnswer(gold, { mode, thinking: true })
        assert.strictEqual(yield* valueOf(r, { gold: 18 }, BOXED), 1, mode)
        assert.strictEqual(yield* valueOf(r, { gold: 17 }, BOXED), 0, mode)
        // without the option the two boxes disagree: a hedge, no answer
        assert.strictEqual(yield* valueOf(numericAnswer(gold, { mode }), { gold: 18 }, BOXED), 0, mode)
      }
      for (const mode of ["tagged", "auto"] as const) assert.strictEqual(yield* valueOf(numericAnswer(gold, { mode, thinking: true }), { gold: 18 }, TAGGED), 1, mode)
      const first = numericAnswer(gold, { mode: "first", thinking: true })
      assert.strictEqual(yield* valueOf(first, { gold: 18 }, PLAIN), 1)
      assert.strictEqual(yield* valueOf(numericAnswer(gold, { mode: "first" }), { gold: 18 }, PLAIN), 0, "without the option the thought's 17 is the first number")
      const unfinished = yield* score(numericAnswer(gold, { mode: "boxed", thinking: true, noAnswerPenalty: -1 }), { gold: 17 }, UNCLOSED)
      assert.strictEqual(unfinished.value, -1)
    }))

  it.effect("exactMatch: the whole final part, or its tag, after the thinking block", () =>
    Effect.gen(function* () {
      const tagged = exactMatch((p: { gold: string }) => p.gold, { tag: "answer", thinking: true })
      assert.strictEqual(yield* valueOf(tagged, { gold: "18" }, TAGGED), 1)
      assert.strictEqual(yield* valueOf(tagged, { gold: "17" }, TAGGED), 0)
      // without the option the two tagged answers differ: a hedge
      assert.strictEqual(yield* valueOf(exactMatch((p: { gold: string }) => p.gold, { tag: "answer" }), { gold: "18" }, TAGGED), 0)
      const whole = exactMatch((p: { gold: string }) => p.gold, { thinking: true })
      assert.strictEqual(yield* valueOf(whole, { gold: "Paris" }, "<think>Lyon? \\boxed{Lyon}</think>\n Paris. "), 1)
      assert.strictEqual(yield* valueOf(whole, { gold: "Lyon" }, "<think>Lyon? \\boxed{Lyon}</think>\n Paris. "), 0)
      const unfinished = yield* score(exactMatch((p: { gold: string }) => p.gold, { tag: "answer", thinking: true, noAnswerPenalty: -0.5 }), { gold: "17" }, UNCLOSED)
      assert.strictEqual(unfinished.value, -0.5)
    }))

  it.effect("mathAnswer: the final box decides", () =>
    Effect.gen(function* () {
      const r = mathAnswer(gold, { thinking: true, noAnswerPenalty: -1 })
      assert.strictEqual(yield* valueOf(r, { gold: 18 }, BOXED), 1)
      assert.strictEqual(yield* valueOf(r, { gold: 17 }, BOXED), 0)
      assert.strictEqual(yield* valueOf(r, { gold: 17 }, UNCLOSED), -1)
      // a template that opens the block in the prompt: no end marker means no answer
      const opened = mathAnswer(gold, { thinking: { end: "</think>", openedByPrompt: true }, noAnswerPenalty: -1 })
      assert.strictEqual(yield* valueOf(opened, { gold: 17 }, "still thinking: \\boxed{17}"), -1)
      assert.strictEqual(yield* valueOf(opened, { gold: 18 }, "\\boxed{17}? no</think> \\boxed{18}"), 1)
    }))

  it.effect("format rewards check the final part; an unfinished thinking block scores 0", () =>
    Effect.gen(function* () {
      const final18 = matches(/\\boxed\{18\}/, { thinking: true })
      const any17 = matches(/\\boxed\{17\}/, { thinking: true })
      assert.strictEqual(yield* valueOf(final18, {}, BOXED), 1)
      assert.strictEqual(yield* valueOf(any17, {}, BOXED), 0)
      assert.strictEqual(yield* valueOf(matches(/\\boxed\{17\}/), {}, BOXED), 1, "without the option the thought matches")
      assert.strictEqual(yield* valueOf(matches(/17/, { thinking: true }), {}, UNCLOSED), 0)
      const answerTag = hasTag("answer", { once: true, thinking: true })
      assert.strictEqual(yield* valueOf(answerTag, {}, TAGGED), 1)
      assert.strictEqual(yield* valueOf(hasTag("answer", { once: true }), {}, TAGGED), 0, "two blocks without the option")
      assert.strictEqual(yield* valueOf(hasTag("answer", { thinking: true }), {}, UNCLOSED), 0)
      assert.strictEqual(yield* valueOf(tagSequence(["answer"], { thinking: true }), {}, TAGGED), 1)
      const json = jsonObject(Schema.Struct({ answer: Schema.Literal(18) }), { thinking: true })
      assert.strictEqual(yield* valueOf(json, {}, "<think>{\"answer\": 17}</think> {\"answer\": 18}"), 1)
      assert.strictEqual(yield* valueOf(jsonObject(Schema.Struct({ answer: Schema.Literal(18) })), {}, "<think>{\"answer\": 17}</think> {\"answer\": 18}"), 0)
    }))

  it("afterThinking: what follows the last end marker, whatever the thinking held", () => {
    const text = fc.string().filter((s) => !s.includes("</think>") && !s.includes("<think>"))
    fc.assert(fc.property(text, text, text, (a, b, final) => {
      assert.strictEqual(afterThinking(`<think>${a}</think>${b}</think>${final}`), final)
      assert.strictEqual(afterThinking(final), final, "no block: the whole completion")
      assert.isUndefined(afterThinking(`${a}<think>${b}`), "opened, never ended")
      assert.isUndefined(afterThinking(final, { end: "</think>", openedByPrompt: true }))
    }))
    assert.strictEqual(afterThinking("plan 17 [/plan] 18", { end: "[/plan]" }), " 18")
    assert.strictEqual(afterThinking("a</reasoning>b</think>c", { end: ["</think>", "</reasoning>"] }), "c")
  })

  it("markers that cannot be found are refused when the reward is made, naming the reward", () => {
    assert.throws(() => numericAnswer(gold, { thinking: { end: [] } }), /numericAnswer: thinking.end must list non-empty markers/)
    assert.throws(() => exactMatch((p: { gold: string }) => p.gold, { thinking: { end: "" } }), /exactMatch: thinking.end must list non-empty markers/)
    assert.throws(() => matches(/x/, { thinking: { end: "</think>", start: [""] } }), /matches: thinking.start must list non-empty markers/)
    assert.throws(() => mathAnswer(gold, { thinking: { end: [""] } }), /mathAnswer correct: thinking.end must list non-empty markers/)
  })
})

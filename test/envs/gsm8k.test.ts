/**
 * envs/gsm8k.ts on its fixture: every row's gold is read from its `####` line, a right
 * boxed answer after a thinking block scores 1 (plus the format reward), a wrong or
 * unboxed one does not, and the prompt renders with Qwen3's chat template.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { score } from "gyre/testing"
import { unreadableGolds } from "gyre/rewards"
import * as Tokenizers from "../../src/tokenizers/index.ts"
import { Tokenizer } from "../../src/services/Tokenizer.ts"
import gsm8k, { FIXTURE, gold, SUFFIX } from "../../envs/gsm8k.ts"
import { fixtureRows, qwenDir } from "./realModels.ts"

const rows = fixtureRows(FIXTURE).map((r) => Schema.decodeUnknownSync(gsm8k.problem)(r))

describe("envs/gsm8k.ts", () => {
  it.effect("the fixture has a few dozen rows in GSM8K's format, each with a readable number as its gold", () =>
    Effect.gen(function* () {
      assert.isAtLeast(rows.length, 30)
      for (const r of rows) assert.match(r.answer, /\n#### [\d,]+$/)
      assert.deepStrictEqual(rows.map(gold).filter((g) => g === undefined || !/^\d+$/.test(g)), [])
      assert.deepStrictEqual(yield* unreadableGolds(rows.map((r) => gold(r)!)), [])
    }))

  it("the gold drops thousands separators and a colon; a solution without #### has none", () => {
    assert.strictEqual(gold({ question: "", answer: "so 1,800 in all.\n#### 1,800" }), "1800")
    assert.strictEqual(gold({ question: "", answer: "#### : 42" }), "42")
    assert.strictEqual(gold({ question: "", answer: "no final line" }), undefined)
  })

  it.effect("a right boxed answer after thinking scores 1.1; a wrong one 0.1; an answer only inside the thinking 0", () =>
    Effect.gen(function* () {
      const p = rows[0]!
      const g = gold(p)!
      const right = yield* score(gsm8k.reward, p, `<think>${Number(g) + 1}? no, let me recount.</think>\nThe total is \\boxed{${g}}.`)
      assert.closeTo(right.value!, 1.1, 1e-9)
      const wrong = yield* score(gsm8k.reward, p, `<think>hmm</think> \\boxed{${Number(g) + 1}}`)
      assert.closeTo(wrong.value!, 0.1, 1e-9)
      const unfinished = yield* score(gsm8k.reward, p, `<think>it is \\boxed{${g}}`)
      assert.strictEqual(unfinished.components["correct"], 0)
    }))

  it.effect("the prompt is a chat turn that Qwen3's template renders, asking for a boxed answer", () =>
    Effect.gen(function* () {
      const tokenizer = yield* Tokenizer
      const text = yield* tokenizer.renderPrompt(gsm8k.prompt(rows[0]!))
      assert.isTrue(text.startsWith("<|im_start|>user\n"), text)
      assert.include(text, rows[0]!.question + SUFFIX)
      assert.isTrue(text.endsWith("<|im_start|>assistant\n"), text)
      assert.isBelow((yield* tokenizer.encode(text)).length, 400)
    }).pipe(Effect.provide(Tokenizers.layer(qwenDir))))
})

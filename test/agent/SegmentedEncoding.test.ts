/**
 * Encoding a conversation piece by piece gives the tokenizer's own encoding of the whole
 * text (Qwen3's tokenizer, conversations rendered by its chat template, and text with
 * special-looking tokens anywhere), and a later request of the episode encodes only the
 * pieces that are new.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fc from "fast-check"
import { encodePieces, Pieces } from "../../src/agent/SegmentedEncoding.ts"
import * as CharTokenizer from "../../src/backends/local/CharTokenizer.ts"
import { Tokenizer, type TokenizerShape } from "../../src/services/Tokenizer.ts"
import * as Tokenizers from "../../src/tokenizers/index.ts"
import { QWEN3_DIR } from "../backends/http/ClientWorkloads.ts"

/** The tokenizer, with every text it is asked to encode recorded. */
const counting = (tokenizer: TokenizerShape) => {
  const asked: Array<string> = []
  return { asked, tokenizer: { ...tokenizer, encode: (text: string) => (asked.push(text), tokenizer.encode(text)) } satisfies TokenizerShape }
}

const word = fc.constantFrom("hello", " world", "\n", "  ", "<|im_end|>", "<|im_start|>", "<|nope|>", "<tool_call>", "{\"a\": 1}", "é", "42", "\t", "user", "assistant\n")

describe("SegmentedEncoding.encodePieces", () => {
  it.effect("equals encoding the whole text, for any text of words and special tokens (Qwen3)", () =>
    Effect.gen(function* () {
      const tokenizer = yield* Tokenizer
      const pieces = new Pieces()
      const texts = fc.sample(fc.array(word, { maxLength: 30 }).map((ws) => ws.join("")), { numRuns: 200, seed: 11 })
      for (const text of texts) assert.deepStrictEqual(yield* encodePieces(tokenizer, pieces, text), yield* tokenizer.encode(text), JSON.stringify(text))
    }).pipe(Effect.provide(Tokenizers.layer(QWEN3_DIR))))

  it.effect("a conversation that grows encodes only its new pieces, and equals the whole each time", () =>
    Effect.gen(function* () {
      const base = yield* Tokenizer
      const { asked, tokenizer } = counting(base)
      const pieces = new Pieces()
      const messages: Array<{ role: "user" | "assistant"; content: string }> = [{ role: "user", content: "What is 2 + 2? Think it through first." }]
      for (let turn = 0; turn < 4; turn++) {
        const text = yield* base.renderPrompt(messages)
        asked.length = 0
        assert.deepStrictEqual(yield* encodePieces(tokenizer, pieces, text), yield* base.encode(text))
        // the first request encodes its boundary checks and every piece; a later one its new messages only
        if (turn > 0) assert.isBelow(asked.join("").length, `assistant\nanswer ${turn - 1}user\nand then ${turn}?assistant\n`.length + 8, JSON.stringify(asked))
        messages.push({ role: "assistant", content: `answer ${turn}` }, { role: "user", content: `and then ${turn}?` })
      }
    }).pipe(Effect.provide(Tokenizers.layer(QWEN3_DIR))))

  it("keeps the most recently used pieces, up to its capacity", () => {
    const pieces = new Pieces(2)
    pieces.set("a", [1])
    pieces.set("b", [2])
    assert.deepStrictEqual(pieces.get("a"), [1])
    pieces.set("c", [3])
    assert.strictEqual(pieces.size, 2)
    assert.isUndefined(pieces.get("b"))
    assert.deepStrictEqual([pieces.get("a"), pieces.get("c")], [[1], [3]])
  })

  it.effect("a tokenizer without special tokens encodes the text whole", () =>
    Effect.gen(function* () {
      const { asked, tokenizer } = counting(CharTokenizer.make())
      const text = "ab<|x|>cd"
      const ids = yield* encodePieces(tokenizer, new Pieces(), text).pipe(Effect.orElseSucceed(() => [] as Array<number>))
      const whole = yield* CharTokenizer.make().encode(text).pipe(Effect.orElseSucceed(() => [] as Array<number>))
      assert.deepStrictEqual(ids, whole)
      assert.include(asked, text)
    }))
})

/**
 * The template format keeps its recent renders of opening requests: one sent again (every
 * episode of a group sends the same first request) is not rendered again, and gets the
 * same text; any change to its messages or tools renders anew, and a request holding a
 * reply is rendered each time.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { template } from "../../src/agent/ChatFormat.ts"
import type { ChatMessage, FunctionTool } from "../../src/agent/Protocol.ts"
import { Tokenizer, type TokenizerShape } from "../../src/services/Tokenizer.ts"
import * as Tokenizers from "../../src/tokenizers/index.ts"
import { QWEN3_DIR } from "../backends/http/ClientWorkloads.ts"

/** The tokenizer, with each chat render it is asked for counted. */
const counting = (tokenizer: TokenizerShape) => {
  const calls = { renders: 0 }
  const renderChat: TokenizerShape["renderChat"] = (messages, options) => {
    calls.renders++
    return tokenizer.renderChat!(messages, options)
  }
  return { calls, tokenizer: { ...tokenizer, renderChat } satisfies TokenizerShape }
}

const tools: ReadonlyArray<FunctionTool> = [{ type: "function", function: { name: "calc", description: "a+b", parameters: { type: "object", properties: { expression: { type: "string" } } } } }]
const first: ReadonlyArray<ChatMessage> = [{ role: "user", content: "What is 121+340?" }]
const second: ReadonlyArray<ChatMessage> = [
  ...first,
  { role: "assistant", content: "", tool_calls: [{ id: "call_1", type: "function", function: { name: "calc", arguments: "{\"expression\":\"121+340\"}" } }] },
  { role: "tool", tool_call_id: "call_1", content: "461" },
]

describe("ChatFormat.template", () => {
  it.effect("renders an opening request sent again once, with the same text; another conversation, other tools or a reply anew", () =>
    Effect.gen(function* () {
      const { calls, tokenizer } = counting(yield* Tokenizer)
      const format = template(tokenizer)
      const text = yield* format.render(first, tools)
      assert.strictEqual(calls.renders, 1)
      for (let i = 0; i < 15; i++) assert.strictEqual(yield* format.render(first.map((m) => ({ ...m })), tools), text)
      assert.strictEqual(calls.renders, 1)
      const longer = yield* format.render(second, tools)
      assert.strictEqual(calls.renders, 2)
      assert.isTrue(longer.startsWith(text.slice(0, text.lastIndexOf("<|im_start|>assistant"))))
      // a request with a reply in it is the episode's own: not looked for, rendered again
      assert.strictEqual(yield* format.render(second, tools), longer)
      assert.strictEqual(calls.renders, 3)
      const withoutTools = yield* format.render(first, [])
      assert.strictEqual(calls.renders, 4)
      assert.notStrictEqual(withoutTools, text)
      // what is kept is what the template gives
      assert.strictEqual(text, yield* (yield* Tokenizer).renderChat!(first, { tools, addGenerationPrompt: true }))
    }).pipe(Effect.provide(Tokenizers.layer(QWEN3_DIR))))

  it.effect("keeps no failed render: a tokenizer without a template fails each time", () =>
    Effect.gen(function* () {
      const { renderChat: _, ...plain } = yield* Tokenizer
      const format = template(plain)
      const a = yield* Effect.flip(format.render(first, []))
      const b = yield* Effect.flip(format.render(first, []))
      assert.strictEqual(a._tag, "TokenizeError")
      assert.strictEqual(b._tag, "TokenizeError")
    }).pipe(Effect.provide(Tokenizers.layer(QWEN3_DIR))))
})

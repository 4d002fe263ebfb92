/**
 * How many times a request's conversation is rendered (Qwen3's chat template, a counting
 * tokenizer): a request that re-sends the reply as the policy wrote it is rendered once and
 * its input is the template's own rendering, which goes on from the sampled tokens; one
 * that re-sends it changed is rendered twice (the second finds where the new messages
 * start) and goes on from the sampled tokens all the same.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { template } from "../../src/agent/ChatFormat.ts"
import type { ChatMessage, FunctionTool } from "../../src/agent/Protocol.ts"
import { type Completion, inputFor } from "../../src/agent/Transcript.ts"
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

const tools: ReadonlyArray<FunctionTool> = [{ type: "function", function: { name: "add", description: "a + b", parameters: { type: "object", properties: { a: { type: "integer" }, b: { type: "integer" } } } } }]
const user: ReadonlyArray<ChatMessage> = [{ role: "user", content: "What is 2+3?" }]
const CALL = `<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>`

const withSecondRequest = (resent: ChatMessage) =>
  Effect.gen(function* () {
    const { calls, tokenizer } = counting(yield* Tokenizer)
    const format = template(tokenizer)
    const first = yield* inputFor(format, tokenizer, [], user, tools)
    const sampled = [...(yield* tokenizer.encode(CALL)), tokenizer.eos]
    const reply = format.parse(CALL, tools)
    const completion: Completion = { input: first.tokens, sampled, logprobs: sampled.map(() => -1), stopReason: "stop", text: CALL, version: 0, chat: { messages: user, reply }, diverged: 0 }
    const before = calls.renders
    const messages: ReadonlyArray<ChatMessage> = [...user, resent, { role: "tool", tool_call_id: "call_0", content: "5" }]
    const second = yield* inputFor(format, tokenizer, [completion], messages, tools)
    const renders = calls.renders - before
    const whole = yield* tokenizer.encode(yield* tokenizer.renderChat!(
      [...user, { role: "assistant", content: "", tool_calls: [{ type: "function", function: { name: "add", arguments: { a: 2, b: 3 } } }] }, { role: "tool", content: "5" }],
      { tools, addGenerationPrompt: true },
    ))
    return { renders, second, head: [...first.tokens, ...sampled], whole }
  }).pipe(Effect.provide(Tokenizers.layer(QWEN3_DIR)))

describe("Transcript.inputFor", () => {
  it.effect("a reply re-sent as it was written: one render, the template's own tokens, which go on from the sampled ones", () =>
    Effect.gen(function* () {
      const resent: ChatMessage = { role: "assistant", content: "", tool_calls: [{ id: "call_0", type: "function", function: { name: "add", arguments: "{\"a\":2,\"b\":3}" } }] }
      const { renders, second, head, whole } = yield* withSecondRequest(resent)
      assert.strictEqual(renders, 1)
      assert.deepStrictEqual([...second.tokens], whole)
      assert.deepStrictEqual(second.tokens.slice(0, head.length), head)
      assert.strictEqual(second.diverged, 0)
    }))

  it.effect("a reply re-sent changed (other whitespace): a second render finds the new messages, after the sampled tokens as they were", () =>
    Effect.gen(function* () {
      const resent: ChatMessage = { role: "assistant", content: "  ", tool_calls: [{ id: "call_0", type: "function", function: { name: "add", arguments: "{ \"b\": 3,  \"a\": 2 }" } }] }
      const { renders, second, head } = yield* withSecondRequest(resent)
      assert.strictEqual(renders, 2)
      assert.deepStrictEqual(second.tokens.slice(0, head.length), head)
      assert.isAbove(second.diverged, 0)
    }))
})

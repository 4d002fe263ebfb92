/**
 * Competition math (Hendrycks MATH): algebra to precalculus, levels 1 to 5, with LaTeX
 * answers (`\frac{3}{2}`, `2\sqrt{3}`, `(2,3)`, matrices), for real chat models.
 *
 *   user       "Solve for $x$: $3x - 7 = 11$. Write your answer in \boxed{} format."
 *   assistant  "<think>...</think> ... so $x = \boxed{6}$."
 *
 * Rows are the Hub's `DigitalLearningGmbH/MATH-lighteval` (the 7,500 training problems of
 * MATH in one config): `problem`, `solution` (its last `\boxed{}` is the gold), `level`
 * ("Level 3"), `type` ("Algebra"); an `answer` field, as MATH-500's rows have, is used
 * when present. The reward is `mathAnswer` (Math-Verify's grading: numbers, fractions,
 * expressions, intervals, tuples, matrices), after the thinking block, plus a small
 * format reward for a `\boxed{}` answer.
 *
 * Data: the Hub by default; `HF_HUB_OFFLINE=1` reads the cache, else the fixture
 * `envs/data/competition-math.jsonl` (32 problems written for gyre in MATH's format,
 * with MATH-500's `answer` field); `GYRE_FIXTURES=1` always reads the fixture.
 *
 * On Tinker: `gyre run competition-math --backend tinker --model Qwen/Qwen3-8B` (see docs/real-models.md).
 */
import { Schema } from "effect"
import { Env, Reward } from "gyre"
import { mathAnswer, matches } from "gyre/rewards"
import { fixture } from "./data/fixtures.ts"

const Problem = Schema.Struct({
  problem: Schema.String,
  solution: Schema.String,
  answer: Schema.optional(Schema.String),
  level: Schema.optional(Schema.Union([Schema.String, Schema.Number])),
  type: Schema.optional(Schema.String),
})
type Problem = typeof Problem.Type

/** The fixture read offline: MATH's row format, problems written for gyre. */
export const FIXTURE = fixture("competition-math.jsonl")

/** As tinker-cookbook's MATH recipe asks. */
export const SUFFIX = " Write your answer in \\boxed{} format."

/** The content of the last `\boxed{...}` in a text (braces balanced), or undefined. */
export const lastBoxed = (text: string): string | undefined => {
  const at = text.lastIndexOf("\\boxed")
  if (at < 0) return undefined
  const open = text.indexOf("{", at)
  if (open < 0) return undefined
  let depth = 0
  for (let i = open; i < text.length; i++) {
    if (text[i] === "{") depth++
    else if (text[i] === "}" && --depth === 0) return text.slice(open + 1, i)
  }
  return undefined
}

/** The gold: the row's `answer` when it has one (MATH-500), else the solution's last boxed answer. */
export const gold = (p: Problem): string | undefined => p.answer ?? lastBoxed(p.solution)

export default Env.make({
  name: "competition-math",
  problem: Problem,
  source: process.env["GYRE_FIXTURES"] === "1"
    ? Env.jsonl<Problem>(FIXTURE)
    : Env.huggingface<Problem>("DigitalLearningGmbH/MATH-lighteval", { config: "default", split: "train", fixture: FIXTURE }),
  prompt: (p) => [{ role: "user", content: p.problem + SUFFIX }],
  reward: Reward.weighted({
    correct: [mathAnswer(gold, { thinking: true }), 1],
    boxed: [matches(/\\boxed\{/, { name: "boxed" }), 0.1],
  }),
  sampling: { maxTokens: 2048, temperature: 1 },
  eval: { heldOut: 0.05, size: 500 },
  defaults: { groups: 64, groupSize: 16, learningRate: 2e-5, steps: 200, evalEvery: 20, saveEvery: 20 },
})

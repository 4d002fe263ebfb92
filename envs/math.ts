/**
 * Arithmetic: "What is 7 times 8?" -> " 56".
 *
 * Difficulty d draws operands with d digits (difficulty 1: 0..9, 300 facts, the default,
 * which a tiny model can learn; difficulty 2: 10..99, "What is 17 times 24?").
 *
 * Held out: 20% of the problem space by hash (`eval.heldOut`). At difficulty 1 that is
 * 75 of the 300 facts (27 plus, 27 minus, 21 times): the eval set is those 75, each
 * once, however large `eval.size` is; training, pretraining and checkpoint selection
 * use only the other 225. (At 10% the eval split was 36 facts, 8 of them plus: too few
 * for a held-out score to mean much.)
 */
import { Schema } from "effect"
import { Env, Reward } from "gyre"
import { answers, maxLength, numericAnswer } from "gyre/rewards"

const Op = Schema.Literals(["plus", "minus", "times"])
const Problem = Schema.Struct({ a: Schema.Int, b: Schema.Int, op: Op })
type Problem = typeof Problem.Type

export const answer = ({ a, b, op }: Problem): number => (op === "plus" ? a + b : op === "minus" ? a - b : a * b)

/** A natural wrong answer, for `--dpo`: the result of the next operation on the same operands (or one off, when that is right too). */
export const wrongAnswer = (p: Problem): number => {
  const next = { plus: "minus", minus: "times", times: "plus" } as const
  const other = answer({ ...p, op: next[p.op] })
  return other === answer(p) ? other + 1 : other
}

export default Env.make({
  name: "math",
  problem: Problem,
  source: Env.seeded(({ random, difficulty }) => {
    const lo = difficulty <= 1 ? 0 : 10 ** (difficulty - 1)
    const hi = 10 ** difficulty - 1
    return { a: random.int(lo, hi), b: random.int(lo, hi), op: random.pick(["plus", "minus", "times"] as const) }
  }),
  prompt: ({ a, b, op }) => `What is ${a} ${op} ${b}?`,
  reference: (p) => ` ${answer(p)}`,
  // --dpo: the right answer over a natural wrong one
  preference: (p) => ({ chosen: ` ${answer(p)}`, rejected: ` ${wrongAnswer(p)}` }),
  reward: Reward.weighted({
    correct: [numericAnswer(answer), 1],
    brief: [maxLength(8), 0],
  }),
  // majority vote (gyre eval's maj@k) counts " 56" and "56." as one answer: the number read as the reward reads it
  answer: (completion) => String(answers.extractAnswer(completion) ?? completion.trim()),
  sampling: { maxTokens: 6, temperature: 1 },
  eval: { heldOut: 0.2, size: 300 },
})

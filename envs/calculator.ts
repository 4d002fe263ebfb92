/**
 * Arithmetic on two-digit operands with a calculator tool: "What is 47 plus 38?".
 *
 * 10..99 x 10..99 x {plus, minus, times} is 24,300 problems: far too many to memorize, so
 * a policy that scores on held-out problems has learned a skill. The skill is tool use:
 *
 *   turn 1 (sampled)      "[47+38]"     a call of the calculator (stops at "]")
 *   observation (env)     "=85;"        the tool's result, never trained
 *   turn 2 (sampled)      " 85"         the answer, then end of sequence
 *
 * or, in one turn, a direct guess " 62" (the base model guesses on most problems).
 */
import { Schema } from "effect"
import { Env, Reward, Tool } from "gyre"
import { shippedModel } from "gyre/embedded"

const Op = Schema.Literals(["plus", "minus", "times"])
const Problem = Schema.Struct({ a: Schema.Int, b: Schema.Int, op: Op })
export type Problem = typeof Problem.Type

/** The operator as the calculator writes it. */
export const SYMBOL = { plus: "+", minus: "-", times: "*" } as const

export const answer = ({ a, b, op }: Problem): number => (op === "plus" ? a + b : op === "minus" ? a - b : a * b)

/** Text of a correct tool call, the observation that answers it, and the final answer. */
export const callText = (p: Problem) => `[${p.a}${SYMBOL[p.op]}${p.b}]`
export const observationText = (result: number) => `=${result};`
export const answerText = (p: Problem) => ` ${answer(p)}`

/** The calculator: "[47+38]" -> 85. */
export const calc = Tool.make({
  name: "calc",
  description: "a op b for integers; op is +, - or *",
  args: Schema.Struct({ a: Schema.Int, op: Schema.Literals(["+", "-", "*"]), b: Schema.Int }),
  parseArgs: (text) => {
    const m = /^(\d+)([-+*])(\d+)$/.exec(text)
    return m === null ? text : { a: Number(m[1]), op: m[2], b: Number(m[3]) }
  },
  run: ({ a, op, b }) => (op === "+" ? a + b : op === "-" ? a - b : a * b),
})

/** 1 when the last turn is just the right number (a call left unanswered scores 0). */
export const correct = Reward.make<Problem>("correct", (r) => (/^ ?-?\d+$/.test(r.completion) && Number(r.completion) === answer(r.problem) ? 1 : 0))

export default Env.make({
  name: "calculator",
  problem: Problem,
  source: Env.seeded(({ random }) => ({ a: random.int(10, 99), b: random.int(10, 99), op: random.pick(["plus", "minus", "times"] as const) })),
  prompt: ({ a, b, op }) => `What is ${a} ${op} ${b}?`,
  episode: Tool.episode({ tools: [calc], syntax: Tool.brackets, onParseError: "end", limits: { maxTurns: 3, maxToolCalls: 2 } }),
  reward: Reward.weighted({ correct: [correct, 1] }),
  sampling: { maxTokens: 8, temperature: 1 },
  eval: { heldOut: 0.1, size: 400 },
  // pretrained on this format by scripts/pretrain-calculator.ts: calls the tool on ~1/4 of problems
  baseModel: shippedModel("calculator"),
  // RL learns to call the tool within ~100 steps; 300 leave room and end in minutes
  defaults: { steps: 300, evalEvery: 100, saveEvery: 100 },
})

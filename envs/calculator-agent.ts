/**
 * The calculator task as an AI SDK agent: `generateText` with a `calc` tool and a step
 * limit, through `@ai-sdk/openai-compatible` pointed at the run's endpoint. The agent is
 * ordinary AI SDK code; gyre samples every step from the policy and trains the tokens it
 * wrote. On the embedded calculator model the layout is the native env's
 * (`envs/calculator.ts`): the model writes `[47+38]`, the tool's result comes back as
 * `=85;`, and the model answers ` 85`.
 */
import { createOpenAICompatible } from "@ai-sdk/openai-compatible"
import { generateText, stepCountIs, tool } from "ai"
import { Agent, Reward } from "gyre"
import { shippedModel } from "gyre/embedded"
import { z } from "zod"
import calculator, { answer, type Problem } from "./calculator.ts"

/** "47+38" -> 85; anything else is an error the model sees. */
export const evaluate = (expression: string): number | string => {
  const m = /^(\d+)([-+*])(\d+)$/.exec(expression.trim())
  if (m === null) return "error: write a op b"
  const [a, b] = [Number(m[1]), Number(m[3])]
  return m[2] === "+" ? a + b : m[2] === "-" ? a - b : a * b
}

const calc = tool({
  description: "a op b for integers; op is +, - or *",
  inputSchema: z.object({ expression: z.string().describe("like 47+38") }),
  execute: async ({ expression }) => evaluate(expression),
})

/** 1 when the agent's final text is just the right number. */
export const correct = Reward.make<Problem>("correct", (r) => (/^ ?-?\d+$/.test(r.completion) && Number(r.completion) === answer(r.problem) ? 1 : 0))

export default Agent.env({
  name: "calculator-agent",
  problem: calculator.problem,
  source: calculator.source,
  prompt: calculator.prompt,
  run: async ({ problem, baseURL, apiKey, model, signal }) => {
    const provider = createOpenAICompatible({ name: "gyre", baseURL, apiKey })
    const { text } = await generateText({
      model: provider(model),
      prompt: calculator.prompt(problem) as string,
      tools: { calc },
      stopWhen: stepCountIs(3),
      maxRetries: 0,
      abortSignal: signal,
    })
    return text
  },
  limits: { maxTurns: 3 },
  reward: Reward.weighted({ correct: [correct, 1] }),
  sampling: { maxTokens: 8, temperature: 1 },
  eval: { heldOut: 0.1, size: 400 },
  baseModel: shippedModel("calculator"),
  defaults: { steps: 300, evalEvery: 100, saveEvery: 100 },
})

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
import { Agent } from "gyre"
import { z } from "zod"
import calculator from "./calculator.ts"

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

/**
 * What the agent envs take from envs/calculator.ts as it is: its problems and prompt, its
 * reward (the agent's final text is the completion it scores), sampling, held-out split,
 * base model and run defaults.
 */
export const fromCalculator = {
  problem: calculator.problem,
  source: calculator.source,
  prompt: calculator.prompt,
  reward: calculator.reward,
  sampling: calculator.sampling!,
  eval: calculator.eval!,
  baseModel: calculator.baseModel!,
  defaults: calculator.defaults!,
}

export default Agent.env({
  name: "calculator-agent",
  ...fromCalculator,
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
})

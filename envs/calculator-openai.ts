/**
 * The calculator task as a plain `openai` client loop with a function tool: ask, run the
 * tool calls the model makes, send their results back, and stop at the first answer
 * without a call (or after three completions). The same task as `envs/calculator.ts` and
 * `envs/calculator-agent.ts`, written the way an OpenAI-client agent is.
 */
import { Agent } from "gyre"
import OpenAI from "openai"
import type { ChatCompletionMessageParam, ChatCompletionTool } from "openai/resources/chat/completions"
import { evaluate, fromCalculator } from "./calculator-agent.ts"
import calculator from "./calculator.ts"

const tools: Array<ChatCompletionTool> = [{
  type: "function",
  function: {
    name: "calc",
    description: "a op b for integers; op is +, - or *",
    parameters: { type: "object", properties: { expression: { type: "string", description: "like 47+38" } }, required: ["expression"] },
  },
}]

/** The tool's answer to one call: its result, or what was wrong with the call. */
const runCall = (args: string): string => {
  try {
    const { expression } = JSON.parse(args) as { expression?: unknown }
    return typeof expression === "string" ? String(evaluate(expression)) : "error: give an expression"
  } catch {
    return "error: the arguments are not JSON"
  }
}

export default Agent.env({
  name: "calculator-openai",
  ...fromCalculator,
  run: async ({ problem, baseURL, apiKey, model, signal }) => {
    const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 })
    const messages: Array<ChatCompletionMessageParam> = [{ role: "user", content: calculator.prompt(problem) as string }]
    for (let turn = 0; turn < 3; turn++) {
      const response = await client.chat.completions.create({ model, messages, tools }, { signal })
      const message = response.choices[0]!.message
      messages.push(message)
      const calls = (message.tool_calls ?? []).flatMap((c) => (c.type === "function" ? [c] : []))
      if (calls.length === 0) return message.content ?? ""
      for (const call of calls) messages.push({ role: "tool", tool_call_id: call.id, content: runCall(call.function.arguments) })
    }
    return ""
  },
  limits: { maxTurns: 3 },
})

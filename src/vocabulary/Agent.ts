/**
 * Agent envs: train the agent you already have. An agent env's episode is an async
 * function (an AI SDK `generateText` loop, an `openai` client loop, any OpenAI-compatible
 * client) given the run's endpoint: its base URL, a key made for this episode and the
 * model name. Every completion it asks for is sampled from the policy and recorded as
 * tokens; what the function returns is the completion the env's reward scores, with the
 * episode's turns (what the policy wrote, and what the agent sent between) as `turns`.
 *
 * - The Datums are built from the recorded tokens, never by re-tokenizing the agent's
 *   messages (see `agent/Transcript.ts`).
 * - An agent that throws is masked (stop reason `infra_failed`, its message kept in
 *   `rollouts.jsonl`): catch what the policy caused and return what the reward should see.
 * - An agent that never called the endpoint is masked too: it has no tokens to train; one
 *   whose every request was refused is masked with the refusal's message.
 * - A request may set `temperature`, `top_p` or `top_k` only to the run's own value (or
 *   leave them out): another is refused with a 400 naming both, since the run trains what
 *   it samples as the policy's own.
 * - `limits.timeout` aborts the function's `signal`; `limits.maxTurns` caps its completions
 *   (the next request is refused with code `max_turns`, and the episode is scored as it stands).
 *
 * @example
 * export default Agent.env({
 *   name: "calculator-agent", problem: Problem, source,
 *   run: async ({ problem, baseURL, apiKey, model, signal }) => {
 *     const provider = createOpenAICompatible({ name: "gyre", baseURL, apiKey })
 *     const { text } = await generateText({ model: provider(model), prompt: question(problem), tools, abortSignal: signal })
 *     return text
 *   },
 *   reward: correct,
 * })
 * @since 0.1.0
 */
import { type AgentContext, type Agent, DEFAULT_LIMITS, type Limits } from "../agent/Spec.ts"
import type { EnvInput, Env } from "../env/Definition.ts"
import { make as makeEnv } from "../env/Definition.ts"
import type { Prompt } from "../services/Tokenizer.ts"

export { DEFAULT_LIMITS } from "../agent/Spec.ts"
export type { Agent, AgentContext, Limits } from "../agent/Spec.ts"

/**
 * What `Agent.env` reads: an env definition without `episode` (the agent is the episode),
 * whose `prompt` is optional (shown in `rollouts.jsonl`; default the problem as JSON).
 * @since 0.1.0 @category models
 */
export type AgentEnvInput<P, RR, ROut> = Omit<EnvInput<P, RR, never, ROut>, "prompt" | "episode"> & {
  /** plays one episode; what it returns (text, or a value written as JSON) is the completion the reward scores */
  readonly run: (context: AgentContext<P>) => unknown
  /** completions per episode and its wall-clock budget (defaults 8 and 5 minutes) */
  readonly limits?: Partial<Limits>
  /** shown in `rollouts.jsonl` (default: the problem as JSON) */
  readonly prompt?: (problem: P) => Prompt
}

/**
 * Defines an agent env (see the module's comment). Checks the definition at once, as
 * `Env.make` does.
 * @since 0.1.0 @category constructors
 */
export const env = <P, RR = never, ROut = never>(spec: AgentEnvInput<P, RR, ROut>): Env<P> => {
  if (typeof spec.run !== "function") throw new TypeError(`Agent.env(${JSON.stringify(spec.name)}): run must be an async function from the episode's context to what the reward scores`)
  const limits = { ...DEFAULT_LIMITS, ...spec.limits }
  if (!Number.isInteger(limits.maxTurns) || limits.maxTurns < 1) throw new TypeError(`Agent.env(${JSON.stringify(spec.name)}): limits.maxTurns must be a positive integer, got ${limits.maxTurns}`)
  const { run, limits: _limits, ...rest } = spec
  const agent: Agent<P> = { run, limits }
  return makeEnv({ prompt: (p: P) => JSON.stringify(p), ...rest, agent } as never)
}

/** What the reward scores of an agent's result: text as it is, anything else as JSON. @since 0.1.0 @category combinators */
export const outputText = (value: unknown): string => {
  if (typeof value === "string") return value
  if (value === undefined || value === null) return ""
  try {
    return JSON.stringify(value) ?? String(value)
  } catch {
    return String(value)
  }
}

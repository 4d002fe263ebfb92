/**
 * The OpenAI-compatible request bodies the agent endpoint reads (`/v1/chat/completions`,
 * `/v1/completions`), as Schemas, and the fields it refuses by name. Fields not listed
 * here and not refused (`user`, `metadata`, `store`, ...) are ignored.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"
import type { SamplingParams } from "../contract/Contract.ts"

const TextPart = Schema.Struct({ type: Schema.Literal("text"), text: Schema.String })

/** A message's content: text, or text parts (images and audio are refused). @since 0.1.0 @category models */
export const Content = Schema.Union([Schema.String, Schema.Array(TextPart)])
export type Content = typeof Content.Type

/** A function call the assistant made: `arguments` is JSON text. @since 0.1.0 @category models */
export const ToolCall = Schema.Struct({
  id: Schema.String,
  type: Schema.optional(Schema.Literal("function")),
  function: Schema.Struct({ name: Schema.String, arguments: Schema.String }),
})
export type ToolCall = typeof ToolCall.Type

/** One chat message, by role. @since 0.1.0 @category models */
export const ChatMessage = Schema.Union([
  Schema.Struct({ role: Schema.Literals(["system", "developer", "user"]), content: Content }),
  Schema.Struct({
    role: Schema.Literal("assistant"),
    content: Schema.optional(Schema.NullOr(Content)),
    tool_calls: Schema.optional(Schema.NullOr(Schema.Array(ToolCall))),
  }),
  Schema.Struct({ role: Schema.Literal("tool"), tool_call_id: Schema.String, content: Content }),
])
export type ChatMessage = typeof ChatMessage.Type

/** A function tool the agent offers the model: its parameters are a JSON Schema. @since 0.1.0 @category models */
export const FunctionTool = Schema.Struct({
  type: Schema.Literal("function"),
  function: Schema.Struct({
    name: Schema.String,
    description: Schema.optional(Schema.String),
    parameters: Schema.optional(Schema.Record(Schema.String, Schema.Unknown)),
    strict: Schema.optional(Schema.NullOr(Schema.Boolean)),
  }),
})
export type FunctionTool = typeof FunctionTool.Type

const Optional = <S extends Schema.Top>(s: S) => Schema.optional(Schema.NullOr(s))
const Probability = Schema.Finite.check(Schema.isBetween({ minimum: 0, maximum: 1 }))

/** The sampling fields both endpoints read. */
const SamplingFields = {
  model: Schema.String,
  temperature: Optional(Schema.Finite.check(Schema.isBetween({ minimum: 0, maximum: 2 }))),
  top_p: Optional(Probability),
  top_k: Optional(Schema.Int),
  max_tokens: Optional(Schema.Int.check(Schema.isGreaterThanOrEqualTo(1))),
  stop: Optional(Schema.Union([Schema.String, Schema.Array(Schema.String)])),
  n: Optional(Schema.Int.check(Schema.isGreaterThanOrEqualTo(1))),
  seed: Optional(Schema.Int),
  stream: Optional(Schema.Boolean),
  stream_options: Optional(Schema.Struct({ include_usage: Schema.optional(Schema.Boolean) })),
}

/** `POST /v1/chat/completions`. @since 0.1.0 @category models */
export const ChatRequest = Schema.Struct({
  ...SamplingFields,
  messages: Schema.Array(ChatMessage).check(Schema.isMinLength(1)),
  tools: Optional(Schema.Array(FunctionTool)),
  tool_choice: Optional(Schema.Union([
    Schema.Literals(["auto", "none", "required"]),
    Schema.Struct({ type: Schema.Literal("function"), function: Schema.Struct({ name: Schema.String }) }),
  ])),
  parallel_tool_calls: Optional(Schema.Boolean),
  max_completion_tokens: Optional(Schema.Int.check(Schema.isGreaterThanOrEqualTo(1))),
  logprobs: Optional(Schema.Boolean),
  top_logprobs: Optional(Schema.Int),
})
export type ChatRequest = typeof ChatRequest.Type

/** `POST /v1/completions`: a text prompt, no chat template. @since 0.1.0 @category models */
export const CompletionRequest = Schema.Struct({
  ...SamplingFields,
  prompt: Schema.Union([Schema.String, Schema.Array(Schema.String).check(Schema.isMinLength(1), Schema.isMaxLength(1))]),
  logprobs: Optional(Schema.Int),
  echo: Optional(Schema.Boolean),
})
export type CompletionRequest = typeof CompletionRequest.Type

/**
 * Why a field is refused when set to anything but its neutral value: sampling here is the
 * policy's own distribution, one path per episode, trained token by token.
 */
const REFUSED: ReadonlyArray<{ readonly field: string; readonly neutral: (v: unknown) => boolean; readonly why: string }> = [
  { field: "n", neutral: (v) => v === 1, why: "an episode is one path (the run samples the group): send n = 1 or leave it out" },
  { field: "top_logprobs", neutral: (v) => v === 0, why: "only the sampled token's log-prob is kept: leave top_logprobs out" },
  { field: "logit_bias", neutral: (v) => typeof v === "object" && v !== null && Object.keys(v).length === 0, why: "a bias would train tokens the policy did not choose: leave logit_bias out" },
  { field: "presence_penalty", neutral: (v) => v === 0, why: "penalties change the distribution the policy is trained on: leave presence_penalty out" },
  { field: "frequency_penalty", neutral: (v) => v === 0, why: "penalties change the distribution the policy is trained on: leave frequency_penalty out" },
  { field: "repetition_penalty", neutral: (v) => v === 1, why: "this run samples with no repetition penalty (1), and a penalty changes the distribution the policy is trained on: leave repetition_penalty out or send 1" },
  { field: "min_p", neutral: (v) => v === 0, why: "this run samples with no min_p (0), and a cut distribution would be trained as the policy's own: leave min_p out or send 0" },
  { field: "response_format", neutral: (v) => (v as { type?: unknown })?.type === "text", why: "constrained decoding is not served: ask for JSON in the prompt and parse it in the agent" },
  { field: "tool_choice", neutral: (v) => v === "auto" || v === "none", why: "sampling cannot force a tool call: use tool_choice auto (or none)" },
  { field: "functions", neutral: () => false, why: "the legacy functions field is not served: give tools" },
  { field: "function_call", neutral: () => false, why: "the legacy function_call field is not served: give tools and tool_choice" },
  { field: "audio", neutral: () => false, why: "audio is not served" },
  { field: "modalities", neutral: (v) => Array.isArray(v) && v.every((m) => m === "text"), why: "only text is served" },
  { field: "prediction", neutral: () => false, why: "predicted outputs are not served" },
  { field: "echo", neutral: (v) => v === false, why: "echo is not served: the agent has the prompt it sent" },
  { field: "suffix", neutral: () => false, why: "insertion (suffix) is not served" },
  { field: "best_of", neutral: (v) => v === 1, why: "best_of samples paths the episode would not train: leave it out" },
]

/**
 * The first field the body sets that the endpoint refuses, with why and what to do;
 * `undefined` when there is none. Fields set to `null` count as left out.
 * @since 0.1.0 @category validation
 */
export const refusedField = (body: unknown): string | undefined => {
  if (typeof body !== "object" || body === null) return undefined
  for (const { field, neutral, why } of REFUSED) {
    const value = (body as Record<string, unknown>)[field]
    if (value !== undefined && value !== null && !neutral(value)) return `${field} ${JSON.stringify(value)?.slice(0, 80)} is refused: ${why}`
  }
  return undefined
}

/** The sampling a request may set only to the run's own value: what the run samples with, as the request names it. */
const runValues = (run: SamplingParams) => [
  { field: "temperature", flag: "--temperature (--eval-temperature when evaluating)", run: run.temperature, same: (v: number) => v === run.temperature },
  { field: "top_p", flag: "--top-p", run: run.topP ?? 1, same: (v: number) => v === (run.topP ?? 1) },
  // top_k 0 and -1 both mean no top_k (OpenAI-compatible servers differ)
  { field: "top_k", flag: "--top-k", run: run.topK ?? 0, same: (v: number) => ((run.topK ?? 0) === 0 ? v <= 0 : v === run.topK) },
] as const

/**
 * The first sampling setting the request gives that differs from the run's, with why it
 * is refused and what to send; `undefined` when there is none. The run trains every
 * sampled token on the log-prob the sampler reports: a reply sampled at another
 * temperature (or cut by another top_p or top_k) would be trained as if the policy wrote
 * it, so only the run's own value (or none) is served.
 * @since 0.1.0 @category validation
 */
export const unhonouredSampling = (request: { readonly temperature?: number | null | undefined; readonly top_p?: number | null | undefined; readonly top_k?: number | null | undefined }, run: SamplingParams): string | undefined => {
  for (const { field, flag, run: value, same } of runValues(run)) {
    const given = request[field]
    if (given === undefined || given === null || same(given)) continue
    const runs = field === "top_k" && value === 0 ? "with no top_k (every token)" : `at ${field} ${value}`
    const send = field === "top_k" && value === 0 ? "leave top_k out" : `send ${field} ${value} or leave it out`
    return `${field} ${given} is refused: this run samples ${runs} and trains on the log-probs of what it samples, so a reply sampled otherwise would be trained as the policy's own: ${send} (the run's value is set by ${flag}, else the env's sampling)`
  }
  return undefined
}

/** A message's content as text (text parts joined). @since 0.1.0 @category combinators */
export const textOf = (content: Content | null | undefined): string =>
  content === null || content === undefined ? "" : typeof content === "string" ? content : content.map((p) => p.text).join("")

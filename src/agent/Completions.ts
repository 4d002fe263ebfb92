/**
 * One completion request of an agent episode: the input tokens (`Transcript.inputFor`),
 * the sampling (the run's settings; a request may set its length, stops and seed, and
 * a temperature, top_p or top_k only to the run's own value), the
 * policy's sample, the reply read from it, the record kept, and the OpenAI-shaped answer
 * (JSON, or server-sent events when the request streams).
 *
 * @since 0.1.0
 */
import { Data, Effect } from "effect"
import { modelInputFromTokens, type SamplingParams } from "../contract/Contract.ts"
import { hash32 } from "../util/Random.ts"
import type { SamplerShape } from "../services/Sampler.ts"
import type { TokenizerShape } from "../services/Tokenizer.ts"
import type { ChatFormat, Reply } from "./ChatFormat.ts"
import { type ChatRequest, type CompletionRequest, type FunctionTool, unhonouredSampling } from "./Protocol.ts"
import type { Pieces } from "./SegmentedEncoding.ts"
import { type Completion, inputFor, replyMeaning } from "./Transcript.ts"

/** A request the endpoint refuses: the status, the OpenAI error `code` and a message that says what to do. @since 0.1.0 @category errors */
export class Refusal extends Data.TaggedError("Refusal")<{ readonly status: number; readonly code: string; readonly message: string }> {}

/** What the run settles for one agent episode. @since 0.1.0 @category models */
export interface Session {
  /** the run's sampling for this episode (its seed the group's) */
  readonly sampling: SamplingParams
  readonly affinityKey: string
  /** the policy version the episode's samples are pinned to */
  readonly version: number
  /** the episode's index in its group, for per-turn seeds */
  readonly index: number
  /** the model's context length */
  readonly context: number
  /** completions the episode may ask for */
  readonly maxTurns: number
  readonly completions: Array<Completion>
  /** a limit the endpoint enforced: the episode's stop reason */
  limit?: "max_turns" | "context_overflow"
  /** requests that re-sent an earlier reply changed past recognizing */
  rewritten: number
  /** the first request of the episode the endpoint refused, if any: why an episode with no completion has none */
  refused?: { readonly code: string; readonly message: string }
  /** the sampler of this episode's requests, when not the endpoint's own (an episode worker's: `run/workers/Thread.ts`) */
  readonly sampler?: SamplerShape | undefined
}

/** What a request needs besides its session. @since 0.1.0 @category models */
export interface Served {
  readonly model: string
  readonly tokenizer: TokenizerShape
  readonly sampler: SamplerShape
  readonly format: ChatFormat
  /** the tokens of the conversations' pieces encoded lately, shared by the episodes (`SegmentedEncoding.ts`) */
  readonly pieces?: Pieces | undefined
}

/** A sampled turn: its tokens and log-probs, the decoded text and the policy version. */
interface Sampled {
  readonly input: ReadonlyArray<number>
  readonly tokens: ReadonlyArray<number>
  readonly logprobs: ReadonlyArray<number>
  readonly stopReason: "stop" | "length"
  readonly text: string
  readonly version: number
}

const stopsOf = (stop: string | ReadonlyArray<string> | null | undefined): Array<string> => (stop == null ? [] : typeof stop === "string" ? [stop] : [...stop])

/** Samples one turn from `input` with the session's settings and the request's own. */
const sampleTurn = Effect.fnUntraced(function* (
  served: Served,
  session: Session,
  input: ReadonlyArray<number>,
  request: Pick<ChatRequest, "temperature" | "top_p" | "top_k" | "max_tokens" | "seed"> & { readonly maxTokens?: number | null | undefined },
  stop: ReadonlyArray<string>,
) {
  const unhonoured = unhonouredSampling(request, session.sampling)
  if (unhonoured !== undefined) return yield* new Refusal({ status: 400, code: "unsupported_sampling", message: unhonoured })
  if (session.completions.length >= session.maxTurns) {
    session.limit = "max_turns"
    return yield* new Refusal({ status: 400, code: "max_turns", message: `this episode has had its ${session.maxTurns} completions (the env's limits.maxTurns): end the episode` })
  }
  const room = session.context - input.length
  if (room < 1) {
    session.limit = "context_overflow"
    return yield* new Refusal({ status: 400, code: "context_length_exceeded", message: `the conversation has ${input.length} tokens; the model's context is ${session.context}: send fewer or shorter messages` })
  }
  const params: SamplingParams = {
    ...session.sampling,
    maxTokens: Math.min(request.maxTokens ?? request.max_tokens ?? session.sampling.maxTokens, room),
    stop: [...(session.sampling.stop ?? []), ...stop],
    seed: request.seed ?? hash32(`${session.sampling.seed ?? 0}/${session.index}/${session.completions.length}`),
  }
  const out = yield* (session.sampler ?? served.sampler).sample(modelInputFromTokens(input), params, { numSamples: 1, affinityKey: session.affinityKey, minPolicyVersion: session.version }).pipe(
    Effect.mapError((e) => new Refusal({ status: e.reason === "InvalidInput" ? 400 : 503, code: `sampler_${e.reason}`, message: `the sampler failed (${e.reason}): ${e.message}` })),
  )
  const s = out.sequences[0]
  if (s === undefined) return yield* new Refusal({ status: 503, code: "sampler_empty", message: "the sampler returned no sequence" })
  const body = s.tokens.at(-1) === served.tokenizer.eos ? s.tokens.slice(0, -1) : s.tokens
  return { input, tokens: s.tokens, logprobs: s.logprobs, stopReason: s.stopReason, text: served.tokenizer.decode(body), version: out.policyVersion } satisfies Sampled
})

const usage = (t: Sampled) => ({ prompt_tokens: t.input.length, completion_tokens: t.tokens.length, total_tokens: t.input.length + t.tokens.length })

const finishReason = (t: Sampled, reply: Reply) => (reply.toolCalls.length > 0 ? "tool_calls" : t.stopReason === "length" ? "length" : "stop")

const tokenLogprobs = (served: Served, t: Sampled) =>
  t.tokens.map((id, i) => {
    const token = served.tokenizer.decode([id])
    return { token, logprob: t.logprobs[i] ?? 0, bytes: [...Buffer.from(token, "utf8")], top_logprobs: [] }
  })

/**
 * Answers a chat completion request: samples the next turn of the session's episode,
 * records it, and returns the OpenAI chat completion (or its stream of chunks).
 * @since 0.1.0 @category handlers
 */
export const chat = Effect.fnUntraced(function* (served: Served, session: Session, request: ChatRequest, id: string) {
  const tools: ReadonlyArray<FunctionTool> = request.tool_choice === "none" ? [] : request.tools ?? []
  const input = yield* inputFor(served.format, served.tokenizer, session.completions, request.messages, tools, served.pieces).pipe(
    Effect.mapError((e) => new Refusal({ status: 400, code: "invalid_messages", message: `the messages cannot be rendered for the model: ${e.message}` })),
  )
  if (input.rewritten !== undefined) session.rewritten++
  const turn = yield* sampleTurn(served, session, input.tokens, { ...request, maxTokens: request.max_completion_tokens }, [
    ...stopsOf(request.stop),
    ...(tools.length > 0 ? served.format.stop : []),
  ])
  const reply = served.format.parse(turn.text, tools)
  session.completions.push({
    ...turn,
    sampled: turn.tokens,
    chat: { messages: request.messages, reply, meanings: input.meanings, replyMeaning: replyMeaning(reply) },
    diverged: input.diverged,
    ...(input.rewritten !== undefined ? { rewritten: input.rewritten } : {}),
  })
  const message = {
    role: "assistant" as const,
    content: reply.content === "" && reply.toolCalls.length > 0 ? null : reply.content,
    ...(reply.toolCalls.length > 0
      ? { tool_calls: reply.toolCalls.map((c, k) => ({ id: `call_${id}_${k}`, type: "function" as const, function: c })) }
      : {}),
  }
  const base = { id: `chatcmpl-${id}`, created: Math.floor(Date.now() / 1000), model: served.model, system_fingerprint: `policy-v${turn.version}` }
  const logprobs = request.logprobs === true ? { content: tokenLogprobs(served, turn) } : null
  if (request.stream !== true) {
    return { json: { ...base, object: "chat.completion", choices: [{ index: 0, message, logprobs, finish_reason: finishReason(turn, reply) }], usage: usage(turn) } }
  }
  const chunk = (choices: ReadonlyArray<unknown>, extra: object = {}) => ({ ...base, object: "chat.completion.chunk", choices, ...extra })
  const toolDeltas = (message.tool_calls ?? []).map((c, index) => ({ index, ...c }))
  return {
    events: [
      chunk([{ index: 0, delta: { role: "assistant", content: message.content ?? "" }, logprobs, finish_reason: null }]),
      ...(toolDeltas.length > 0 ? [chunk([{ index: 0, delta: { tool_calls: toolDeltas }, finish_reason: null }])] : []),
      chunk([{ index: 0, delta: {}, finish_reason: finishReason(turn, reply) }]),
      ...(request.stream_options?.include_usage === true ? [chunk([], { usage: usage(turn) })] : []),
    ],
  }
})

/**
 * Answers a text completion request: the prompt encoded as it is (no chat template),
 * the next turn sampled and recorded.
 * @since 0.1.0 @category handlers
 */
export const text = Effect.fnUntraced(function* (served: Served, session: Session, request: CompletionRequest, id: string) {
  const prompt = typeof request.prompt === "string" ? request.prompt : request.prompt[0]!
  const encoded = yield* served.tokenizer.encode(prompt).pipe(
    Effect.mapError((e) => new Refusal({ status: 400, code: "invalid_prompt", message: `the prompt cannot be encoded: ${e.message}` })),
  )
  const input = served.tokenizer.bos === undefined ? encoded : [served.tokenizer.bos, ...encoded]
  const turn = yield* sampleTurn(served, session, input, request, stopsOf(request.stop))
  session.completions.push({ ...turn, sampled: turn.tokens, diverged: 0 })
  const logprobs = request.logprobs != null
    ? { tokens: turn.tokens.map((t) => served.tokenizer.decode([t])), token_logprobs: turn.logprobs, top_logprobs: null, text_offset: null }
    : null
  const choice = { index: 0, text: turn.text, logprobs, finish_reason: turn.stopReason === "length" ? "length" : "stop" }
  const base = { id: `cmpl-${id}`, created: Math.floor(Date.now() / 1000), model: served.model }
  if (request.stream !== true) return { json: { ...base, object: "text_completion", choices: [choice], usage: usage(turn) } }
  return { events: [{ ...base, object: "text_completion", choices: [choice] }] }
})

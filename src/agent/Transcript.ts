/**
 * One agent episode's record: every completion the endpoint sampled for it, as tokens,
 * and how a new request's messages become the tokens the model sees.
 *
 * A request that re-sends an earlier reply (the conversation so far, then the assistant
 * message the endpoint returned, then tool results or the user's next words) is not
 * re-tokenized: its input is that completion's input and sampled tokens, exactly as the
 * policy saw and wrote them, then only the new messages rendered and encoded. The reply
 * is recognized by its position and its meaning: whitespace at its ends and the order of
 * its call arguments' keys may change (agent frameworks re-serialize them). A request
 * that matches no earlier completion is rendered whole; when it re-sent a reply changed
 * past recognizing, the text the policy is given in its place is kept (`rewritten`).
 *
 * What re-tokenizing the whole text would have given is still computed, and the tokens
 * it would have changed are counted (`diverged`), so a run shows how far its agent's
 * messages drift from what the policy wrote. When those tokens begin with the completion's
 * input and sampled tokens (the agent re-sent the reply as the policy wrote it, the common
 * case), they are the input as they are and nothing diverged: the conversation is rendered
 * once, not a second time to find where the new messages start. The text between special
 * tokens is encoded once per run (`SegmentedEncoding.ts`): a request encodes only its new
 * messages.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { TokenizeError, TokenizerShape } from "../services/Tokenizer.ts"
import type { ChatFormat, Reply } from "./ChatFormat.ts"
import { type ChatMessage, type FunctionTool, textOf } from "./Protocol.ts"
import { encodePieces, Pieces } from "./SegmentedEncoding.ts"

/** One sampled completion of an episode. @since 0.1.0 @category models */
export interface Completion {
  readonly input: ReadonlyArray<number>
  readonly sampled: ReadonlyArray<number>
  readonly logprobs: ReadonlyArray<number>
  readonly stopReason: "stop" | "length"
  /** the decoded completion, without its end-of-sequence token */
  readonly text: string
  readonly version: number
  /**
   * the chat request's messages and the reply returned (absent for `/v1/completions`), and
   * their meanings when worked out already (`Input.meanings`, `replyMeaning`): later
   * requests of the episode compare theirs with them
   */
  readonly chat?: {
    readonly messages: ReadonlyArray<ChatMessage>
    readonly reply: Reply
    readonly meanings?: ReadonlyArray<string> | undefined
    readonly replyMeaning?: string | undefined
  } | undefined
  /** tokens of its input that re-tokenizing the request's whole text would have changed */
  readonly diverged: number
  /** its request re-sent an earlier reply changed past recognizing: its input's text from there on (`Input.rewritten`) */
  readonly rewritten?: string | undefined
}

/** A request's input tokens and what building them found. @since 0.1.0 @category models */
export interface Input {
  readonly tokens: ReadonlyArray<number>
  /** tokens re-tokenizing the whole text would have changed (0 when rendered whole) */
  readonly diverged: number
  /**
   * the request re-sent an earlier reply so changed that it could not be recognized: the
   * text of its input from where it leaves that reply's input, as the policy sees it (the
   * reply as the agent re-sent it, then the messages after it); absent otherwise
   */
  readonly rewritten: string | undefined
  /** the request's messages' meanings (what a later request's are compared with) */
  readonly meanings: ReadonlyArray<string>
}

/** Marks where the re-sent reply was in a rendered conversation: what follows it is new. */
const MARK = "\u0000gyre-reply\u0000"

/** Keys sorted at every depth, so that reordered JSON compares equal. */
const canonical = (value: unknown): unknown =>
  Array.isArray(value) ? value.map(canonical)
  : typeof value === "object" && value !== null ? Object.fromEntries(Object.keys(value).sort().map((k) => [k, canonical((value as Record<string, unknown>)[k])]))
  : value

const argumentsKey = (text: string): unknown => {
  try {
    return canonical(JSON.parse(text))
  } catch {
    return text.trim()
  }
}

/** A message's meaning: role, content with its ends trimmed, calls with canonical arguments (their ids left out). */
const meaning = (m: ChatMessage): string =>
  JSON.stringify({
    role: m.role,
    content: textOf(m.content).trim(),
    calls: m.role === "assistant" ? (m.tool_calls ?? []).map((c) => [c.function.name, argumentsKey(c.function.arguments)]) : [],
    id: m.role === "tool" ? m.tool_call_id : undefined,
  })

/** A reply's meaning, as a re-sent assistant message's is worked out. @since 0.1.0 @category combinators */
export const replyMeaning = (reply: Reply): string =>
  meaning({ role: "assistant", content: reply.content, tool_calls: reply.toolCalls.map((c, i) => ({ id: String(i), function: c })) })

/**
 * How a request goes on from the completions before it, in one pass over them: `anchor`,
 * the latest completion whose request is this one's start and whose reply comes next in it;
 * `rewritten`, when there is none, the latest completion whose request is this one's start
 * and whose reply, as the endpoint returned it, is not the assistant message after it.
 */
const matchOf = (completions: ReadonlyArray<Completion>, messages: ReadonlyArray<ChatMessage>, asked: ReadonlyArray<string>) => {
  let anchor: { readonly completion: Completion; readonly at: number } | undefined
  let changed: Completion | undefined
  for (const completion of completions) {
    const chat = completion.chat
    if (chat === undefined) continue
    const at = chat.messages.length
    if (messages[at]?.role !== "assistant" || !chat.messages.every((m, i) => (chat.meanings?.[i] ?? meaning(m)) === asked[i])) continue
    if (asked[at] !== (chat.replyMeaning ?? replyMeaning(chat.reply))) changed = completion
    else if (anchor === undefined || at >= anchor.at) anchor = { completion, at }
  }
  return { anchor, rewritten: anchor === undefined ? changed : undefined }
}

/** How many tokens two sequences share from their start. */
const sharedStart = (a: ReadonlyArray<number>, b: ReadonlyArray<number>): number => {
  let n = 0
  while (n < a.length && n < b.length && a[n] === b[n]) n++
  return n
}

/** Tokens in the window where two sequences differ (after their common start, before their common end). */
export const differing = (a: ReadonlyArray<number>, b: ReadonlyArray<number>): number => {
  let start = 0
  while (start < a.length && start < b.length && a[start] === b[start]) start++
  let end = 0
  while (end < a.length - start && end < b.length - start && a[a.length - 1 - end] === b[b.length - 1 - end]) end++
  return Math.max(a.length, b.length) - start - end
}

/** Whether `whole` begins with `input` and then `sampled`. */
const goesOnFrom = (whole: ReadonlyArray<number>, input: ReadonlyArray<number>, sampled: ReadonlyArray<number>): boolean => {
  if (whole.length < input.length + sampled.length) return false
  for (let j = 0; j < input.length; j++) if (whole[j] !== input[j]) return false
  for (let j = 0; j < sampled.length; j++) if (whole[input.length + j] !== sampled[j]) return false
  return true
}

/**
 * The tokens the model sees for a chat request: an earlier completion's tokens and the
 * new messages after it, or the whole conversation rendered (see the module's comment).
 * @since 0.1.0 @category combinators
 */
export const inputFor = Effect.fnUntraced(function* (
  format: ChatFormat,
  tokenizer: TokenizerShape,
  completions: ReadonlyArray<Completion>,
  messages: ReadonlyArray<ChatMessage>,
  tools: ReadonlyArray<FunctionTool>,
  pieces: Pieces = new Pieces(),
) {
  const bos = tokenizer.bos === undefined ? [] : [tokenizer.bos]
  const encoded = yield* encodePieces(tokenizer, pieces, yield* format.render(messages, tools))
  const whole: ReadonlyArray<number> = bos.length === 0 ? encoded : [...bos, ...encoded]
  const meanings = messages.map(meaning)
  const { anchor, rewritten } = matchOf(completions, messages, meanings)
  if (anchor === undefined) {
    // what the policy is given in place of what it wrote: the changed reply and what follows it
    const text = rewritten === undefined ? undefined : tokenizer.decode(whole.slice(sharedStart(whole, rewritten.input)))
    return { tokens: whole, diverged: 0, rewritten: text, meanings } satisfies Input
  }
  const { completion } = anchor
  // the whole conversation goes on from the tokens the policy saw and wrote: it is the input, and nothing diverged
  if (goesOnFrom(whole, completion.input, completion.sampled)) return { tokens: whole, diverged: 0, rewritten: undefined, meanings } satisfies Input
  const marked = yield* format.render([...messages.slice(0, anchor.at), { role: "assistant", content: MARK }, ...messages.slice(anchor.at + 1)], tools)
  const cut = marked.indexOf(MARK)
  if (cut < 0) return { tokens: whole, diverged: 0, rewritten: undefined, meanings } satisfies Input
  let after = yield* encodePieces(tokenizer, pieces, marked.slice(cut + MARK.length))
  // the template closes the turn with the end-of-sequence token the sample already ends with
  if (completion.sampled.at(-1) === tokenizer.eos && after[0] === tokenizer.eos) after = after.slice(1)
  const tokens = [...completion.input, ...completion.sampled, ...after]
  return { tokens, diverged: differing(tokens, whole), rewritten: undefined, meanings } satisfies Input
}) as (
  format: ChatFormat,
  tokenizer: TokenizerShape,
  completions: ReadonlyArray<Completion>,
  messages: ReadonlyArray<ChatMessage>,
  tools: ReadonlyArray<FunctionTool>,
  pieces?: Pieces,
) => Effect.Effect<Input, TokenizeError>

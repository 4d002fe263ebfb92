/**
 * The tokenizer a backend hands to the runner (the role of Tinker's `get_tokenizer()`).
 *
 * @since 0.1.0
 */
import { Context, Effect, Schema } from "effect"

/** Text that the tokenizer cannot encode. @since 0.1.0 @category errors */
export class TokenizeError extends Schema.TaggedError<TokenizeError>()("TokenizeError", {
  message: Schema.String,
}) {}

/** @since 0.1.0 @category models */
export interface TokenizerShape {
  readonly name: string
  readonly vocabSize: number
  /** prepended to every prompt, if the model has one */
  readonly bos: number | undefined
  /** the token that ends a completion */
  readonly eos: number
  /** text -> ids (no BOS/EOS added) */
  readonly encode: (text: string) => Effect.Effect<Array<number>, TokenizeError>
  /** ids -> text; special tokens are dropped */
  readonly decode: (tokens: ReadonlyArray<number>) => string
  /** renders a prompt given as chat messages, or returns text prompts unchanged */
  readonly renderPrompt: (prompt: Prompt) => Effect.Effect<string, TokenizeError>
  /**
   * the tool-call format the model's chat template renders, when it has one (`hermes`:
   * `<tool_call>` JSON, as Qwen3's); absent for models without one (gyre's char model)
   */
  readonly toolCalls?: "hermes" | undefined
  /**
   * the chat template itself, on OpenAI-style messages (tool calls, tool results) and
   * tools: what the agent endpoint renders requests with; absent for models without a
   * template (gyre's char models, which the endpoint writes in their own layout).
   * `templateArgs` are extra variables of the template (`enable_thinking`), as
   * `apply_chat_template(..., **kwargs)` passes them in transformers.
   */
  readonly renderChat?: ((
    messages: ReadonlyArray<Readonly<Record<string, unknown>>>,
    options: {
      readonly tools?: ReadonlyArray<unknown>
      readonly addGenerationPrompt: boolean
      readonly templateArgs?: Readonly<Record<string, unknown>> | undefined
    },
  ) => Effect.Effect<string, TokenizeError>) | undefined
}

/** A chat message. @since 0.1.0 @category models */
export interface Message {
  readonly role: "system" | "user" | "assistant"
  readonly content: string
}

/** A prompt, as plain text or as chat messages. @since 0.1.0 @category models */
export type Prompt = string | ReadonlyArray<Message>

/** @since 0.1.0 @category services */
export class Tokenizer extends Context.Service<Tokenizer, TokenizerShape>()("gyre/Tokenizer") {}

/**
 * Prompt text -> model tokens: BOS (if any) ++ encode(render(prompt)).
 * @since 0.1.0 @category combinators
 */
export const encodePrompt = (tokenizer: TokenizerShape, prompt: Prompt) =>
  Effect.gen(function* () {
    const text = yield* tokenizer.renderPrompt(prompt)
    const ids = yield* tokenizer.encode(text)
    return tokenizer.bos === undefined ? ids : [tokenizer.bos, ...ids]
  })

/**
 * Real-model tokenizers: `tokenizer.json` and `tokenizer_config.json` from a local
 * folder (as a Hugging Face model repository ships them), loaded with
 * `@huggingface/tokenizers`; chat prompts rendered with the model's `chat_template`
 * by `@huggingface/jinja`, with `add_generation_prompt: true`. Nothing is fetched.
 *
 * - `encode` adds no special tokens (text that spells one, e.g. `<|im_start|>`, still
 *   maps to it); `decode` drops special tokens, and decodes no tokens to the empty text.
 *   Byte-level BPE tokenizers (Qwen's, Llama 3's) encode with each word's ids kept
 *   (`WordCache.ts`) and decode with each token's bytes worked out once
 *   (`ByteLevelDecode.ts`): the library's ids and text, for a fraction of its CPU.
 * - `bos` is set when the config names a `bos_token` and does not turn it off
 *   (`add_bos_token: false`); a rendered chat prompt that starts with the BOS text
 *   loses it, since `encodePrompt` prepends the id.
 * - `eos` is the config's `eos_token` (for chat models, the end-of-turn token).
 * - The template comes from `chat_template` in the config (a string, or a list of
 *   named templates, where `default` is used), else from `chat_template.jinja`.
 *
 * @since 0.1.0
 */
import { Template } from "@huggingface/jinja"
import { Tokenizer as HfTokenizer } from "@huggingface/tokenizers"
import { Effect, Layer, Result, Schema } from "effect"
import * as path from "node:path"
import * as Files from "../platform/FileSystem.ts"
import { decode } from "../util/Decode.ts"
import { type Message, type Prompt, TokenizeError, Tokenizer, type TokenizerShape } from "../services/Tokenizer.ts"
import { byteLevelDecoder } from "./ByteLevelDecode.ts"
import { wordCachedEncoder } from "./WordCache.ts"

/** Why a tokenizer folder could not be loaded. @since 0.1.0 @category errors */
export class TokenizerLoadError extends Schema.TaggedError<TokenizerLoadError>()("TokenizerLoadError", {
  reason: Schema.Literals(["Missing", "Malformed", "Unsupported"]),
  path: Schema.String,
  message: Schema.String,
}) {}

/** A special token in a config: a string or an AddedToken-like object. */
const TokenSpec = Schema.NullOr(Schema.Union([Schema.String, Schema.Struct({ content: Schema.String })]))

/** The fields of `tokenizer_config.json` used here (others are ignored). @since 0.1.0 @category models */
export const TokenizerConfig = Schema.Struct({
  name_or_path: Schema.optional(Schema.String),
  bos_token: Schema.optional(TokenSpec),
  eos_token: Schema.optional(TokenSpec),
  pad_token: Schema.optional(TokenSpec),
  unk_token: Schema.optional(TokenSpec),
  add_bos_token: Schema.optional(Schema.NullOr(Schema.Boolean)),
  chat_template: Schema.optional(
    Schema.NullOr(Schema.Union([Schema.String, Schema.Array(Schema.Struct({ name: Schema.String, template: Schema.String }))])),
  ),
})
export type TokenizerConfig = typeof TokenizerConfig.Type

/** The top of `tokenizer.json` checked before it is handed to the library. @since 0.1.0 @category models */
export const TokenizerJson = Schema.Struct({
  model: Schema.Struct({ type: Schema.optional(Schema.String) }),
  added_tokens: Schema.optional(Schema.Array(Schema.Struct({ id: Schema.Int, content: Schema.String }))),
})

const tokenText = (spec: typeof TokenSpec.Type | undefined): string | undefined =>
  spec === undefined || spec === null ? undefined : typeof spec === "string" ? spec : spec.content

const readJson = (file: string) =>
  Effect.gen(function* () {
    // a byte-order mark is kept, as Hugging Face's own reader keeps it
    const text = yield* Files.readText(file).pipe(
      Effect.mapError((e) => new TokenizerLoadError({ reason: "Missing", path: file, message: `cannot read ${file}: ${Files.messageOf(e)}` })),
    )
    const parsed = Result.try(() => JSON.parse(text) as unknown)
    if (Result.isFailure(parsed)) {
      return yield* new TokenizerLoadError({ reason: "Malformed", path: file, message: `${file} is not valid JSON` })
    }
    return parsed.success
  })

const decodeFile = <S extends Schema.ConstraintDecoder<unknown>>(schema: S, file: string) => {
  const run = decode(schema)
  return (value: unknown) => {
    const r = run(value)
    return Result.isSuccess(r)
      ? Effect.succeed(r.success)
      : Effect.fail(new TokenizerLoadError({ reason: "Malformed", path: file, message: `${file}: ${r.failure}` }))
  }
}

const errorText = (e: unknown) => (e instanceof Error ? e.message : String(e))

/** `tokenizer.json` and `tokenizer_config.json` of a folder, read and checked, and the library's tokenizer of them. */
const loadFiles = (dir: string) =>
  Effect.gen(function* () {
    const jsonFile = path.join(dir, "tokenizer.json")
    const configFile = path.join(dir, "tokenizer_config.json")
    const json = yield* readJson(jsonFile)
    yield* decodeFile(TokenizerJson, jsonFile)(json)
    const configRaw = yield* readJson(configFile)
    const config = yield* decodeFile(TokenizerConfig, configFile)(configRaw)
    const tokenizer = yield* Effect.try({
      try: () => new HfTokenizer(json as object, configRaw as object),
      catch: (e) => new TokenizerLoadError({ reason: "Unsupported", path: jsonFile, message: `${jsonFile} cannot be loaded: ${errorText(e)}` }),
    })
    return { configFile, config, tokenizer, json, configRaw }
  })

/** The chat template's text and its parse: from tokenizer_config.json, else chat_template.jinja; none when neither has one. */
const chatTemplate = (dir: string, config: TokenizerConfig, configFile: string) =>
  Effect.gen(function* () {
    let text: string | undefined
    const ct = config.chat_template
    if (typeof ct === "string") text = ct
    else if (Array.isArray(ct)) text = (ct.find((t) => t.name === "default") ?? ct[0])?.template
    if (text === undefined) {
      text = yield* Files.readText(path.join(dir, "chat_template.jinja")).pipe(Effect.orElseSucceed(() => undefined))
    }
    if (text === undefined) return { text: undefined, template: undefined }
    const source = text
    const template = yield* Effect.try({
      try: () => new Template(source),
      catch: (e) => new TokenizerLoadError({ reason: "Malformed", path: configFile, message: `the chat template does not parse: ${errorText(e)}` }),
    })
    return { text, template }
  })

/** The BOS (unless the config turns it off) and EOS tokens' texts and ids; fails when the config names no EOS or a token is not in the vocabulary. */
const specialTokens = (tokenizer: HfTokenizer, config: TokenizerConfig, configFile: string) =>
  Effect.gen(function* () {
    const idOf = (text: string | undefined, field: string) =>
      Effect.gen(function* () {
        if (text === undefined) return undefined
        const id = tokenizer.token_to_id(text)
        if (id === undefined) {
          return yield* new TokenizerLoadError({ reason: "Malformed", path: configFile, message: `${field} ${JSON.stringify(text)} is not in the vocabulary` })
        }
        return id
      })
    const bosText = config.add_bos_token === false ? undefined : tokenText(config.bos_token)
    const eosText = tokenText(config.eos_token)
    const bos = yield* idOf(bosText, "bos_token")
    const eos = yield* idOf(eosText, "eos_token")
    if (eos === undefined) {
      return yield* new TokenizerLoadError({ reason: "Malformed", path: configFile, message: `${configFile} names no eos_token; gyre needs the token that ends a completion` })
    }
    return { bosText, eosText, bos, eos }
  })

/** One past the highest id of the vocabulary, added tokens included. */
const vocabSizeOf = (tokenizer: HfTokenizer): number => {
  let vocabSize = 0
  for (const id of tokenizer.get_vocab(true).values()) vocabSize = Math.max(vocabSize, id + 1)
  return vocabSize
}

/** What rendering chat messages needs: the template and the special tokens' texts. */
interface ChatRendering {
  readonly dir: string
  readonly template: Template | undefined
  /** the special tokens' texts the template may use */
  readonly specials: Readonly<Record<string, string>>
  readonly bos: number | undefined
  readonly bosText: string | undefined
}

/** Renders messages (and tools) with the template, without the BOS text that `encodePrompt` prepends as an id. */
const renderChatWith = ({ dir, template, specials, bos, bosText }: ChatRendering) =>
(
  messages: ReadonlyArray<Readonly<Record<string, unknown>>>,
  options: {
    readonly tools?: ReadonlyArray<unknown>
    readonly addGenerationPrompt: boolean
    readonly templateArgs?: Readonly<Record<string, unknown>> | undefined
  } = { addGenerationPrompt: true },
) =>
  Effect.gen(function* () {
    if (template === undefined) {
      return yield* new TokenizeError({ message: `${dir} has no chat template; give the prompt as text` })
    }
    const tools = options.tools !== undefined && options.tools.length > 0 ? { tools: options.tools } : {}
    const text = yield* Effect.try({
      // extra variables come last and may replace a special token's text, as in transformers
      try: () =>
        template.render({
          messages: messages as Array<Record<string, unknown>>,
          add_generation_prompt: options.addGenerationPrompt,
          ...tools,
          ...specials,
          ...options.templateArgs,
        }),
      catch: (e) => new TokenizeError({ message: `the chat template failed: ${errorText(e)}` }),
    })
    // encodePrompt prepends the BOS id itself
    return bos !== undefined && bosText !== undefined && text.startsWith(bosText) ? text.slice(bosText.length) : text
  })

/**
 * Loads the tokenizer in `dir` (`tokenizer.json` + `tokenizer_config.json`).
 * @since 0.1.0 @category constructors
 */
export const fromDirectory = Effect.fn("HfTokenizer.fromDirectory")(function* (dir: string) {
  const { configFile, config, tokenizer, json, configRaw } = yield* loadFiles(dir)
  const chat = yield* chatTemplate(dir, config, configFile)
  const { bosText, eosText, bos, eos } = yield* specialTokens(tokenizer, config, configFile)
  const vocabSize = vocabSizeOf(tokenizer)

  const specials = {
    bos_token: tokenText(config.bos_token) ?? "",
    eos_token: eosText ?? "",
    pad_token: tokenText(config.pad_token) ?? "",
    unk_token: tokenText(config.unk_token) ?? "",
  }

  // byte-level BPE tokenizers (Qwen's, Llama 3's) encode and decode without the library's per-call work; the same ids and text
  const encodeText = wordCachedEncoder(tokenizer, json) ?? ((text: string) => tokenizer.encode(text, { add_special_tokens: false }).ids)
  const encode = (text: string) =>
    Effect.try({
      try: () => encodeText(text),
      catch: (e) => new TokenizeError({ message: `cannot encode the text: ${errorText(e)}` }),
    })
  const libraryDecode = (tokens: ReadonlyArray<number>) => (tokens.length === 0 ? "" : tokenizer.decode([...tokens], { skip_special_tokens: true }))
  const decode = byteLevelDecoder(json, configRaw, (id) => tokenizer.id_to_token(id), libraryDecode) ?? libraryDecode

  const renderChat = renderChatWith({ dir, template: chat.template, specials, bos, bosText })

  return {
    name: config.name_or_path ?? path.basename(path.resolve(dir)),
    vocabSize,
    bos,
    eos,
    encode,
    decode,
    renderPrompt: (prompt: Prompt) => (typeof prompt === "string" ? Effect.succeed(prompt) : renderChat(prompt.map((m: Message) => ({ role: m.role, content: m.content })))),
    ...(chat.template !== undefined ? { renderChat } : {}),
    // a template that renders `<tool_call>` blocks: tool episodes use that format (Tool.hermes)
    ...(chat.text?.includes("<tool_call>") ? { toolCalls: "hermes" as const } : {}),
  } satisfies TokenizerShape
})

/**
 * The `Tokenizer` service from a folder with `tokenizer.json` and
 * `tokenizer_config.json` (what `--tokenizer path/to/dir` loads).
 *
 * @example
 * ```ts
 * import * as Tokenizers from "./src/tokenizers/index.ts"
 * const tokenizer = Tokenizers.layer("models/qwen-tokenizer")
 * // => Layer<Tokenizer, TokenizerLoadError>
 * ```
 * @since 0.1.0 @category layers
 */
export const layer = (dir: string): Layer.Layer<Tokenizer, TokenizerLoadError> => Layer.effect(Tokenizer, fromDirectory(dir))

/**
 * Chat-template arguments: extra variables handed to a model's chat template, as
 * transformers' `apply_chat_template(messages, ..., **kwargs)` hands them (Qwen3's
 * `enable_thinking: false` renders an empty thinking block into the generation prompt).
 * A run gets them from its env (`Env.make({ chat: { templateArgs } })`) and from
 * `--template-arg key=value`; this module checks them, reads the flag's values, and gives
 * a run a tokenizer that renders every prompt with them.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { Tokenizer, type TokenizerShape } from "../services/Tokenizer.ts"

/** Extra variables of a chat template, by name; values are JSON. @since 0.1.0 @category models */
export type TemplateArgs = Readonly<Record<string, unknown>>

/** Names the renderer sets itself: an argument cannot replace them. */
const RESERVED = ["messages", "tools", "add_generation_prompt"]

const isJson = (value: unknown): boolean => {
  if (value === null || typeof value === "string" || typeof value === "boolean") return true
  if (typeof value === "number") return Number.isFinite(value)
  if (Array.isArray(value)) return value.every(isJson)
  if (typeof value === "object" && Object.getPrototypeOf(value) === Object.prototype) return Object.values(value).every(isJson)
  return false
}

/**
 * What is wrong with a set of template arguments (`who` names where they came from), or
 * undefined when nothing is: names must be template variable names, not one the renderer
 * sets (messages, tools, add_generation_prompt), and values JSON (they are recorded in
 * config.json).
 * @since 0.1.0 @category utils
 */
export const templateArgsProblem = (who: string, args: unknown): string | undefined => {
  if (typeof args !== "object" || args === null || Array.isArray(args)) return `${who} must be an object of template variables, e.g. { enable_thinking: false }`
  for (const [key, value] of Object.entries(args)) {
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(key)) return `${who}: ${JSON.stringify(key)} is not a template variable name (letters, digits and _)`
    if (RESERVED.includes(key)) return `${who}: ${key} is set by gyre itself (messages, tools, add_generation_prompt); give the template's other variables`
    if (!isJson(value)) return `${who}.${key} must be a JSON value (string, number, boolean, null, array or object), got ${String(value)}`
  }
  return undefined
}

/**
 * The values of `--template-arg key=value`: each read as JSON (`false`, `3`, `"x"`,
 * `[1,2]`), else kept as the text given (`--template-arg style=short`).
 *
 * @example
 * parseTemplateArgs({ enable_thinking: "false", style: "short" }) // => { enable_thinking: false, style: "short" }
 * @since 0.1.0 @category utils
 */
export const parseTemplateArgs = (pairs: Readonly<Record<string, string>>): Record<string, unknown> =>
  Object.fromEntries(Object.entries(pairs).map(([key, text]) => {
    try {
      return [key, JSON.parse(text) as unknown]
    } catch {
      return [key, text]
    }
  }))

/**
 * A tokenizer whose chat prompts (`renderPrompt` of messages, and `renderChat`) are
 * rendered with `args` as extra template variables; a call's own `templateArgs` win.
 * A tokenizer without a chat template is returned as it is: it has nothing to pass them to.
 * @since 0.1.0 @category combinators
 */
export const withTemplateArgs = (tokenizer: TokenizerShape, args: TemplateArgs): TokenizerShape => {
  const renderChat = tokenizer.renderChat
  if (renderChat === undefined || Object.keys(args).length === 0) return tokenizer
  return {
    ...tokenizer,
    // a prompt of messages is the template's rendering of them with the generation prompt
    renderPrompt: (prompt) =>
      typeof prompt === "string"
        ? Effect.succeed(prompt)
        : renderChat(prompt.map((m) => ({ role: m.role, content: m.content })), { addGenerationPrompt: true, templateArgs: args }),
    renderChat: (messages, options) => renderChat(messages, { ...options, templateArgs: { ...args, ...options.templateArgs } }),
  }
}

/**
 * Runs `effect` with the `Tokenizer` rendering chat prompts with `args` (nothing changes
 * when there are none). A tokenizer without a chat template (gyre's char models) cannot
 * use them: a warning says so once, and the run goes on.
 * @since 0.1.0 @category combinators
 */
export const applyTemplateArgs = (args: TemplateArgs | undefined) => <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R | Tokenizer> =>
  args === undefined || Object.keys(args).length === 0 ? effect : Effect.gen(function* () {
    const tokenizer = yield* Tokenizer
    if (tokenizer.renderChat === undefined) {
      yield* Effect.logWarning(
        `template arguments ${JSON.stringify(args)} are not used: the tokenizer ${tokenizer.name} has no chat template (give a real model's with --tokenizer)`,
      )
      return yield* effect
    }
    return yield* Effect.provideService(effect, Tokenizer, withTemplateArgs(tokenizer, args))
  })

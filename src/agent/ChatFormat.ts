/**
 * How the agent endpoint writes a conversation for the run's model and reads the model's
 * turn back as an assistant message:
 *
 * - `template`: a tokenizer with a chat template (Qwen3's, from `--tokenizer`) renders the
 *   messages and the tools itself; tool calls come back in the format the template renders
 *   (`hermes`: `<tool_call>{"name": ..., "arguments": ...}</tool_call>`).
 * - `brackets`: gyre's character-level models, which have no template. System and user
 *   messages are joined by newlines, an assistant turn is its text and then its tool call
 *   as `[args]` (or `[name args]` when several tools are offered), a tool's result is
 *   `=<result>;`, and nothing marks where the model's turn starts: the layout the native
 *   tool envs (`Tool.brackets`) train. The tools' descriptions are not shown to the model.
 *
 * A bracket call's argument text becomes the tool's arguments as `InputSchema.positional`
 * reads it (the MCP tools' bracket calls read theirs the same way): a JSON object as it is,
 * else words given to the parameters in order, the last taking the rest
 * (`{"expression": "47+38"}` for a tool whose one parameter is `expression`).
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { TokenizeError, type TokenizerShape } from "../services/Tokenizer.ts"
import * as InputSchema from "../tool/InputSchema.ts"
import * as Syntax from "../tool/Syntax.ts"
import { type ChatMessage, type FunctionTool, textOf } from "./Protocol.ts"

/** An assistant turn read from the model's text. @since 0.1.0 @category models */
export interface Reply {
  readonly content: string
  readonly toolCalls: ReadonlyArray<{ readonly name: string; readonly arguments: string }>
}

/** @since 0.1.0 @category models */
export interface ChatFormat {
  readonly name: "template" | "brackets"
  /** the conversation as text, up to where the model's next turn starts (no BOS) */
  readonly render: (messages: ReadonlyArray<ChatMessage>, tools: ReadonlyArray<FunctionTool>) => Effect.Effect<string, TokenizeError>
  /** the model's turn (decoded, without its end-of-sequence token) as an assistant message */
  readonly parse: (text: string, tools: ReadonlyArray<FunctionTool>) => Reply
  /** strings that end a turn holding a tool call, when tools are offered */
  readonly stop: ReadonlyArray<string>
}

const callables = (tools: ReadonlyArray<FunctionTool>): Array<Syntax.Callable> =>
  tools.map((t) => ({ name: t.function.name, parseArgs: InputSchema.positional(t.function.parameters ?? {}) }))

/** The model's text as a reply: a call the syntax finds (with object arguments) and the text before it, else all text as content. */
const parseWith = (syntax: Syntax.Syntax, open: string) => (text: string, tools: ReadonlyArray<FunctionTool>): Reply => {
  if (tools.length === 0) return { content: text, toolCalls: [] }
  const found = syntax.find(text, callables(tools))
  if (found._tag !== "Call" || typeof found.args !== "object" || found.args === null) return { content: text, toolCalls: [] }
  return { content: text.slice(0, Math.max(0, text.indexOf(open))).trim(), toolCalls: [{ name: found.tool, arguments: JSON.stringify(found.args) }] }
}

/** A bracket call's argument text: the one parameter's value, else the arguments as JSON. */
const bracketArgs = (argsJson: string): string => {
  try {
    const args = JSON.parse(argsJson) as unknown
    if (typeof args === "object" && args !== null) {
      const values = Object.values(args)
      if (values.length === 1 && (typeof values[0] === "string" || typeof values[0] === "number")) return String(values[0])
    }
  } catch {
    // arguments that are not JSON are written as they came
  }
  return argsJson
}

/** The char models' layout (see the module's comment). */
const renderBrackets = (messages: ReadonlyArray<ChatMessage>, tools: ReadonlyArray<FunctionTool>): string => {
  let out = ""
  for (const m of messages) {
    if (m.role === "assistant") {
      out += textOf(m.content)
      for (const c of m.tool_calls ?? []) out += tools.length === 1 ? `[${bracketArgs(c.function.arguments)}]` : `[${c.function.name} ${bracketArgs(c.function.arguments)}]`
    } else if (m.role === "tool") out += `=${textOf(m.content)};`
    else out += (out === "" ? "" : "\n") + textOf(m.content)
  }
  return out
}

/** @since 0.1.0 @category constructors */
export const brackets: ChatFormat = {
  name: "brackets",
  render: (messages, tools) => Effect.succeed(renderBrackets(messages, tools)),
  parse: parseWith(Syntax.brackets, "["),
  stop: Syntax.brackets.stop,
}

/** Messages as the chat template reads them: call arguments as objects where they parse, `developer` as `system`. */
const templateMessages = (messages: ReadonlyArray<ChatMessage>) =>
  messages.map((m) => {
    if (m.role === "developer") return { role: "system", content: textOf(m.content) }
    if (m.role !== "assistant") return { ...m, content: textOf(m.content) }
    const toolCalls = (m.tool_calls ?? []).map((c) => {
      let args: unknown = c.function.arguments
      try {
        args = JSON.parse(c.function.arguments)
      } catch {
        // the template writes text arguments as they are
      }
      return { id: c.id, type: "function", function: { name: c.function.name, arguments: args } }
    })
    return { role: "assistant", content: textOf(m.content), ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}) }
  })

/**
 * Opening requests rendered kept: every episode of a group sends the same first request
 * (no assistant turn yet), and rendering a template costs far more than its key. Later
 * requests hold the episode's own replies and are not looked for.
 */
const RENDERS_KEPT = 256

/** The template format of a tokenizer whose chat template renders tools (`hermes`). @since 0.1.0 @category constructors */
export const template = (tokenizer: TokenizerShape): ChatFormat => {
  // the most recently rendered opening requests, by their messages and tools
  const renders = new Map<string, string>()
  const remember = (key: string, text: string) => {
    renders.set(key, text)
    if (renders.size > RENDERS_KEPT) renders.delete(renders.keys().next().value!)
  }
  return {
    name: "template",
    render: (messages, tools) => {
      const renderChat = tokenizer.renderChat
      if (renderChat === undefined) return Effect.fail(new TokenizeError({ message: `the tokenizer ${tokenizer.name} has no chat template` }))
      if (tools.length > 0 && tokenizer.toolCalls !== "hermes") {
        return Effect.fail(new TokenizeError({ message: `the chat template of ${tokenizer.name} renders no tools: send the request without tools` }))
      }
      const rendered = Effect.suspend(() => renderChat(templateMessages(messages), { tools, addGenerationPrompt: true }))
      if (messages.some((m) => m.role === "assistant")) return rendered
      const key = JSON.stringify([messages, tools])
      const kept = renders.get(key)
      if (kept !== undefined) return Effect.succeed(kept)
      return Effect.map(rendered, (text) => {
        remember(key, text)
        return text
      })
    },
    parse: parseWith(Syntax.hermes, "<tool_call>"),
    stop: Syntax.hermes.stop,
  }
}

/** The format for the run's tokenizer: its chat template when it has one, else brackets. @since 0.1.0 @category constructors */
export const forTokenizer = (tokenizer: TokenizerShape): ChatFormat => (tokenizer.renderChat !== undefined ? template(tokenizer) : brackets)

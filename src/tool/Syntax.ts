/**
 * Tool-call syntaxes: how a call is written in a model's turn and how its result comes
 * back. `brackets` for the small character-level models, `hermes` for chat models whose
 * template renders tool calls (Qwen3's). Re-exported by `Tool`.
 *
 * @since 0.1.0
 */

/** What a syntax needs of a tool to find its calls. @since 0.1.0 @category models */
export interface Callable {
  readonly name: string
  /** argument text of a bracket call -> the value the tool's `args` Schema decodes */
  readonly parseArgs: (text: string) => unknown
}

/** @internal */
export const messageOf = (e: unknown): string => {
  if (e instanceof Error) return e.message
  if (typeof e === "string") return e
  try {
    return JSON.stringify(e) ?? String(e)
  } catch {
    return String(e)
  }
}

/** A call found in a turn. @since 0.1.0 @category models */
export type Found =
  | { readonly _tag: "None" }
  | { readonly _tag: "Call"; readonly tool: string; readonly args: unknown }
  | { readonly _tag: "Malformed"; readonly message: string }

/**
 * How calls are written in a turn and how results come back.
 * @since 0.1.0 @category models
 */
export interface Syntax {
  readonly name: string
  /** strings that end a turn holding a call */
  readonly stop: ReadonlyArray<string>
  /** the call in a turn's text, if any */
  readonly find: (text: string, tools: ReadonlyArray<Callable>) => Found
  /** the observation for a result or an error */
  readonly observation: (outcome: { readonly ok: true; readonly text: string } | { readonly ok: false; readonly error: string }) => string
}

const ERROR_CHARS = 40

/**
 * The text syntax for small character-level models: `[name args]`, or `[args]` when the
 * env has one tool; the turn stops at `]`. A result comes back as `=<result>;`, an error
 * as `=error: <message>;` (the message cut to 40 characters).
 *
 *   turn "[47+38]"  ->  observation "=85;"
 * @since 0.1.0 @category syntax
 */
export const brackets: Syntax = {
  name: "brackets",
  stop: ["]"],
  find: (text, tools) => {
    const open = text.indexOf("[")
    if (open < 0) return { _tag: "None" }
    const close = text.indexOf("]", open)
    if (close < 0) return { _tag: "Malformed", message: "the call has no closing ]" }
    const inner = text.slice(open + 1, close)
    const space = inner.indexOf(" ")
    const named = space > 0 ? tools.find((t) => t.name === inner.slice(0, space)) : tools.find((t) => t.name === inner)
    if (named !== undefined) return { _tag: "Call", tool: named.name, args: named.parseArgs(space > 0 ? inner.slice(space + 1) : "") }
    const only = tools.length === 1 ? tools[0] : undefined
    if (only !== undefined) return { _tag: "Call", tool: only.name, args: only.parseArgs(inner) }
    return { _tag: "Malformed", message: `no tool named ${JSON.stringify(inner.split(" ")[0])}; tools: ${tools.map((t) => t.name).join(", ")}` }
  },
  observation: (o) => (o.ok ? `=${o.text};` : `=error: ${o.error.slice(0, ERROR_CHARS)};`),
}

/**
 * The Hermes / Qwen tool-call format of chat models (`--tokenizer` with a chat template
 * that has tools, Qwen3's among them): the model writes
 * `<tool_call>\n{"name": "calc", "arguments": {...}}\n</tool_call>`; the result comes
 * back as a tool turn in the ChatML layout Qwen3's template renders:
 * `<|im_end|>\n<|im_start|>user\n<tool_response>\n...\n</tool_response><|im_end|>\n<|im_start|>assistant\n`.
 * @since 0.1.0 @category syntax
 */
export const hermes: Syntax = {
  name: "hermes",
  stop: ["</tool_call>"],
  find: (text, tools) => {
    const open = text.indexOf("<tool_call>")
    if (open < 0) return { _tag: "None" }
    const close = text.indexOf("</tool_call>", open)
    if (close < 0) return { _tag: "Malformed", message: "the call has no closing </tool_call>" }
    let call: unknown
    try {
      call = JSON.parse(text.slice(open + "<tool_call>".length, close))
    } catch (e) {
      return { _tag: "Malformed", message: `the call is not JSON: ${messageOf(e)}` }
    }
    const name = (call as { name?: unknown })?.name
    const tool = tools.find((t) => t.name === name)
    if (tool === undefined) return { _tag: "Malformed", message: `no tool named ${JSON.stringify(name)}; tools: ${tools.map((t) => t.name).join(", ")}` }
    return { _tag: "Call", tool: tool.name, args: (call as { arguments?: unknown }).arguments ?? {} }
  },
  observation: (o) =>
    `<|im_end|>\n<|im_start|>user\n<tool_response>\n${o.ok ? o.text : `error: ${o.error}`}\n</tool_response><|im_end|>\n<|im_start|>assistant\n`,
}

/**
 * The tool list as a prompt shows it, in the run's call syntax:
 * - `brackets` (the character-level embedded model): one `[name arg ...]` per tool, the
 *   arguments in the order the bracket syntax reads them (`[stock item] [price item]`);
 * - `hermes` (Qwen3's and Hermes' chat templates): the `# Tools` block those templates
 *   put in the system message, each tool as `{"type": "function", "function": {...}}`
 *   inside `<tools></tools>`, then how to write a `<tool_call>`.
 *
 * @since 0.1.0
 */
import { Predicate } from "effect"
import type { ToolCallFormat } from "../env/Episode.ts"
import type { Syntax } from "../vocabulary/Tool.ts"
import type { ListedTool } from "./Connection.ts"

/** JSON as Python's `json.dumps` writes it (", " and ": "), which is what the templates' `tojson` gives. */
const pyJson = (value: unknown): string =>
  Array.isArray(value) ? `[${value.map(pyJson).join(", ")}]`
  : Predicate.isObject(value) ? `{${Object.entries(value).filter(([, v]) => v !== undefined).map(([k, v]) => `${JSON.stringify(k)}: ${pyJson(v)}`).join(", ")}}`
  : JSON.stringify(value) ?? "null"

const argNames = (tool: ListedTool): Array<string> => (Predicate.isObject(tool.inputSchema.properties) ? Object.keys(tool.inputSchema.properties) : [])

/** `[stock item] [price item]` @since 0.1.0 @category rendering */
export const brackets = (tools: ReadonlyArray<ListedTool>): string => tools.map((t) => `[${[t.name, ...argNames(t)].join(" ")}]`).join(" ")

/** The `# Tools` block of Qwen3's chat template. @since 0.1.0 @category rendering */
export const hermes = (tools: ReadonlyArray<ListedTool>): string =>
  [
    "# Tools",
    "",
    "You may call one or more functions to assist with the user query.",
    "",
    "You are provided with function signatures within <tools></tools> XML tags:",
    "<tools>",
    ...tools.map((t) => pyJson({ type: "function", function: { name: t.name, description: t.description ?? "", parameters: t.inputSchema } })),
    "</tools>",
    "",
    "For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:",
    "<tool_call>",
    '{"name": <function-name>, "arguments": <args-json-object>}',
    "</tool_call>",
  ].join("\n")

/**
 * The tool list in a call syntax: a `Tool.Syntax`, or the run's tool-call format.
 *
 * @example
 * Render.tools(listed, "brackets") // => "[stock item] [price item]"
 * @since 0.1.0 @category rendering
 */
export const tools = (listed: ReadonlyArray<ListedTool>, syntax: ToolCallFormat | Syntax): string =>
  (typeof syntax === "string" ? syntax : syntax.name) === "hermes" ? hermes(listed) : brackets(listed)

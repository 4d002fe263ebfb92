/**
 * Why a toolset cannot be offered in the bracket call syntax: a bracket call ends at the
 * first `]`, so a tool taking an array or an object could never be called right. The
 * message names those tools and their fields, and what to write instead in the API the
 * user wrote (`McpToolset.episode` with `McpToolset.layer`, or `McpToolset.perEpisode`).
 *
 * @since 0.1.0
 */
import * as InputSchema from "./InputSchema.ts"

/** A tool as its server lists it: its name and input JSON Schema. @since 0.1.0 @category models */
export interface Listed {
  readonly name: string
  readonly inputSchema: Readonly<Record<string, unknown>>
}

/** How the env offers the toolset: one server for the run, or one per episode. @since 0.1.0 @category models */
export type Api = "episode" | "perEpisode"

/**
 * The refusal of `listed` in the bracket syntax, or undefined when every tool takes only
 * scalars.
 *
 * @example
 * bracketsRefusal({ server: "node graph.js", api: "perEpisode", listed: [{ name: "add", inputSchema: { type: "object", properties: { items: { type: "array" } } } }] })
 * // => "tools of node graph.js take arrays or objects, which the bracket call syntax cannot carry (...): add (items). Use McpToolset.perEpisode(server, { syntax: Tool.hermes }) ..."
 * @since 0.1.0 @category destructors
 */
export const bracketsRefusal = (toolset: { readonly server: string; readonly listed: ReadonlyArray<Listed>; readonly api: Api }): string | undefined => {
  const fields = toolset.listed.map((t) => ({ name: t.name, structured: InputSchema.structured(t.inputSchema) }))
  const needy = fields.filter((t) => t.structured.length > 0).map((t) => `${t.name} (${t.structured.join(", ")})`)
  if (needy.length === 0) return undefined
  const plain = fields.filter((t) => t.structured.length === 0).map((t) => JSON.stringify(t.name))
  const include = `include: [${plain.join(", ")}]`
  const hermes = toolset.api === "perEpisode" ? "McpToolset.perEpisode(server, { syntax: Tool.hermes })" : "McpToolset.episode({ syntax: Tool.hermes })"
  const others = toolset.api === "perEpisode" ? `McpToolset.perEpisode(server, { ${include} })` : `McpToolset.layer(server, { ${include} })`
  return `tools of ${toolset.server} take arrays or objects, which the bracket call syntax cannot carry (a call ends at the first ]): ${needy.join(", ")}. ` +
    `Use ${hermes} (JSON arguments; a chat tokenizer such as Qwen3's picks it with "auto")` +
    (plain.length > 0 ? `, or offer only the others with ${others}` : "")
}

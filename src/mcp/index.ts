/**
 * `gyre/mcp`: MCP servers' tools as gyre tools. A separate entry point, so that
 * `import "gyre"` does not load the MCP SDK.
 *
 * @since 0.1.0
 */
/** The toolset service: a server's tools as gyre tools, its layers, and its episode. */
export { type EpisodeFolder, type EpisodeOptions, type EpisodeResources, McpToolset, type Options, type PerEpisode, type PerEpisodeOptions, type Shape } from "./McpToolset.ts"
/** The one failure type of MCP toolsets. */
export { McpError } from "./McpError.ts"
/** Where a server is: a command (stdio) or a URL (streamable HTTP). */
export * as Server from "./Server.ts"
/** One live connection to a server. */
export * as Connection from "./Connection.ts"
/** A tool's input JSON Schema -> a Schema decoder, and the bracket syntax's argument reader. */
export * as InputSchema from "../tool/InputSchema.ts"
/** An MCP tool result -> the observation. */
export * as Content from "./Content.ts"
/** The tool list in a call syntax (brackets, hermes). */
export * as Render from "./Render.ts"
/** The stdio transport that runs a server in a process group of its own. */
export { groupAlive, StdioTransport } from "./StdioTransport.ts"

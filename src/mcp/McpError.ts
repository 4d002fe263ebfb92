/**
 * The one failure type of MCP toolsets, with a `reason`:
 * - `StartFailed`: the server could not be started or did not answer `initialize`
 *   (the message names the command or URL and, for a command, the end of its stderr);
 * - `ListFailed`: the server did not list its tools;
 * - `UnsupportedSchema`: a tool's input JSON Schema uses a keyword gyre cannot turn into a
 *   Schema decoder (the message names the tool and the keyword);
 * - `InvalidTool`: a tool gyre cannot offer as is (its name, or two tools with one name).
 *
 * A failing tool call is never an `McpError`: it is an error observation for the model.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"

/** @since 0.1.0 @category errors */
export class McpError extends Schema.TaggedError<McpError>()("McpError", {
  /** the server, as `command args` or its URL */
  server: Schema.String,
  reason: Schema.Literals(["StartFailed", "ListFailed", "UnsupportedSchema", "InvalidTool"]),
  message: Schema.String,
  /** the tool concerned, for `UnsupportedSchema` and `InvalidTool` */
  tool: Schema.optional(Schema.String),
  /** the JSON Schema keyword refused, for `UnsupportedSchema` */
  keyword: Schema.optional(Schema.String),
}) {}

/**
 * An MCP tool result -> what the model sees. Text parts are the observation, joined by
 * newlines (a resource's text counts as text, a link as its URI, an image or audio part as
 * `[image]`/`[audio]`); with no content, the structured content as JSON. A result with
 * `isError` is the tool's failure, and a result that is not MCP's shape is a malformed
 * result: both are error observations.
 *
 * @since 0.1.0
 */
import { Effect, Schema } from "effect"
import { ToolFailure } from "../vocabulary/Tool.ts"

const Part = Schema.Struct({
  type: Schema.String,
  text: Schema.optional(Schema.String),
  uri: Schema.optional(Schema.String),
  resource: Schema.optional(Schema.Struct({ uri: Schema.optional(Schema.String), text: Schema.optional(Schema.String) })),
})
type Part = typeof Part.Type

/** The part of MCP's `CallToolResult` that gyre reads. @since 0.1.0 @category models */
export const CallResult = Schema.Struct({
  content: Schema.Array(Part),
  isError: Schema.optional(Schema.Boolean),
  structuredContent: Schema.optional(Schema.Unknown),
})
/** @since 0.1.0 @category models */
export type CallResult = typeof CallResult.Type

const partText = (part: Part): string =>
  part.type === "text" ? part.text ?? ""
  : part.type === "resource" ? part.resource?.text ?? part.resource?.uri ?? "[resource]"
  : part.type === "resource_link" ? part.uri ?? "[resource]"
  : `[${part.type}]`

/** The text of a decoded result. @since 0.1.0 @category destructors */
export const text = (result: CallResult): string =>
  result.content.length === 0 && result.structuredContent !== undefined ? JSON.stringify(result.structuredContent) : result.content.map(partText).join("\n")

/**
 * A raw `tools/call` result -> the observation text, or the tool's failure.
 *
 * @example
 * Content.observe("stock", { content: [{ type: "text", text: "42" }] })         // => Effect.succeed("42")
 * Content.observe("stock", { content: [{ type: "text", text: "no item" }], isError: true })
 * // => Effect.fail(ToolFailure({ message: "no item" }))
 * @since 0.1.0 @category constructors
 */
export const observe = (tool: string, raw: unknown): Effect.Effect<string, ToolFailure> =>
  Schema.decodeUnknownEffect(CallResult)(raw).pipe(
    Effect.mapError((e) => new ToolFailure({ message: `malformed result from ${tool}: ${e.message.replace(/\s+/g, " ")}` })),
    Effect.flatMap((result) => {
      if (result.isError !== true) return Effect.succeed(text(result))
      const message = text(result).trim()
      return Effect.fail(new ToolFailure({ message: message.length > 0 ? message : `${tool} failed` }))
    }),
  )

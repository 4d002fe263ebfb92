/**
 * Where an MCP server is: a command gyre starts and talks to over stdio, or a URL it
 * talks to over streamable HTTP. Both are Schemas, so a server read from a file or a
 * setting is decoded like any other input.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"

/** A server started as a child process, spoken to over its stdin and stdout. @since 0.1.0 @category models */
export const Stdio = Schema.TaggedStruct("Stdio", {
  command: Schema.String.check(Schema.isMinLength(1)),
  args: Schema.Array(Schema.String),
  /** added to a minimal inherited environment (HOME, PATH, SHELL, TERM, USER, LOGNAME) */
  env: Schema.Record(Schema.String, Schema.String),
  cwd: Schema.optional(Schema.String),
})
/** @since 0.1.0 @category models */
export type Stdio = typeof Stdio.Type

/** A server already running, spoken to over streamable HTTP. @since 0.1.0 @category models */
export const Http = Schema.TaggedStruct("Http", {
  url: Schema.String.check(Schema.isPattern(/^https?:\/\//)),
  headers: Schema.Record(Schema.String, Schema.String),
})
/** @since 0.1.0 @category models */
export type Http = typeof Http.Type

/** @since 0.1.0 @category models */
export const ServerSpec = Schema.Union([Stdio, Http])
/** @since 0.1.0 @category models */
export type ServerSpec = typeof ServerSpec.Type

/**
 * A server started from a command. One started through `npx` needs `-y` among its args
 * (`["-y", "@modelcontextprotocol/server-memory"]`): npx asks before it installs a package,
 * and a server has no terminal to answer it, so without `-y` it stops with "npx canceled
 * due to missing packages and no YES option".
 *
 * @example
 * Server.stdio({ command: "node", args: ["server.js"] })
 * // => { _tag: "Stdio", command: "node", args: ["server.js"], env: {} }
 * @since 0.1.0 @category constructors
 */
export const stdio = (options: { readonly command: string; readonly args?: ReadonlyArray<string>; readonly env?: Readonly<Record<string, string>>; readonly cwd?: string }): Stdio =>
  Schema.decodeUnknownSync(Stdio)({ _tag: "Stdio", command: options.command, args: options.args ?? [], env: options.env ?? {}, ...(options.cwd !== undefined ? { cwd: options.cwd } : {}) })

/**
 * A server at a streamable-HTTP URL.
 *
 * @example
 * Server.http("http://127.0.0.1:8808/mcp") // => { _tag: "Http", url: "http://127.0.0.1:8808/mcp", headers: {} }
 * @since 0.1.0 @category constructors
 */
export const http = (url: string, options: { readonly headers?: Readonly<Record<string, string>> } = {}): Http =>
  Schema.decodeUnknownSync(Http)({ _tag: "Http", url, headers: options.headers ?? {} })

/** How errors name a server: the command line, or the URL. @since 0.1.0 @category destructors */
export const describe = (spec: ServerSpec): string =>
  spec._tag === "Http" ? spec.url : [spec.command, ...spec.args].map((a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : JSON.stringify(a))).join(" ")

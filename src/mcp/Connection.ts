/**
 * One live connection to an MCP server: started (a child process, or a session over
 * streamable HTTP) in a scope and closed when the scope closes, on success, failure or
 * interruption. It lists the server's tools and calls them.
 *
 * A call that fails says whether the connection is lost (the process exited, the HTTP
 * transport failed): the toolset then starts a fresh one for the next call.
 *
 * @since 0.1.0
 */
import { setMaxListeners } from "node:events"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { ErrorCode, McpError as SdkError } from "@modelcontextprotocol/sdk/types.js"
import { Data, Duration, Effect, Predicate, Schema, type Scope } from "effect"
import { McpError } from "./McpError.ts"
import * as Server from "./Server.ts"
import { StdioTransport } from "./StdioTransport.ts"

/** A tool as the server lists it. @since 0.1.0 @category models */
export const ListedTool = Schema.Struct({
  name: Schema.String,
  description: Schema.optional(Schema.String),
  inputSchema: Schema.Record(Schema.String, Schema.Unknown),
})
/** @since 0.1.0 @category models */
export type ListedTool = typeof ListedTool.Type

const ListPage = Schema.Struct({ tools: Schema.Array(ListedTool), nextCursor: Schema.optional(Schema.String) })

/** A call that did not return a result; `lost`: the connection cannot be used again. @since 0.1.0 @category errors */
export class CallFailed extends Data.TaggedError("CallFailed")<{ readonly message: string; readonly lost: boolean }> {}

/** @since 0.1.0 @category models */
export interface Connection {
  /** the server, as `command args` or its URL */
  readonly server: string
  /** the server's process id (stdio) */
  readonly pid: number | undefined
  /** whether the transport has closed (the process exited, the session ended) */
  readonly closed: () => boolean
  readonly listTools: Effect.Effect<ReadonlyArray<ListedTool>, McpError>
  /** the raw result of `tools/call` (checked by the SDK against MCP's result schema) */
  readonly callTool: (name: string, args: Readonly<Record<string, unknown>>) => Effect.Effect<unknown, CallFailed>
}

const messageOf = (e: unknown) => (e instanceof Error ? e.message : String(e))
const oneLine = (s: string) => s.replace(/\s+/g, " ").trim()

/**
 * `fetch` for the HTTP transport, which passes one AbortSignal (its own, aborted when it
 * closes) to every request: Node's fetch keeps a listener on it per request until the
 * request is garbage-collected, so a long run would warn of a listener leak. The limit
 * is lifted on that signal only.
 */
const sharedSignalFetch = (url: string | URL, init?: RequestInit): Promise<Response> => {
  if (init?.signal != null) setMaxListeners(0, init.signal)
  return fetch(url, init)
}

/** The SDK's result-schema failure (a zod error with `issues`), as `path: message; ...` */
const malformedIssues = (e: unknown): string | undefined => {
  if (!Predicate.hasProperty(e, "issues") || !Array.isArray(e.issues)) return undefined
  return e.issues
    .map((i: unknown) => {
      const path = Predicate.hasProperty(i, "path") && Array.isArray(i.path) ? i.path.join(".") : ""
      const message = Predicate.hasProperty(i, "message") ? String(i.message) : "invalid"
      return path.length > 0 ? `${path}: ${message}` : message
    })
    .join("; ")
    .slice(0, 300)
}

const exitText = (t: StdioTransport): string => {
  const exit = t.exit
  const how = exit === undefined ? "" : exit.signal !== null ? `killed by ${exit.signal}` : `exited with code ${exit.code}`
  const stderr = t.stderr.trim()
  return [how, stderr.length > 0 ? `stderr: ${stderr.slice(-600)}` : ""].filter((s) => s.length > 0).join("; ")
}

/** The message of a failed start: the server, what failed, and (stdio) how the process ended and its stderr. */
const startFailure = (server: string, transport: StdioTransport | undefined, cause: unknown) =>
  Effect.gen(function* () {
    if (transport !== undefined) yield* Effect.promise(() => transport.waitExit(1000))
    const why = transport === undefined ? messageOf(cause) : [messageOf(cause), exitText(transport)].filter((s) => s.length > 0).join("; ")
    return new McpError({ server, reason: "StartFailed", message: `cannot start the MCP server ${server}: ${why}` })
  })

const closeQuietly = (client: Client, transport: StdioTransport | StreamableHTTPClientTransport) =>
  Effect.promise(async () => {
    if (transport instanceof StreamableHTTPClientTransport) await transport.terminateSession().catch(() => undefined)
    await client.close().catch(() => undefined)
    // the client closes the transport; closing again makes sure the process group is gone
    await transport.close().catch(() => undefined)
  })

/**
 * Starts (stdio) or opens (HTTP) a connection and initializes the MCP session, within
 * `startTimeout`. Closed with the scope; a failed start leaves no process behind.
 * @since 0.1.0 @category constructors
 */
export const connect = Effect.fn("Mcp.connect")(function* (spec: Server.ServerSpec, options: { readonly startTimeout: Duration.Input; readonly name?: string }): Effect.fn.Return<Connection, McpError, Scope.Scope> {
  const server = Server.describe(spec)
  const transport = spec._tag === "Stdio"
    ? new StdioTransport(spec)
    : new StreamableHTTPClientTransport(new URL(spec.url), { requestInit: { headers: { ...spec.headers } }, fetch: sharedSignalFetch })
  const stdio = transport instanceof StdioTransport ? transport : undefined
  const client = new Client({ name: options.name ?? "gyre", version: "0.1.0" }, { capabilities: {} })
  let closed = false
  const startMs = Duration.toMillis(Duration.fromInputUnsafe(options.startTimeout))
  yield* Effect.acquireRelease(
    Effect.tryPromise({
      try: (signal) => client.connect(transport, { timeout: startMs, signal }),
      catch: (cause) => cause,
    }).pipe(
      Effect.timeoutOrElse({ duration: options.startTimeout, orElse: () => Effect.fail(new Error(`no answer to initialize within ${Duration.format(Duration.fromInputUnsafe(options.startTimeout))}`)) }),
      Effect.catch((cause) => Effect.flatMap(closeQuietly(client, transport), () => Effect.flatMap(startFailure(server, stdio, cause), Effect.fail))),
      Effect.onInterrupt(() => closeQuietly(client, transport)),
    ),
    () => closeQuietly(client, transport),
  )
  const previous = client.onclose
  client.onclose = () => {
    closed = true
    previous?.()
  }

  const listTools = Effect.gen(function* () {
    const tools: Array<ListedTool> = []
    let cursor: string | undefined
    for (let page = 0; page < 100; page++) {
      const raw = yield* Effect.tryPromise({
        try: (signal) => client.listTools(cursor === undefined ? {} : { cursor }, { signal, timeout: startMs }),
        catch: (e) => new McpError({ server, reason: "ListFailed", message: `${server} did not list its tools: ${oneLine(messageOf(e))}` }),
      })
      const decoded = yield* Schema.decodeUnknownEffect(ListPage)(raw).pipe(
        Effect.mapError((e) => new McpError({ server, reason: "ListFailed", message: `${server} listed its tools in a shape gyre does not read: ${e.message}` })),
      )
      tools.push(...decoded.tools)
      cursor = decoded.nextCursor
      if (cursor === undefined) break
    }
    return tools
  })

  const callTool = (name: string, args: Readonly<Record<string, unknown>>) =>
    Effect.tryPromise({
      // the caller's timeout interrupts the call, which aborts it (the SDK sends notifications/cancelled)
      try: (signal) => client.callTool({ name, arguments: { ...args } }, undefined, { signal, timeout: 24 * 3600_000 }),
      catch: (e): CallFailed => {
        if (closed || (stdio !== undefined && stdio.exit !== undefined)) {
          return new CallFailed({ lost: true, message: stdio !== undefined ? `the server ended (${oneLine(exitText(stdio)) || "closed"})` : "the connection closed" })
        }
        if (e instanceof SdkError) {
          if (e.code === ErrorCode.ConnectionClosed) return new CallFailed({ lost: true, message: "the connection closed" })
          return new CallFailed({ lost: false, message: oneLine(e.message) })
        }
        // a result the SDK's schema rejects is the server's malformed answer, not a lost connection
        const issues = malformedIssues(e)
        if (issues !== undefined) return new CallFailed({ lost: false, message: `malformed result: ${issues}` })
        return new CallFailed({ lost: true, message: oneLine(messageOf(e)) })
      },
    })

  return { server, pid: stdio?.pid, closed: () => closed || (stdio !== undefined && stdio.exit !== undefined), listTools, callTool }
})

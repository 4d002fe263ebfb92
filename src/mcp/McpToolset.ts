/**
 * An MCP server's tools as gyre tools: the `McpToolset` service.
 *
 * Its layer starts the server (or opens a session at its URL), lists the tools, turns each
 * input JSON Schema into a Schema decoder (a schema it cannot turn stops the start, naming
 * the tool and the keyword) and makes each tool a `Tool` whose run calls the server with a
 * per-call timeout. Built once per run by the runner (an env's `services`), it closes the
 * server at the run's end, on failure and on interruption, leaving no process behind.
 *
 * A server that dies (or a connection that is lost) during a call, or that cannot be
 * started again for the next: the infrastructure failed, not the policy, so the call
 * fails with `InfraFault` and its episode is masked (never scored); the next call starts
 * a fresh server, and a start that fails makes the next wait (`Restarts.ts`: 250 ms,
 * doubled after each failure in a row, at most 8 s; calls in the meantime are masked).
 * A tool's own error answer (`isError`) or a call past its timeout is an error
 * observation. A server that fails to start at the run's start: the run stops before its
 * first step, with the command and its stderr.
 *
 * @since 0.1.0
 */
import { Config, Context, Duration, Effect, FileSystem, Layer, Predicate, RcRef, Result, type Scope } from "effect"
import * as PlatformFileSystem from "../platform/FileSystem.ts"
import * as Episode from "../env/Episode.ts"
import { InfraFault } from "../reward/Failures.ts"
import * as Tool from "../vocabulary/Tool.ts"
import * as Connection from "./Connection.ts"
import * as Content from "./Content.ts"
import * as InputSchema from "../tool/InputSchema.ts"
import { McpError } from "./McpError.ts"
import * as Render from "./Render.ts"
import * as Restarts from "./Restarts.ts"
import * as Server from "./Server.ts"

/** @since 0.1.0 @category models */
export interface Options {
  /** a call's time limit, after which it is an error observation (default 10 seconds) */
  readonly timeout?: Duration.Input
  /** the time a server has to start and answer `initialize` and `tools/list` (default 30 seconds) */
  readonly startTimeout?: Duration.Input
  /** calls of one tool in flight at once (default 16) */
  readonly concurrency?: number
  /** offer only these tools (default: every tool the server lists); a name it does not list stops the start */
  readonly include?: ReadonlyArray<string>
}

/** What a per-episode server may depend on (`McpToolset.perEpisode`). @since 0.1.0 @category models */
export interface EpisodeResources {
  readonly problem: unknown
  /** with `tempDir: true`: a folder of the episode's own, removed when it ends */
  readonly dir: string | undefined
}

/** How the toolset's episode reads calls: `Tool.episode`'s options but the tools. @since 0.1.0 @category models */
export type EpisodeOptions = Omit<Parameters<typeof Tool.episode>[0], "tools">

/** @since 0.1.0 @category models */
export interface Shape {
  /** the server, as `command args` or its URL */
  readonly server: string
  /** the tools as the server listed them (name, description, input JSON Schema) */
  readonly listed: ReadonlyArray<Connection.ListedTool>
  /** the same tools as gyre tools, for `Tool.episode` */
  readonly tools: ReadonlyArray<Tool.AnyTool>
  /** the tool list in a call syntax (see `Render.tools`) */
  readonly render: (syntax: Episode.ToolCallFormat | Tool.Syntax) => string
  /** the process id of the server in use (stdio; a fresh server is started if the last one ended) */
  readonly pid: Effect.Effect<number | undefined, McpError>
  /** how many servers this toolset has started (1 + restarts) */
  readonly starts: Effect.Effect<number>
}

const invalid = (server: string, tool: string, message: string) => new McpError({ server, reason: "InvalidTool", tool, message })

/** The tools of `listed` as gyre tools calling through `call`, or the first schema refused. */
const makeTools = (server: string, listed: ReadonlyArray<Connection.ListedTool>, options: Options, call: (name: string, args: unknown) => Effect.Effect<string, Tool.ToolFailure | InfraFault>) =>
  Effect.forEach(listed, (t) => {
    const decoder = InputSchema.toSchema(t.inputSchema)
    if (Result.isFailure(decoder)) {
      const { keyword, at, message } = decoder.failure
      return Effect.fail(
        new McpError({
          server,
          reason: "UnsupportedSchema",
          tool: t.name,
          keyword,
          message: `tool ${t.name} of ${server}: its input schema uses "${keyword}"${at.length > 0 ? ` at ${at}` : ""}, which gyre cannot turn into a Schema decoder (${message})`,
        }),
      )
    }
    return Effect.try({
      try: () =>
        Tool.make<unknown, string>({
          name: t.name,
          description: t.description ?? "",
          args: decoder.success,
          parseArgs: InputSchema.positional(t.inputSchema),
          run: (args) => call(t.name, args),
          timeout: options.timeout ?? "10 seconds",
          concurrency: options.concurrency ?? 16,
        }),
      catch: (e) => invalid(server, t.name, `tool ${t.name} of ${server}: ${e instanceof Error ? e.message : String(e)}`),
    })
  })

/**
 * Fails (naming the tools and what to use instead) when some of the toolset's tools take
 * arrays or objects: a bracket call ends at the first `]`, so they could never be called right.
 */
const bracketsCarry = (toolset: Shape) => {
  const fields = toolset.listed.map((t) => ({ name: t.name, structured: InputSchema.structured(t.inputSchema) }))
  const needy = fields.filter((t) => t.structured.length > 0).map((t) => `${t.name} (${t.structured.join(", ")})`)
  if (needy.length === 0) return Effect.void
  const plain = fields.filter((t) => t.structured.length === 0).map((t) => JSON.stringify(t.name))
  return Effect.fail(
    new Episode.EpisodeError({
      message: `tools of ${toolset.server} take arrays or objects, which the bracket call syntax cannot carry (a call ends at the first ]): ${needy.join(", ")}. ` +
        `Use McpToolset.episode({ syntax: Tool.hermes }) (JSON arguments; a chat tokenizer such as Qwen3's picks it with "auto")` +
        (plain.length > 0 ? `, or offer only the others with McpToolset.layer(server, { include: [${plain.join(", ")}] })` : ""),
    }),
  )
}

/**
 * Starts the server and makes its toolset, in the current scope.
 * @since 0.1.0 @category constructors
 */
export const make = Effect.fn("McpToolset.make")(function* (spec: Server.ServerSpec, options: Options = {}) {
  const server = Server.describe(spec)
  let starts = 0
  // a server that is down is not started again for every call: each failed start waits longer
  const restarts = Restarts.make()
  const connections = yield* RcRef.make({
    acquire: restarts.guard(Effect.suspend(() => {
      starts++
      return Connection.connect(spec, { startTimeout: options.startTimeout ?? "30 seconds" })
    })),
    // kept between calls until it is lost or the toolset closes
    idleTimeToLive: Duration.infinity,
  })
  const first = yield* Effect.scoped(RcRef.get(connections))
  const all = yield* first.listTools
  const include = options.include
  const missing = (include ?? []).filter((name) => !all.some((t) => t.name === name))
  const [firstMissing] = missing
  if (firstMissing !== undefined) return yield* invalid(server, firstMissing, `${server} lists no tool ${missing.join(", ")}; it lists ${all.map((t) => t.name).join(", ")}`)
  const listed = include === undefined ? all : all.filter((t) => include.includes(t.name))
  if (listed.length === 0) return yield* invalid(server, "", `${server} lists no tools`)

  // a lost connection is invalidated once, by the first call that sees it: the next get starts a fresh server
  const dropped = new WeakSet<Connection.Connection>()
  const drop = (c: Connection.Connection) =>
    dropped.has(c) ? Effect.void : Effect.sync(() => dropped.add(c)).pipe(
      Effect.andThen(RcRef.invalidate(connections)),
      Effect.andThen(Effect.logWarning(`MCP server ${server} was lost; the next call starts a fresh one`)),
    )
  const current = Effect.gen(function* () {
    const c = yield* RcRef.get(connections)
    if (!c.closed()) return c
    yield* drop(c)
    return yield* RcRef.get(connections)
  })
  const call = (name: string, args: unknown): Effect.Effect<string, Tool.ToolFailure | InfraFault> =>
    Effect.scoped(
      Effect.gen(function* () {
        if (!Predicate.isObject(args) || Array.isArray(args)) return yield* new Tool.ToolFailure({ message: `arguments of ${name} must be an object` })
        // a server that cannot be reached or started, or a call the transport lost: the infrastructure's failure
        const c = yield* current.pipe(Effect.mapError((e) => new InfraFault({ message: `MCP server ${server}: ${e.message}` })))
        const raw = yield* c.callTool(name, args).pipe(
          Effect.catchTag("CallFailed", (e) =>
            (e.lost ? drop(c) : Effect.void).pipe(
              Effect.andThen(Effect.fail(e.lost ? new InfraFault({ message: `MCP server ${server}: ${e.message}` }) : new Tool.ToolFailure({ message: e.message }))),
            )),
        )
        return yield* Content.observe(name, raw)
      }),
    )
  const tools = yield* makeTools(server, listed, options, call)
  return McpToolset.of({
    server,
    listed,
    tools,
    render: (syntax) => Render.tools(listed, syntax),
    pid: Effect.scoped(Effect.map(current, (c) => c.pid)),
    starts: Effect.sync(() => starts),
  })
})

/**
 * The tools of one MCP server, for an env's episode.
 *
 * @example
 * const inventory = McpToolset.layer(Server.stdio({ command: "node", args: ["inventory-server.js"] }), { timeout: "5 seconds" })
 * export default Env.make({ ..., episode: McpToolset.episode({ syntax: Tool.brackets }), services: inventory })
 * @since 0.1.0 @category services
 */
export class McpToolset extends Context.Service<McpToolset, Shape>()("gyre/mcp/McpToolset") {
  /** starts the server and makes the toolset in the current scope (what the layers run) @since 0.1.0 @category constructors */
  static readonly make = (spec: Server.ServerSpec, options: Options = {}): Effect.Effect<Shape, McpError, Scope.Scope> => make(spec, options)

  /** one server for the whole run, closed at its end @since 0.1.0 @category layers */
  static readonly layer = (spec: Server.ServerSpec, options: Options = {}): Layer.Layer<McpToolset, McpError> => Layer.effect(McpToolset, make(spec, options))

  /** the server read from a setting (e.g. a URL from the environment, else a command) @since 0.1.0 @category layers */
  static readonly layerConfig = (spec: Config.Config<Server.ServerSpec>, options: Options = {}): Layer.Layer<McpToolset, McpError | Config.ConfigError> =>
    Layer.effect(
      McpToolset,
      Effect.gen(function* () {
        return yield* make(yield* spec, options)
      }),
    )

  /**
   * An episode whose tools are the toolset's (see `Tool.episode` for the options): a turn
   * with a call gets the result (or the error) as an observation, a turn without one ends
   * the episode.
   * @since 0.1.0 @category constructors
   */
  static readonly episode = (options: EpisodeOptions = {}): Episode.Episode<unknown, Tool.ToolState, McpToolset> => {
    const chosen = options.syntax ?? "auto"
    const inner = new WeakMap<Shape, Episode.Episode<unknown, Tool.ToolState>>()
    const checked = new WeakSet<Shape>()
    return Episode.make<unknown, Tool.ToolState, McpToolset>({
      initial: () => ({ calls: 0 }),
      ...(chosen === "auto" ? { stopFor: (format: Episode.ToolCallFormat) => (format === "hermes" ? Tool.hermes : Tool.brackets).stop } : { stop: chosen.stop }),
      ...(options.limits !== undefined ? { limits: options.limits } : {}),
      step: (turn, problem) =>
        Effect.gen(function* () {
          const toolset = yield* McpToolset
          const syntax = chosen !== "auto" ? chosen.name : turn.toolCalls
          if (syntax === "brackets" && !checked.has(toolset)) yield* bracketsCarry(toolset)
          checked.add(toolset)
          let episode = inner.get(toolset)
          if (episode === undefined) {
            episode = Tool.episode({ ...options, tools: toolset.tools })
            inner.set(toolset, episode)
          }
          return yield* episode.step(turn, problem)
        }),
    })
  }

  /**
   * An episode with a server of its own: started when each episode starts, closed when it
   * ends (however it ends), for servers that keep state between calls. The env then needs
   * no `services` for it. A server that cannot start masks that episode (its
   * infrastructure failed), as a server lost mid-episode does.
   *
   * A server that keeps its state outside its process (a file, a folder) needs more than a
   * process of its own: `spec` may be a function of the episode (its problem and, with
   * `tempDir: true`, a fresh folder made for it and removed when it ends, however it ends)
   * that puts the state there, through `args`, `env` or `cwd`.
   *
   * @example
   * episode: McpToolset.perEpisode(Server.stdio({ command: "node", args: ["kv-server.js"] }), { limits: { maxToolCalls: 4 } })
   * // a graph file per episode, in a folder removed when the episode ends
   * episode: McpToolset.perEpisode(({ dir }) => Server.stdio({ command: "npx", args: ["@modelcontextprotocol/server-memory"], env: { MEMORY_FILE_PATH: `${dir}/memory.json` } }), { tempDir: true })
   * @since 0.1.0 @category constructors
   */
  static readonly perEpisode = (
    spec: Server.ServerSpec | ((episode: EpisodeResources) => Server.ServerSpec),
    options: Options & EpisodeOptions & { readonly tempDir?: boolean } = {},
  ): Episode.Episode<unknown, Episode.Provided<Tool.ToolState, McpToolset>, never> => {
    const { timeout, startTimeout, concurrency, include, tempDir, ...episode } = options
    const toolset: Options = {
      ...(timeout !== undefined ? { timeout } : {}),
      ...(startTimeout !== undefined ? { startTimeout } : {}),
      ...(concurrency !== undefined ? { concurrency } : {}),
      ...(include !== undefined ? { include } : {}),
    }
    if (typeof spec !== "function") return Episode.provide(McpToolset.episode(episode), McpToolset.layer(spec, toolset))
    // the folder is made before the server starts and removed after it has stopped (finalizers run in reverse)
    const layerFor = (problem: unknown) =>
      Layer.unwrap(
        Effect.gen(function* () {
          const dir = tempDir === true ? yield* (yield* FileSystem.FileSystem).makeTempDirectoryScoped({ prefix: "gyre-episode-" }) : undefined
          return McpToolset.layer(spec({ problem, dir }), toolset)
        }),
      ).pipe(Layer.provide(PlatformFileSystem.layer))
    return Episode.provide(McpToolset.episode(episode), layerFor)
  }
}

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
import { Config, Context, Duration, Effect, Layer, Predicate, RcRef, Result, type Scope } from "effect"
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
import * as EpisodeFolders from "./EpisodeFolders.ts"
import * as BracketsRefusal from "../tool/BracketsRefusal.ts"
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

/** What a per-episode server may depend on (`McpToolset.perEpisode`): the episode's problem. @since 0.1.0 @category models */
export interface EpisodeResources {
  readonly problem: unknown
}

/** With `tempDir: true`, also a folder of the episode's own, removed when it ends. @since 0.1.0 @category models */
export interface EpisodeFolder extends EpisodeResources {
  readonly dir: string
}

/** `McpToolset.perEpisode`'s options: the toolset's, the episode's, and `tempDir`. @since 0.1.0 @category models */
export type PerEpisodeOptions = Options & EpisodeOptions & { readonly tempDir?: boolean }

/** An episode with a server of its own. @since 0.1.0 @category models */
export type PerEpisode = Episode.Episode<unknown, Episode.Provided<Tool.ToolState, McpToolset>, never>

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

/** Fails (naming the tools and what to write instead in `api`) when the toolset cannot be offered in `syntax`. */
const refuse = (toolset: Shape, syntax: Episode.ToolCallFormat | string, api: BracketsRefusal.Api) => {
  const message = syntax === "brackets" ? BracketsRefusal.bracketsRefusal({ server: toolset.server, listed: toolset.listed, api }) : undefined
  return message === undefined ? Effect.void : Effect.fail(new Episode.EpisodeError({ message }))
}

/**
 * The toolset's episode (see `McpToolset.episode`), for `api`: what its refusal of a
 * syntax names. Checked at the run's start (`check`), and at the first turn of a toolset
 * not checked (an episode played outside a run).
 */
const toolsetEpisode = (options: EpisodeOptions, api: BracketsRefusal.Api): Episode.Episode<unknown, Tool.ToolState, McpToolset> => {
  const chosen = options.syntax ?? "auto"
  const syntaxOf = (format: Episode.ToolCallFormat) => (chosen !== "auto" ? chosen.name : format)
  const inner = new WeakMap<Shape, Episode.Episode<unknown, Tool.ToolState>>()
  const checked = new WeakSet<Shape>()
  const checkOnce = (toolset: Shape, format: Episode.ToolCallFormat) =>
    checked.has(toolset) ? Effect.void : Effect.tap(refuse(toolset, syntaxOf(format), api), () => Effect.sync(() => checked.add(toolset)))
  return Episode.make<unknown, Tool.ToolState, McpToolset, never, Effect.Effect<Episode.Next<Tool.ToolState>, Episode.EpisodeError, McpToolset>, McpToolset>({
    initial: () => ({ calls: 0 }),
    ...(chosen === "auto" ? { stopFor: (format: Episode.ToolCallFormat) => (format === "hermes" ? Tool.hermes : Tool.brackets).stop } : { stop: chosen.stop }),
    ...(options.limits !== undefined ? { limits: options.limits } : {}),
    check: ({ format }) =>
      Effect.gen(function* () {
        yield* refuse(yield* McpToolset, syntaxOf(format), api)
      }),
    step: (turn, problem) =>
      Effect.gen(function* () {
        const toolset = yield* McpToolset
        yield* checkOnce(toolset, turn.toolCalls)
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
   * the episode. A toolset whose tools take arrays or objects is refused in the bracket
   * syntax when the run starts (a bracket call ends at the first `]`).
   * @since 0.1.0 @category constructors
   */
  static readonly episode = (options: EpisodeOptions = {}): Episode.Episode<unknown, Tool.ToolState, McpToolset> => toolsetEpisode(options, "episode")

  /**
   * An episode with a server of its own: started when each episode starts, closed when it
   * ends (however it ends), for servers that keep state between calls. The env then needs
   * no `services` for it. A server that cannot start masks that episode (its
   * infrastructure failed), as a server lost mid-episode does.
   *
   * A server that keeps its state outside its process (a file, a folder) needs more than a
   * process of its own: `spec` may be a function of the episode that puts the state there,
   * through `args`, `env` or `cwd`. It gets `{ problem }`, and with `tempDir: true`
   * `{ problem, dir }`: `dir` (a `string`) is a fresh folder made for the episode and
   * removed when it ends, however it ends; without `tempDir: true` there is no `dir` (a
   * spec that reads it does not typecheck). Each folder's name holds the process id
   * (`gyre-episode-<pid>-...`): a run removes, at its start, those of processes that are
   * gone (killed with SIGKILL, say).
   *
   * The run starts one server (for the env's first training problem) when it starts, to
   * check its tools against the run's call syntax (`Episode`'s `check`).
   *
   * @example
   * episode: McpToolset.perEpisode(Server.stdio({ command: "node", args: ["kv-server.js"] }), { limits: { maxToolCalls: 4 } })
   * // a graph file per episode, in a folder removed when the episode ends
   * episode: McpToolset.perEpisode(
   *   ({ dir }) => Server.stdio({ command: "npx", args: ["-y", "@modelcontextprotocol/server-memory"], env: { MEMORY_FILE_PATH: `${dir}/memory.json` } }),
   *   { tempDir: true, syntax: Tool.hermes },
   * )
   * @since 0.1.0 @category constructors
   */
  static perEpisode(spec: (episode: EpisodeFolder) => Server.ServerSpec, options: PerEpisodeOptions & { readonly tempDir: true }): PerEpisode
  static perEpisode(spec: Server.ServerSpec | ((episode: EpisodeResources) => Server.ServerSpec), options?: PerEpisodeOptions & { readonly tempDir?: false }): PerEpisode
  static perEpisode(spec: Server.ServerSpec | ((episode: EpisodeFolder) => Server.ServerSpec), options: PerEpisodeOptions = {}): PerEpisode {
    const { timeout, startTimeout, concurrency, include, tempDir, ...episode } = options
    const toolset: Options = {
      ...(timeout !== undefined ? { timeout } : {}),
      ...(startTimeout !== undefined ? { startTimeout } : {}),
      ...(concurrency !== undefined ? { concurrency } : {}),
      ...(include !== undefined ? { include } : {}),
    }
    const played = toolsetEpisode(episode, "perEpisode")
    if (typeof spec !== "function") return Episode.provide(played, McpToolset.layer(spec, toolset))
    // the folder is made before the server starts and removed after it has stopped (finalizers run in reverse)
    const folder = EpisodeFolders.maker()
    const layerFor = (problem: unknown) =>
      Layer.unwrap(
        Effect.gen(function* () {
          if (tempDir !== true) return McpToolset.layer(spec(withoutFolder(problem)), toolset)
          return McpToolset.layer(spec({ problem, dir: yield* folder }), toolset)
        }),
      ).pipe(Layer.provide(PlatformFileSystem.layer))
    return Episode.provide(played, layerFor)
  }
}

/** The resources of an episode without `tempDir: true`: reading `dir` (code that got past the types) says what to add. */
const withoutFolder = (problem: unknown): EpisodeFolder =>
  Object.defineProperty({ problem }, "dir", {
    get: () => {
      throw new TypeError("McpToolset.perEpisode: the server spec reads `dir`, a folder made only with { tempDir: true }: add tempDir: true to its options")
    },
  }) as EpisodeFolder

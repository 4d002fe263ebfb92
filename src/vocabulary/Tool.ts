/**
 * Tools: a name, a Schema for the arguments and a handler, with a timeout and a bound on
 * how many calls run at once. `Tool.episode` turns a list of tools into an `Episode`: the
 * env finds a call in the model's turn (in the text syntax of `Tool.brackets`, or the
 * chat template's `Tool.hermes`), runs it and appends the result as an observation.
 *
 * A handler sees its arguments and, as a second argument, its episode: the problem, the
 * turns so far and the tool's own per-episode state (`state`: made when the episode
 * starts, released when it ends). It may require services (a database, the answer key of
 * a game), which the episode and then the env require, as a reward's do.
 *
 * What can go wrong, and what the model sees:
 * - a call that does not parse, names no tool, or whose arguments the Schema rejects:
 *   the parse policy (`onParseError`): `end` the episode (stop reason `parse_error`,
 *   the default) or `observe` an error and let the model try again;
 * - a handler that fails, throws, hangs past its timeout, returns what its `result`
 *   Schema rejects, or returns what has no text (undefined, a symbol, a function, a
 *   bigint, a circular object): an error observation (`tool_errors`), never a crash and
 *   never a silent 0. The episode goes on, and the rollout keeps the whole message
 *   (`toolError` of the turn in `rollouts.jsonl`) however short the observation cuts it;
 * - a result longer than `maxResultChars`: cut for the model, saying so, and kept whole
 *   in the rollout (`toolResult`);
 * - a handler or a state that fails with `InfraFault` (the infrastructure failed, not the
 *   policy: a tool server lost or not starting), or a state that cannot be made: the
 *   episode is masked (stop reason `infra_failed`), never scored, and the run goes on.
 *
 * @since 0.1.0
 */
import { Cause, Duration, Effect, Exit, Result, Schema, type Scope, Semaphore } from "effect"
import * as Episode from "../env/Episode.ts"
import { InfraFault } from "../reward/Failures.ts"
import { describeValue } from "../reward/Leaf.ts"
import * as Foreign from "../tool/Foreign.ts"
import * as InputSchema from "../tool/InputSchema.ts"
import { cut, DEFAULT_MAX_RESULT_CHARS, show } from "../tool/Result.ts"
import { brackets, hermes, messageOf, type Syntax } from "../tool/Syntax.ts"

export { brackets, hermes } from "../tool/Syntax.ts"
export type { Callable, Found, Syntax } from "../tool/Syntax.ts"
export { DEFAULT_MAX_RESULT_CHARS } from "../tool/Result.ts"
/** The infrastructure failed, not the policy: a tool failing with it masks its episode (the same `InfraFault` rewards use). */
export { InfraFault } from "../reward/Failures.ts"

/** A handler's own failure: shown to the model as an error observation. @since 0.1.0 @category errors */
export class ToolFailure extends Schema.TaggedError<ToolFailure>()("ToolFailure", {
  message: Schema.String,
}) {}

/**
 * What a handler may return. Failing with `ToolFailure` is the tool's answer (an error
 * observation); failing with `InfraFault` (the one rewards use) says the tool's
 * infrastructure failed, not the policy: the episode is masked, never scored.
 * @since 0.1.0 @category models
 */
export type ToolResult<O, R> = O | PromiseLike<O> | Effect.Effect<O, ToolFailure | InfraFault, R>

/** One turn of the episode as a tool sees it. @since 0.1.0 @category models */
export interface TurnSoFar {
  /** what the model wrote */
  readonly text: string
  /** what the env answered (absent for the turn holding the current call) */
  readonly observation?: string
}

/**
 * What a handler sees besides its arguments.
 * @since 0.1.0 @category models
 */
export interface ToolContext<P, S = undefined> {
  readonly problem: P
  /** the episode so far, turn by turn; the last is the turn holding this call */
  readonly turns: ReadonlyArray<TurnSoFar>
  /** this tool's per-episode state (`state` of `Tool.make`); undefined when it keeps none */
  readonly state: S
}

/** @since 0.1.0 @category models */
export interface Tool<A, R = never, P = unknown> {
  readonly "~gyre/Tool": "~gyre/Tool"
  readonly name: string
  readonly description: string
  readonly args: Schema.Codec<A, unknown>
  /** argument text of a bracket call -> the value the `args` Schema decodes (default: JSON, else the text) */
  readonly parseArgs: (text: string) => unknown
  /**
   * the handler, as text; what has no text is its failure. Called outside an episode
   * (no `context`), the handler sees no problem, no turns and no state.
   */
  readonly run: (args: A, context?: ToolContext<P, unknown>) => Effect.Effect<string, ToolFailure | InfraFault, R>
  /** makes this tool's state when an episode starts, in the episode's scope (absent when it keeps none) */
  readonly state?: ((problem: P) => Effect.Effect<unknown, ToolFailure | InfraFault, R | Scope.Scope>) | undefined
  readonly timeout: Duration.Input
  /** calls of this tool in flight at once, over the whole process */
  readonly concurrency: number
  /** the longest result shown to the model (default 2,000 characters); a longer one is cut, saying so */
  readonly maxResultChars?: number | undefined
}

/** Any tool. @since 0.1.0 @category models */
export type AnyTool<R = never> = Tool<any, R, any>

/** The services a tool (or a union of tools) requires. @since 0.1.0 @category models */
export type Services<T> = 0 extends (1 & T) ? never : T extends Tool<any, infer R, any> ? R : never

/** The problem type every one of a union of tools accepts. @since 0.1.0 @category models */
export type ProblemOf<T> = (T extends Tool<any, any, infer P> ? (problem: P) => void : never) extends (problem: infer I) => void ? I : never

const defaultParse = (text: string): unknown => {
  try {
    return JSON.parse(text)
  } catch {
    return text
  }
}

const outside: ToolContext<undefined, undefined> = { problem: undefined, turns: [], state: undefined }

const isPromiseLike = (u: unknown): u is PromiseLike<unknown> => typeof (u as PromiseLike<unknown> | undefined)?.then === "function"

/** A handler's value, Promise or Effect as an Effect; a rejection is the tool's failure. */
const fromResult = <O, R>(out: ToolResult<O, R>): Effect.Effect<O, ToolFailure | InfraFault, R> =>
  Effect.isEffect(out)
    ? out
    : isPromiseLike(out)
    ? Effect.tryPromise({ try: () => Promise.resolve(out), catch: (e) => (e instanceof InfraFault ? e : new ToolFailure({ message: messageOf(e) })) })
    : Effect.succeed(out)

/**
 * Defines a tool. `run` gets the arguments the `args` Schema decoded and the episode
 * (`ToolContext`: the problem, the turns so far, the tool's state); it may return a value,
 * a Promise or an Effect failing with `ToolFailure`, and may require services. Its value
 * is shown with `format` (default: a string as it is, a number as written, other JSON
 * values as JSON; anything else is the tool's failure, naming what it was).
 *
 * `state` makes the tool's per-episode state when an episode starts (a value, or an Effect
 * that may acquire resources in the episode's scope: they are released when the episode
 * ends, also on failure, timeout and interruption). A state that cannot be made masks the
 * episode (its infrastructure failed, not the policy), naming the tool.
 *
 * @example
 * const calculator = Tool.make({
 *   name: "calc",
 *   description: "a op b for integers",
 *   args: Schema.Struct({ a: Schema.Int, op: Schema.Literals(["+", "-", "*"]), b: Schema.Int }),
 *   parseArgs: (text) => { const m = /^(\d+)([-+*])(\d+)$/.exec(text); return m && { a: +m[1]!, op: m[2], b: +m[3]! } },
 *   run: ({ a, op, b }) => (op === "+" ? a + b : op === "-" ? a - b : a * b),
 * })
 * // a tool that needs its problem, its own state and a service
 * const check = Tool.make({
 *   name: "check",
 *   args: Schema.Int,
 *   state: (problem: Guess) => AnswerKey.use((key) => key.secret(problem.id)),   // once per episode
 *   run: (n, { state: secret }) => (n < secret ? "higher" : n > secret ? "lower" : "yes"),
 * })
 * @since 0.1.0 @category constructors
 */
export const make = <A, O = unknown, R = never, P = unknown, S = undefined, RS = never>(spec: {
  readonly name: string
  readonly description?: string
  readonly args: Schema.Codec<A, unknown>
  readonly parseArgs?: (text: string) => unknown
  /** the tool's per-episode state, made when an episode starts */
  readonly state?: (problem: P) => S | Effect.Effect<S, ToolFailure | InfraFault, RS>
  readonly run: (args: A, context: ToolContext<P, S>) => ToolResult<O, R>
  /** checks what `run` returned; a rejected result is an error observation */
  readonly result?: Schema.Codec<O, unknown>
  readonly format?: (result: O) => string
  /** default 10 seconds */
  readonly timeout?: Duration.Input
  /** default 16 */
  readonly concurrency?: number
  /** the longest result shown to the model (default 2,000 characters) */
  readonly maxResultChars?: number
}): Tool<A, R | Exclude<RS, Scope.Scope>, P> => {
  const fail = (what: string): never => {
    throw new TypeError(`Tool.make(${JSON.stringify(spec.name)}): ${what}`)
  }
  if (!/^[A-Za-z_][A-Za-z0-9_.-]*$/.test(spec.name)) fail("name must be letters, digits, '_', '-' or '.'")
  if (!Schema.isSchema(spec.args)) fail("args must be a Schema")
  const concurrency = spec.concurrency ?? 16
  if (!Number.isInteger(concurrency) || concurrency < 1) fail("concurrency must be a positive integer")
  const maxResultChars = spec.maxResultChars ?? DEFAULT_MAX_RESULT_CHARS
  if (!Number.isInteger(maxResultChars) || maxResultChars < 1) fail("maxResultChars must be a positive integer")
  if (spec.state !== undefined && typeof spec.state !== "function") fail("state must be a function from the problem to the state (a value or an Effect)")
  const timeout = spec.timeout ?? "10 seconds"
  const permits = Semaphore.makeUnsafe(concurrency)
  const checkResult = spec.result === undefined ? undefined : Schema.decodeUnknownEffect(spec.result)
  const text = (o: O): Effect.Effect<string, ToolFailure> => {
    if (spec.format === undefined) {
      const shown = show(o)
      return "text" in shown ? Effect.succeed(shown.text) : Effect.fail(new ToolFailure({ message: shown.error }))
    }
    const formatted: unknown = spec.format(o)
    return typeof formatted === "string" ? Effect.succeed(formatted) : Effect.fail(new ToolFailure({ message: `its format returned ${describeValue(formatted)}, not a string` }))
  }
  const call = (args: A, given?: ToolContext<P, unknown>): Effect.Effect<string, ToolFailure | InfraFault, R> =>
    Effect.suspend(() => {
      // a tool that keeps a state has none outside an episode: say so, rather than let the handler read undefined
      if (given === undefined && spec.state !== undefined) {
        return Effect.fail(new ToolFailure({ message: `tool ${spec.name} keeps a per-episode state: call it in an episode (Tool.episode), or give run a context with its state, run(args, { problem, turns: [], state })` }))
      }
      return fromResult(spec.run(args, (given ?? outside) as ToolContext<P, S>))
    }).pipe(
      Effect.flatMap((o) =>
        checkResult === undefined
          ? Effect.succeed(o)
          : checkResult(o).pipe(Effect.mapError((e) => new ToolFailure({ message: `returned ${describeValue(o)}, which its result Schema rejects: ${e.message}` })), Effect.as(o))
      ),
      Effect.flatMap(text),
      Effect.timeoutOrElse({
        duration: timeout,
        orElse: () => Effect.fail(new ToolFailure({ message: `timed out after ${Duration.format(Duration.fromInputUnsafe(timeout))}` })),
      }),
      // a throw or a defect in the handler is the tool's failure, shown to the model
      Effect.catchCause((cause): Effect.Effect<never, ToolFailure | InfraFault> => Cause.hasInterruptsOnly(cause) ? Effect.failCause(cause as Cause.Cause<never>) : Effect.fail(toFailure(cause))),
      permits.withPermits(1),
    )
  const makeState = spec.state
  return {
    "~gyre/Tool": "~gyre/Tool",
    name: spec.name,
    description: spec.description ?? "",
    args: spec.args,
    parseArgs: spec.parseArgs ?? defaultParse,
    run: call,
    state: makeState === undefined ? undefined : (problem: P) =>
      Effect.suspend(() => {
        const made = makeState(problem)
        return Effect.isEffect(made) ? made : Effect.succeed(made)
      }).pipe(Effect.catchDefect((d) => Effect.fail(new ToolFailure({ message: messageOf(d) })))) as Effect.Effect<unknown, ToolFailure | InfraFault, R | Exclude<RS, Scope.Scope> | Scope.Scope>,
    timeout,
    concurrency,
    maxResultChars,
  }
}

/**
 * A tool from one written for another framework: a JSON Schema (an MCP tool's
 * `inputSchema`, an OpenAI function's `parameters`), a zod 4 schema or the AI SDK's
 * `jsonSchema(...)` (see `tool/Foreign.ts`), and a handler. The arguments are decoded from
 * the JSON Schema; a schema that validates itself (zod) also runs, so the handler gets its
 * output; a bracket call's words are read as `InputSchema.positional` reads them.
 *
 * @example
 * const lookup = Tool.fromJsonSchema({
 *   name: "lookup", description: "a word's definition",
 *   inputSchema: { type: "object", properties: { word: { type: "string" } }, required: ["word"] },
 *   execute: ({ word }) => dictionary[word] ?? "no such word",
 * })
 * @since 0.1.0 @category constructors
 */
export const fromJsonSchema = <O>(spec: {
  readonly name: string
  readonly description?: string | undefined
  readonly inputSchema: unknown
  readonly execute: (args: any, context: ToolContext<unknown, undefined>) => O | PromiseLike<O>
  readonly timeout?: Duration.Input
  readonly concurrency?: number
}): AnyTool => {
  const where = `Tool.fromJsonSchema(${JSON.stringify(spec.name)})`
  const foreign = Foreign.read(spec.inputSchema, where)
  const args = InputSchema.toSchema(foreign.jsonSchema)
  if (Result.isFailure(args)) throw new TypeError(`${where}: its input schema is refused (${args.failure.keyword} at ${args.failure.at || "the root"}): ${args.failure.message}`)
  const validate = foreign.validate
  return make<unknown, unknown, never, unknown, undefined, never>({
    name: spec.name,
    description: spec.description ?? "",
    args: args.success,
    parseArgs: InputSchema.positional(foreign.jsonSchema),
    run: (value, context) =>
      validate === undefined ? fromResult<unknown, never>(spec.execute(value, context)) : validate(value).pipe(
        Effect.flatMap((v) => ("issues" in v ? Effect.fail(new ToolFailure({ message: `invalid arguments: ${v.issues}` })) : fromResult(spec.execute(v.value, context)))),
      ),
    ...(spec.timeout !== undefined ? { timeout: spec.timeout } : {}),
    ...(spec.concurrency !== undefined ? { concurrency: spec.concurrency } : {}),
  })
}

/**
 * A tool from an AI SDK `tool({ description, inputSchema, execute })`, so an agent's
 * existing toolset can also run in a gyre `Episode` (`Tool.episode`). `execute` gets the
 * arguments its schema outputs and `{ toolCallId, messages: [] }`.
 * @since 0.1.0 @category constructors
 */
export const fromAiSdk = (name: string, tool: { readonly description?: string | undefined; readonly inputSchema: unknown; readonly execute?: ((args: any, options: any) => unknown) | undefined }): AnyTool => {
  const execute = tool.execute
  if (typeof execute !== "function") throw new TypeError(`Tool.fromAiSdk(${JSON.stringify(name)}): the tool has no execute (the client answers it): give one that runs the tool`)
  return fromJsonSchema({ name, description: tool.description, inputSchema: tool.inputSchema, execute: (args, context) => execute(args, { toolCallId: `${name}-${context.turns.length}`, messages: [] }) as unknown })
}

const toFailure = (cause: Cause.Cause<unknown>): ToolFailure | InfraFault => {
  const error = Cause.squash(cause)
  return error instanceof ToolFailure || error instanceof InfraFault ? error : new ToolFailure({ message: messageOf(error) })
}

// ===== Tool episodes =====

/** The state of a tool episode. @since 0.1.0 @category models */
export interface ToolState {
  readonly calls: number
  /** the episode so far, as the tools see it (absent before the first turn) */
  readonly turns?: ReadonlyArray<TurnSoFar>
  /** each tool's per-episode state, by name (for the tools that keep one) */
  readonly tools?: Readonly<Record<string, unknown>>
}

/**
 * An episode in which the model may call `tools`: a turn with a call gets the result as an
 * observation; a turn without one ends the episode (it is the answer). The episode accepts
 * the problems every tool accepts and requires the services every tool requires; the
 * tools' per-episode states are made when it starts and released when it ends.
 * Per-episode services shared by several tools: `Episode.provide(Tool.episode(...), layer)`.
 * @since 0.1.0 @category constructors
 */
export const episode = <T extends ReadonlyArray<AnyTool<any>>>(options: {
  readonly tools: T
  /**
   * how calls are written: `brackets`, `hermes`, or `"auto"` (default): the run's
   * tokenizer decides, `hermes` when its chat template renders tool calls (`--tokenizer`
   * with Qwen3's, say), `brackets` for the embedded character model
   */
  readonly syntax?: Syntax | "auto"
  /** a call that does not parse: `end` the episode (default) or `observe` the error */
  readonly onParseError?: "end" | "observe"
  readonly limits?: Partial<Episode.Limits>
}): Episode.Episode<ProblemOf<T[number]>, ToolState, Services<T[number]>> => {
  type P = ProblemOf<T[number]>
  type R = Services<T[number]>
  const chosen = options.syntax ?? "auto"
  const syntaxFor = (format: Episode.ToolCallFormat): Syntax => (chosen !== "auto" ? chosen : format === "hermes" ? hermes : brackets)
  const tools: ReadonlyArray<Tool<unknown, R, P>> = options.tools
  if (tools.length === 0) throw new TypeError("Tool.episode: give at least one tool")
  const names = new Set(tools.map((t) => t.name))
  if (names.size !== tools.length) throw new TypeError("Tool.episode: tool names must be distinct")
  const limits = { ...Episode.DEFAULT_LIMITS, ...options.limits }
  const onParseError = options.onParseError ?? "end"
  type Stateful = Tool<unknown, R, P> & { readonly state: NonNullable<Tool<unknown, R, P>["state"]> }
  const stateful = tools.filter((t): t is Stateful => t.state !== undefined)
  const malformed = (syntax: Syntax, state: ToolState, message: string): Episode.Next<ToolState> =>
    onParseError === "end"
      ? Episode.end(state, { reason: "parse_error", parseErrors: 1, toolError: message })
      : Episode.observe(state, syntax.observation({ ok: false, error: message }), { parseErrors: 1, toolError: message })
  // the tools' states are made in the episode's scope; without any, the start needs no effect
  const start = stateful.length === 0 ? { initial: (): ToolState => ({ calls: 0 }) } : {
    open: (problem: P) =>
      Effect.forEach(stateful, (t) =>
        t.state(problem).pipe(
          Effect.map((s) => [t.name, s] as const),
          // the tool's infrastructure failed, not the policy: the episode is masked
          Effect.mapError((e) => new Episode.EpisodeError({ message: `tool ${t.name}: cannot make its state for the episode: ${e.message}`, infra: true, source: t.name })),
        )).pipe(Effect.map((made): ToolState => ({ calls: 0, tools: Object.fromEntries(made) }))),
  }
  return Episode.make<P, ToolState, R, R | Scope.Scope>({
    ...start,
    ...(chosen === "auto" ? { stopFor: (format: Episode.ToolCallFormat) => syntaxFor(format).stop } : { stop: chosen.stop }),
    limits,
    step: (turn, problem) =>
      Effect.gen(function* () {
        const syntax = syntaxFor(turn.toolCalls)
        const turns = [...(turn.state.turns ?? []), { text: turn.text }]
        const state = { ...turn.state, turns }
        const found = syntax.find(turn.text, tools)
        if (found._tag === "None") return Episode.end(state)
        if (found._tag === "Malformed") return malformed(syntax, state, found.message)
        if (state.calls >= limits.maxToolCalls) return Episode.end(state, { reason: "max_tool_calls" })
        const tool = tools.find((t) => t.name === found.tool)
        if (tool === undefined) {
          return yield* Effect.die(new Error(`Tool.episode: the call syntax found a call of ${JSON.stringify(found.tool)}, which is none of the episode's tools (${[...names].join(", ")})`))
        }
        const args = Schema.decodeUnknownExit(tool.args)(found.args)
        if (Exit.isFailure(args)) return malformed(syntax, state, `bad arguments for ${tool.name}: ${messageOf(Cause.squash(args.cause))}`)
        const result = yield* Effect.exit(tool.run(args.value, { problem, turns, state: state.tools?.[tool.name] }))
        const after = (observation: string): ToolState => ({ ...state, calls: state.calls + 1, turns: [...turns.slice(0, -1), { text: turn.text, observation }] })
        if (Exit.isFailure(result)) {
          const failure = toFailure(result.cause)
          if (failure instanceof InfraFault) {
            return yield* new Episode.EpisodeError({ message: `tool ${tool.name}: ${failure.message}`, infra: true, source: tool.name })
          }
          const message = failure.message
          const observation = syntax.observation({ ok: false, error: message })
          return Episode.observe(after(observation), observation, { toolCalls: 1, toolErrors: 1, toolError: message })
        }
        const { shown, full } = cut(result.value, tool.maxResultChars ?? DEFAULT_MAX_RESULT_CHARS)
        const observation = syntax.observation({ ok: true, text: shown })
        return Episode.observe(after(observation), observation, { toolCalls: 1, ...(full !== undefined ? { toolResult: full } : {}) })
      }),
  })
}

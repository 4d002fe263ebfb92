/**
 * Tools: a name, a Schema for the arguments and a handler, with a timeout and a bound on
 * how many calls run at once. `Tool.episode` turns a list of tools into an `Episode`: the
 * env finds a call in the model's turn (in the text syntax of `Tool.brackets`, or the
 * chat template's `Tool.hermes`), runs it and appends the result as an observation.
 *
 * What can go wrong, and what the model sees:
 * - a call that does not parse, names no tool, or whose arguments the Schema rejects:
 *   the parse policy (`onParseError`): `end` the episode (stop reason `parse_error`,
 *   the default) or `observe` an error and let the model try again;
 * - a handler that fails, throws, hangs past its timeout or returns what its `result`
 *   Schema rejects: an error observation (`tool_errors`), never a crash and never a
 *   silent 0. The episode goes on.
 *
 * @since 0.1.0
 */
import { Cause, Duration, Effect, Exit, Schema, Semaphore } from "effect"
import * as Episode from "./Episode.ts"

/** A handler's own failure: shown to the model as an error observation. @since 0.1.0 @category errors */
export class ToolFailure extends Schema.TaggedError<ToolFailure>()("ToolFailure", {
  message: Schema.String,
}) {}

/** What a handler may return. @since 0.1.0 @category models */
export type ToolResult<O, R> = O | PromiseLike<O> | Effect.Effect<O, ToolFailure, R>

/** @since 0.1.0 @category models */
export interface Tool<A, R = never> {
  readonly "~gyre/Tool": "~gyre/Tool"
  readonly name: string
  readonly description: string
  readonly args: Schema.Codec<A, unknown>
  /** argument text of a bracket call -> the value the `args` Schema decodes (default: JSON, else the text) */
  readonly parseArgs: (text: string) => unknown
  readonly run: (args: A) => Effect.Effect<string, ToolFailure, R>
  readonly timeout: Duration.Input
  /** calls of this tool in flight at once, over the whole process */
  readonly concurrency: number
}

/** Any tool. @since 0.1.0 @category models */
export type AnyTool<R = never> = Tool<any, R>

const defaultParse = (text: string): unknown => {
  try {
    return JSON.parse(text)
  } catch {
    return text
  }
}

/**
 * Defines a tool. `run` may return a value, a Promise or an Effect failing with
 * `ToolFailure`; its value is shown with `format` (default: `String`, JSON for objects).
 *
 * @example
 * const calculator = Tool.make({
 *   name: "calc",
 *   description: "a op b for integers",
 *   args: Schema.Struct({ a: Schema.Int, op: Schema.Literals(["+", "-", "*"]), b: Schema.Int }),
 *   parseArgs: (text) => { const m = /^(\d+)([-+*])(\d+)$/.exec(text); return m && { a: +m[1]!, op: m[2], b: +m[3]! } },
 *   run: ({ a, op, b }) => (op === "+" ? a + b : op === "-" ? a - b : a * b),
 * })
 * @since 0.1.0 @category constructors
 */
export const make = <A, O = unknown, R = never>(spec: {
  readonly name: string
  readonly description?: string
  readonly args: Schema.Codec<A, unknown>
  readonly parseArgs?: (text: string) => unknown
  readonly run: (args: A) => ToolResult<O, R>
  /** checks what `run` returned; a rejected result is an error observation */
  readonly result?: Schema.Codec<O, unknown>
  readonly format?: (result: O) => string
  /** default 10 seconds */
  readonly timeout?: Duration.Input
  /** default 16 */
  readonly concurrency?: number
}): Tool<A, R> => {
  if (!/^[A-Za-z_][A-Za-z0-9_.-]*$/.test(spec.name)) throw new TypeError(`Tool.make: name ${JSON.stringify(spec.name)} must be letters, digits, '_', '-' or '.'`)
  if (!Schema.isSchema(spec.args)) throw new TypeError(`Tool.make(${spec.name}): args must be a Schema`)
  const concurrency = spec.concurrency ?? 16
  if (!Number.isInteger(concurrency) || concurrency < 1) throw new TypeError(`Tool.make(${spec.name}): concurrency must be a positive integer`)
  const timeout = spec.timeout ?? "10 seconds"
  const permits = Semaphore.makeUnsafe(concurrency)
  const format = spec.format ?? ((o: O) => (typeof o === "object" && o !== null ? JSON.stringify(o) : String(o)))
  const checkResult = spec.result === undefined ? undefined : Schema.decodeUnknownEffect(spec.result)
  const call = (args: A): Effect.Effect<string, ToolFailure, R> =>
    Effect.suspend(() => {
      const out = spec.run(args)
      const value: Effect.Effect<O, ToolFailure, R> = Effect.isEffect(out)
        ? out
        : typeof (out as PromiseLike<O>)?.then === "function"
        ? Effect.tryPromise({ try: () => Promise.resolve(out as PromiseLike<O>), catch: (e) => new ToolFailure({ message: messageOf(e) }) })
        : Effect.succeed(out as O)
      return value.pipe(
        Effect.flatMap((o) =>
          checkResult === undefined
            ? Effect.succeed(o)
            : checkResult(o).pipe(Effect.mapError((e) => new ToolFailure({ message: `returned ${JSON.stringify(o)}, which its result Schema rejects: ${e.message}` })), Effect.as(o))
        ),
        Effect.map(format),
      )
    }).pipe(
      Effect.timeoutOrElse({
        duration: timeout,
        orElse: () => Effect.fail(new ToolFailure({ message: `timed out after ${Duration.format(Duration.fromInputUnsafe(timeout))}` })),
      }),
      // a throw or a defect in the handler is the tool's failure, shown to the model
      Effect.catchCause((cause): Effect.Effect<never, ToolFailure> => Cause.hasInterruptsOnly(cause) ? Effect.failCause(cause as Cause.Cause<never>) : Effect.fail(toFailure(cause))),
      permits.withPermits(1),
    )
  return {
    "~gyre/Tool": "~gyre/Tool",
    name: spec.name,
    description: spec.description ?? "",
    args: spec.args,
    parseArgs: spec.parseArgs ?? defaultParse,
    run: call,
    timeout,
    concurrency,
  }
}

const messageOf = (e: unknown) => (e instanceof Error ? e.message : typeof e === "string" ? e : JSON.stringify(e))

const toFailure = (cause: Cause.Cause<unknown>): ToolFailure => {
  const error = Cause.squash(cause)
  return error instanceof ToolFailure ? error : new ToolFailure({ message: messageOf(error) })
}

// ===== Syntax =====

/** A call found in a turn. @since 0.1.0 @category models */
export type Found =
  | { readonly _tag: "None" }
  | { readonly _tag: "Call"; readonly tool: string; readonly args: unknown }
  | { readonly _tag: "Malformed"; readonly message: string }

/**
 * How calls are written in a turn and how results come back.
 * @since 0.1.0 @category models
 */
export interface Syntax {
  readonly name: string
  /** strings that end a turn holding a call */
  readonly stop: ReadonlyArray<string>
  /** the call in a turn's text, if any */
  readonly find: (text: string, tools: ReadonlyArray<AnyTool<any>>) => Found
  /** the observation for a result or an error */
  readonly observation: (outcome: { readonly ok: true; readonly text: string } | { readonly ok: false; readonly error: string }) => string
}

const ERROR_CHARS = 40

/**
 * The text syntax for small character-level models: `[name args]`, or `[args]` when the
 * env has one tool; the turn stops at `]`. A result comes back as `=<result>;`, an error
 * as `=error: <message>;` (the message cut to 40 characters).
 *
 *   turn "[47+38]"  ->  observation "=85;"
 * @since 0.1.0 @category syntax
 */
export const brackets: Syntax = {
  name: "brackets",
  stop: ["]"],
  find: (text, tools) => {
    const open = text.indexOf("[")
    if (open < 0) return { _tag: "None" }
    const close = text.indexOf("]", open)
    if (close < 0) return { _tag: "Malformed", message: "the call has no closing ]" }
    const inner = text.slice(open + 1, close)
    const space = inner.indexOf(" ")
    const named = space > 0 ? tools.find((t) => t.name === inner.slice(0, space)) : tools.find((t) => t.name === inner)
    if (named !== undefined) return { _tag: "Call", tool: named.name, args: named.parseArgs(space > 0 ? inner.slice(space + 1) : "") }
    if (tools.length === 1) return { _tag: "Call", tool: tools[0]!.name, args: tools[0]!.parseArgs(inner) }
    return { _tag: "Malformed", message: `no tool named ${JSON.stringify(inner.split(" ")[0])}; tools: ${tools.map((t) => t.name).join(", ")}` }
  },
  observation: (o) => (o.ok ? `=${o.text};` : `=error: ${o.error.slice(0, ERROR_CHARS)};`),
}

/**
 * The Hermes / Qwen tool-call format of chat models (`--tokenizer` with a chat template
 * that has tools, Qwen3's among them): the model writes
 * `<tool_call>\n{"name": "calc", "arguments": {...}}\n</tool_call>`; the result comes
 * back as a tool turn in the ChatML layout Qwen3's template renders:
 * `<|im_end|>\n<|im_start|>user\n<tool_response>\n...\n</tool_response><|im_end|>\n<|im_start|>assistant\n`.
 * @since 0.1.0 @category syntax
 */
export const hermes: Syntax = {
  name: "hermes",
  stop: ["</tool_call>"],
  find: (text, tools) => {
    const open = text.indexOf("<tool_call>")
    if (open < 0) return { _tag: "None" }
    const close = text.indexOf("</tool_call>", open)
    if (close < 0) return { _tag: "Malformed", message: "the call has no closing </tool_call>" }
    let call: unknown
    try {
      call = JSON.parse(text.slice(open + "<tool_call>".length, close))
    } catch (e) {
      return { _tag: "Malformed", message: `the call is not JSON: ${messageOf(e)}` }
    }
    const name = (call as { name?: unknown })?.name
    const tool = tools.find((t) => t.name === name)
    if (tool === undefined) return { _tag: "Malformed", message: `no tool named ${JSON.stringify(name)}; tools: ${tools.map((t) => t.name).join(", ")}` }
    return { _tag: "Call", tool: tool.name, args: (call as { arguments?: unknown }).arguments ?? {} }
  },
  observation: (o) =>
    `<|im_end|>\n<|im_start|>user\n<tool_response>\n${o.ok ? o.text : `error: ${o.error}`}\n</tool_response><|im_end|>\n<|im_start|>assistant\n`,
}

// ===== Tool episodes =====

/** The state of a tool episode. @since 0.1.0 @category models */
export interface ToolState {
  readonly calls: number
}

/**
 * An episode in which the model may call `tools`: a turn with a call gets the result as an
 * observation; a turn without one ends the episode (it is the answer).
 * @since 0.1.0 @category constructors
 */
export const episode = <R = never>(options: {
  readonly tools: ReadonlyArray<AnyTool<R>>
  /**
   * how calls are written: `brackets`, `hermes`, or `"auto"` (default): the run's
   * tokenizer decides, `hermes` when its chat template renders tool calls (`--tokenizer`
   * with Qwen3's, say), `brackets` for the embedded character model
   */
  readonly syntax?: Syntax | "auto"
  /** a call that does not parse: `end` the episode (default) or `observe` the error */
  readonly onParseError?: "end" | "observe"
  readonly limits?: Partial<Episode.Limits>
}): Episode.Episode<unknown, ToolState, R> => {
  const chosen = options.syntax ?? "auto"
  const syntaxFor = (format: Episode.ToolCallFormat): Syntax => (chosen !== "auto" ? chosen : format === "hermes" ? hermes : brackets)
  const tools = options.tools
  if (tools.length === 0) throw new TypeError("Tool.episode: give at least one tool")
  const names = new Set(tools.map((t) => t.name))
  if (names.size !== tools.length) throw new TypeError("Tool.episode: tool names must be distinct")
  const limits = { ...Episode.DEFAULT_LIMITS, ...options.limits }
  const onParseError = options.onParseError ?? "end"
  const malformed = (syntax: Syntax, state: ToolState, message: string): Episode.Next<ToolState> =>
    onParseError === "end"
      ? Episode.end(state, { reason: "parse_error", parseErrors: 1 })
      : Episode.observe(state, syntax.observation({ ok: false, error: message }), { parseErrors: 1 })
  return Episode.make<unknown, ToolState, R>({
    initial: () => ({ calls: 0 }),
    ...(chosen === "auto" ? { stopFor: (format: Episode.ToolCallFormat) => syntaxFor(format).stop } : { stop: chosen.stop }),
    limits,
    step: (turn) =>
      Effect.gen(function* () {
        const syntax = syntaxFor(turn.toolCalls)
        const found = syntax.find(turn.text, tools)
        if (found._tag === "None") return Episode.end(turn.state)
        if (found._tag === "Malformed") return malformed(syntax, turn.state, found.message)
        if (turn.state.calls >= limits.maxToolCalls) return Episode.end(turn.state, { reason: "max_tool_calls" })
        const tool = tools.find((t) => t.name === found.tool)!
        const args = Schema.decodeUnknownExit(tool.args)(found.args)
        if (Exit.isFailure(args)) return malformed(syntax, turn.state, `bad arguments for ${tool.name}: ${Cause.squash(args.cause) instanceof Error ? (Cause.squash(args.cause) as Error).message : "rejected"}`)
        const state = { calls: turn.state.calls + 1 }
        const result = yield* Effect.exit(tool.run(args.value))
        return Exit.isSuccess(result)
          ? Episode.observe(state, syntax.observation({ ok: true, text: result.value }), { toolCalls: 1 })
          : Episode.observe(state, syntax.observation({ ok: false, error: toFailure(result.cause).message }), { toolCalls: 1, toolErrors: 1 })
      }),
  })
}

/**
 * Episodes: an environment the model talks to for several turns.
 *
 * An episode starts from the prompt. After each sampled turn the env's `step` sees the
 * turn's text and its own state, and either ends the episode or answers with an
 * observation (a tool's result, a judge's remark, the next question) that is appended to
 * the sequence and never trained. Per-turn rewards add to the final reward (the env's
 * `reward`, which scores the last turn as `completion`).
 *
 * A single-turn env is the episode of one turn: `Episode.singleTurn`.
 *
 * @since 0.1.0
 */
import { type Context, type Duration, Effect, Layer, Schema, type Scope } from "effect"

/**
 * Why an episode ended:
 * - `completed`: the env ended it (a final answer)
 * - `max_turns`, `max_tokens`, `max_tool_calls`: a limit was reached
 * - `parse_error`: a turn did not parse and the parse policy is `end`
 * - `timeout`: the episode's wall-clock budget ran out
 * - `context_overflow`: the next turn would not fit the model's context
 * @since 0.1.0 @category models
 */
export const StopReason = Schema.Literals(["completed", "max_turns", "max_tokens", "max_tool_calls", "parse_error", "timeout", "context_overflow", "infra_failed"])
export type StopReason = typeof StopReason.Type

/** What the env sees of one sampled turn. @since 0.1.0 @category models */
export interface Turn<S> {
  /** the env's state before this turn */
  readonly state: S
  /** 0 for the first turn */
  readonly index: number
  /** the turn's decoded text, without the end-of-sequence token */
  readonly text: string
  /** whether the turn ended with the end-of-sequence token (a final answer, for most envs) */
  readonly ended: boolean
  /** "stop" (a stop string, a stop token or EOS) or "length" (maxTokens) */
  readonly stopReason: "stop" | "length"
  /** the run's tool-call format: `hermes` when the tokenizer's chat template renders tool calls, else `brackets` */
  readonly toolCalls: ToolCallFormat
}

/** How the run's model writes tool calls (see `Tokenizer.toolCalls`). @since 0.1.0 @category models */
export type ToolCallFormat = "brackets" | "hermes"

/** The env's answer to a turn. @since 0.1.0 @category models */
export type Next<S> =
  | {
    readonly _tag: "Observe"
    readonly state: S
    /** appended to the sequence as-is (tokenized, never trained) */
    readonly observation: string
    /** a reward for this turn, added to the episode's total */
    readonly reward?: number
    /** counted in `env/<name>/tool_calls`, `tool_errors` and `parse_errors` */
    readonly toolCalls?: number
    readonly toolErrors?: number
    readonly parseErrors?: number
    /** the whole message of this turn's tool or parse error, kept with the turn in `rollouts.jsonl` (the observation may show it cut) */
    readonly toolError?: string
    /** a tool's whole result when the observation shows it cut, kept with the turn in `rollouts.jsonl` */
    readonly toolResult?: string
  }
  | {
    readonly _tag: "End"
    readonly state: S
    readonly reward?: number
    /** default `completed` */
    readonly reason?: StopReason
    readonly toolCalls?: number
    readonly toolErrors?: number
    readonly parseErrors?: number
    /** the whole message of the error that ended the episode, kept with the turn in `rollouts.jsonl` */
    readonly toolError?: string
  }

/** @since 0.1.0 @category constructors */
export const observe = <S>(state: S, observation: string, extra: Omit<Extract<Next<S>, { _tag: "Observe" }>, "_tag" | "state" | "observation"> = {}): Next<S> => ({
  _tag: "Observe",
  state,
  observation,
  ...extra,
})

/** @since 0.1.0 @category constructors */
export const end = <S>(state: S, extra: Omit<Extract<Next<S>, { _tag: "End" }>, "_tag" | "state"> = {}): Next<S> => ({ _tag: "End", state, ...extra })

/**
 * An env's step failed: the run stops, naming the env, the turn and the problem. With
 * `infra` (the env's infrastructure failed, not the policy: a tool server that is lost or
 * cannot start, a tool's state that cannot be made), the episode is masked instead (stop
 * reason `infra_failed`, never trained on, its reason in `rollouts.jsonl`) and the run
 * goes on; `source` names what failed (a tool), counted as `tool/<source>/infra_failed`.
 * @since 0.1.0 @category errors
 */
export class EpisodeError extends Schema.TaggedError<EpisodeError>()("EpisodeError", {
  message: Schema.String,
  infra: Schema.optional(Schema.Boolean),
  source: Schema.optional(Schema.String),
}) {}

/** What an episode's `check` sees at the start of a run. @since 0.1.0 @category models */
export interface CheckContext<P> {
  /** the run's tool-call format */
  readonly format: ToolCallFormat
  /** a problem of the env's (its first training problem), for services made per problem */
  readonly problem: P
}

/** Limits on one episode. @since 0.1.0 @category models */
export interface Limits {
  /** sampled turns (default 4) */
  readonly maxTurns: number
  /** tokens after the prompt, sampled and observed (default: no limit but the context) */
  readonly maxTokens: number
  /** tool calls (default 4) */
  readonly maxToolCalls: number
  /** wall-clock budget of the whole episode (default 5 minutes) */
  readonly timeout: Duration.Input
}

/** @since 0.1.0 @category constants */
export const DEFAULT_LIMITS: Limits = { maxTurns: 4, maxTokens: Number.MAX_SAFE_INTEGER, maxToolCalls: 4, timeout: "5 minutes" }

/**
 * How an env plays an episode: its state at the start, what it does after each turn, the
 * stop strings that end a turn (e.g. the `]` that closes a tool call), and limits.
 * @since 0.1.0 @category models
 */
export interface Episode<P, S = unknown, R = never> {
  readonly "~gyre/Episode": "~gyre/Episode"
  /** the state at the start, when it needs no effect (see `open`) */
  readonly initial: (problem: P) => S
  /**
   * the state at the start, made by an effect in the episode's own scope: what it
   * acquires is released when the episode ends, however it ends (the env ends it, a
   * limit, a timeout, a failure or an interruption). When present, used instead of `initial`.
   */
  readonly open?: ((problem: P) => Effect.Effect<S, EpisodeError, R | Scope.Scope>) | undefined
  readonly step: (turn: Turn<S>, problem: P) => Effect.Effect<Next<S>, EpisodeError, R>
  /** strings that end a turn, added to the sampling `stop` of every turn */
  readonly stop: ReadonlyArray<string>
  /** when the stop strings depend on the run's tool-call format, they come from here instead */
  readonly stopFor?: ((format: ToolCallFormat) => ReadonlyArray<string>) | undefined
  readonly limits: Limits
  /**
   * run once when a run (or `gyre eval`) starts, before any episode, in a scope of its
   * own: what the episode cannot do with the run's format and services fails here, so the
   * run stops before its first step instead of at a turn
   */
  readonly check?: ((start: CheckContext<P>) => Effect.Effect<void, EpisodeError, R | Scope.Scope>) | undefined
}

/** The services a step's result requires. @since 0.1.0 @category models */
export type StepServices<Out> = 0 extends (1 & Out) ? never : Out extends Effect.Effect<any, any, infer R> ? R : never

/**
 * Defines an episode. Its state at the start comes from `initial` (a plain value) or from
 * `open` (an effect run in the episode's scope: a sandbox, a session, a scratch file,
 * released when the episode ends, also on failure, timeout and interruption); give one of
 * the two. The episode requires the services its `step`, its `open` and its `check` (run
 * once when a run starts, with its tool-call format) require.
 *
 * @example
 * Episode.make({
 *   initial: () => ({ guesses: 0 }),
 *   step: (turn, problem) => Effect.succeed(
 *     Number(turn.text) === problem.secret ? Episode.end(turn.state) : Episode.observe({ guesses: turn.state.guesses + 1 }, " higher?"),
 *   ),
 *   limits: { maxTurns: 5 },
 * })
 * @since 0.1.0 @category constructors
 */
export const make = <P, S, R = never, RO = never, Out extends Effect.Effect<Next<S>, EpisodeError, any> = Effect.Effect<Next<S>, EpisodeError, R>, RC = never>(spec: {
  /** the state at the start of an episode (give this or `open`) */
  readonly initial?: (problem: P) => S
  /** the state at the start, made by an Effect in the episode's scope (a server per episode, say); give this or `initial` */
  readonly open?: (problem: P) => Effect.Effect<S, EpisodeError, RO>
  /** after each sampled turn: the next observation and state, or the end of the episode */
  readonly step: (turn: Turn<S>, problem: P) => Out
  /** strings that end a sampled turn (e.g. the `]` that closes a bracket tool call) */
  readonly stop?: ReadonlyArray<string>
  /** the stop strings for the run's tool-call format, instead of `stop` */
  readonly stopFor?: (format: ToolCallFormat) => ReadonlyArray<string>
  /** limits on turns, tokens, tool calls and time (`Limits`; defaults 4, no limit, 4, 5 minutes) */
  readonly limits?: Partial<Limits>
  /** run once when the run starts, with its tool-call format: fail here to stop the run before any sample */
  readonly check?: (start: CheckContext<P>) => Effect.Effect<void, EpisodeError, RC>
}): Episode<P, S, R | StepServices<Out> | Exclude<RO, Scope.Scope> | Exclude<RC, Scope.Scope>> => {
  const limits = { ...DEFAULT_LIMITS, ...spec.limits }
  for (const key of ["maxTurns", "maxTokens", "maxToolCalls"] as const) {
    if (!Number.isInteger(limits[key]) || limits[key] < 1) throw new TypeError(`Episode.make: limits.${key} must be a positive integer, got ${limits[key]}`)
  }
  for (const s of spec.stop ?? []) if (typeof s !== "string" || s.length === 0) throw new TypeError("Episode.make: stop strings must be non-empty strings")
  const { initial, open } = spec
  if ((initial === undefined) === (open === undefined)) throw new TypeError("Episode.make: give the state at the start as one of initial or open")
  return {
    "~gyre/Episode": "~gyre/Episode",
    initial: initial ?? (() => {
      throw new TypeError("Episode: this episode's state is made by open; start it with Episode.start")
    }),
    open: open as ((problem: P) => Effect.Effect<S, EpisodeError, R | StepServices<Out> | Exclude<RO, Scope.Scope> | Scope.Scope>) | undefined,
    step: spec.step as (turn: Turn<S>, problem: P) => Effect.Effect<Next<S>, EpisodeError, R | StepServices<Out>>,
    stop: spec.stop ?? [],
    stopFor: spec.stopFor,
    limits,
    check: spec.check as ((start: CheckContext<P>) => Effect.Effect<void, EpisodeError, Exclude<RC, Scope.Scope> | Scope.Scope>) | undefined,
  }
}

/**
 * An episode's state at its start: `open` run in the current scope (which the caller
 * closes when the episode ends), else `initial`. A throw in either is an `EpisodeError`.
 * @since 0.1.0 @category running
 */
export const start = <P, S, R>(episode: Episode<P, S, R>, problem: P): Effect.Effect<S, EpisodeError, R | Scope.Scope> => {
  const { open } = episode
  return (open !== undefined ? Effect.suspend(() => open(problem)) : Effect.sync(() => episode.initial(problem))).pipe(
    Effect.catchDefect((d) => Effect.fail(new EpisodeError({ message: d instanceof Error ? d.message : String(d) }))),
  )
}

/** The state of an episode given per-episode services by `provide`. @since 0.1.0 @category models */
export interface Provided<S, ROut> {
  readonly state: S
  readonly services: Context.Context<ROut>
}

/**
 * Gives an episode services of its own: `layer` (or `layer(problem)`) is built when each
 * episode starts and closed when it ends, however it ends; the episode's `open` and `step`
 * (a `Tool.episode`'s tools, their states) get what it provides, so the episode no longer
 * requires those services and requires what the layer does instead. A layer that cannot be
 * built masks that episode (its infrastructure failed). The episode's `check`, when it
 * has one, runs at the run's start with the layer built for the problem it is given: one
 * that cannot be built then stops the start.
 *
 * @example
 * // a scratch database per episode, shared by the tools that require it
 * Episode.provide(Tool.episode({ tools: [insert, query] }), Scratch.layer)
 * @since 0.1.0 @category combinators
 */
export const provide = <P, S, R, ROut, E, RIn>(
  episode: Episode<P, S, R>,
  layer: Layer.Layer<ROut, E, RIn> | ((problem: P) => Layer.Layer<ROut, E, RIn>),
): Episode<P, Provided<S, ROut>, Exclude<R, ROut> | RIn> => {
  if (typeof layer !== "function" && !Layer.isLayer(layer)) throw new TypeError("Episode.provide: give a Layer, or a function from the problem to a Layer")
  const layerFor = (problem: P): Layer.Layer<ROut, E, RIn> => (typeof layer === "function" ? layer(problem) : layer)
  const { check } = episode
  return {
    ...episode,
    initial: () => {
      throw new TypeError("Episode: this episode's state is made by open; start it with Episode.start")
    },
    open: (problem) =>
      Effect.gen(function* () {
        // services that cannot be built (a server that does not start) are the infrastructure's failure
        const services = yield* Layer.build(layerFor(problem)).pipe(
          Effect.mapError((e) => new EpisodeError({ message: `the episode's services could not be built: ${e instanceof Error ? e.message : String(e)}`, infra: true })),
        )
        const state = yield* start(episode, problem).pipe(Effect.provideContext(services))
        return { state, services }
      }),
    step: (turn, problem) =>
      episode.step({ ...turn, state: turn.state.state }, problem).pipe(
        Effect.provideContext(turn.state.services),
        Effect.map((next): Next<Provided<S, ROut>> => ({ ...next, state: { state: next.state, services: turn.state.services } })),
      ),
    check: check === undefined ? undefined : (start) =>
      Effect.gen(function* () {
        const services = yield* Layer.build(layerFor(start.problem)).pipe(
          Effect.mapError((e) => new EpisodeError({ message: `the episode's services could not be built: ${e instanceof Error ? e.message : String(e)}` })),
        )
        return yield* check(start).pipe(Effect.provideContext(services))
      }),
  }
}

/** The episode of a single-turn env: one turn, then the end. @since 0.1.0 @category constructors */
export const singleTurn: Episode<unknown, undefined> = make({
  initial: () => undefined,
  step: (turn) => Effect.succeed(end(turn.state)),
  limits: { maxTurns: 1 },
})

/** @since 0.1.0 @category guards */
export const isEpisode = (u: unknown): u is Episode<unknown, unknown, unknown> =>
  typeof u === "object" && u !== null && (u as { "~gyre/Episode"?: unknown })["~gyre/Episode"] === "~gyre/Episode"

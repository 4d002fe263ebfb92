/**
 * What an agent env holds (made by `Agent.env`, read by the env definition and the
 * runner): the function that plays an episode, what it is given, and its limits.
 *
 * @since 0.1.0
 */
import type { Duration } from "effect"

/** What an agent's episode is given. @since 0.1.0 @category models */
export interface AgentContext<P> {
  readonly problem: P
  /** the run's OpenAI-compatible endpoint, ending in `/v1` */
  readonly baseURL: string
  /** this episode's key: send it as the API key (`Authorization: Bearer <key>`) */
  readonly apiKey: string
  /** the model name to ask for */
  readonly model: string
  /** aborted when the episode's time is up or the run stops: pass it to the client */
  readonly signal: AbortSignal
  /** the episode's index in its group (0 .. groupSize - 1) */
  readonly index: number
}

/** Limits on one agent episode. @since 0.1.0 @category models */
export interface Limits {
  /** completions the agent may ask for (default 8) */
  readonly maxTurns: number
  /** wall-clock budget of the whole episode (default 5 minutes) */
  readonly timeout: Duration.Input
}

/** @since 0.1.0 @category constants */
export const DEFAULT_LIMITS: Limits = { maxTurns: 8, timeout: "5 minutes" }

/** An env's agent: the function that plays an episode, and its limits. @since 0.1.0 @category models */
export interface Agent<P> {
  readonly run: (context: AgentContext<P>) => unknown
  readonly limits: Limits
}


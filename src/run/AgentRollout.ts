/**
 * Playing a group's episodes of an agent env: each of the G episodes gets its own key on
 * the run's agent endpoint and runs the env's agent function concurrently; the endpoint
 * samples and records every completion; when the function returns (or throws, or its
 * time is up) the episode's record is built from the recorded tokens.
 *
 * @since 0.1.0
 */
import { Cause, Effect, Exit, Option } from "effect"
import { messageOf } from "../tool/Syntax.ts"
import { outputText } from "../vocabulary/Agent.ts"
import type { Agent } from "../agent/Spec.ts"
import { Endpoint } from "../agent/Endpoint.ts"
import type { Completion } from "../agent/Transcript.ts"
import { Sampler } from "../services/Sampler.ts"
import { Tokenizer, type TokenizerShape } from "../services/Tokenizer.ts"
import { ContextLength, type EpisodeRecord, type GroupOptions, type TurnRecord } from "./Rollout.ts"
import { RunError } from "./Settings.ts"

/** Whether `later` goes on from `earlier` (its input is `earlier`'s input and sampled tokens, then more). */
const extendsTurn = (earlier: Completion, later: Completion): boolean => {
  const head = earlier.input.length + earlier.sampled.length
  if (later.input.length < head) return false
  for (let j = 0; j < earlier.input.length; j++) if (later.input[j] !== earlier.input[j]) return false
  for (let j = 0; j < earlier.sampled.length; j++) if (later.input[earlier.input.length + j] !== earlier.sampled[j]) return false
  return true
}

/**
 * The recorded completions as turns; a turn's observation is what the agent sent before
 * the next one that goes on from it, and a turn conditioned on a reply the agent rewrote
 * keeps that text (`rewritten`).
 */
const turnsOf = (tokenizer: TokenizerShape, completions: ReadonlyArray<Completion>): Array<TurnRecord> =>
  completions.map((c, k) => {
    const next = completions[k + 1]
    const observation = next !== undefined && extendsTurn(c, next) ? tokenizer.decode(next.input.slice(c.input.length + c.sampled.length)) : undefined
    return {
      input: c.input,
      sampled: c.sampled,
      logprobs: c.logprobs,
      text: c.text,
      stopReason: c.stopReason,
      ...(observation !== undefined ? { observation } : {}),
      ...(c.rewritten !== undefined ? { rewritten: c.rewritten } : {}),
    }
  })

/** Why an episode has no completion: the endpoint refused the agent's request (the refusal says why), else the agent failed, else it never asked. */
const noCompletion = (refused: { readonly code: string; readonly message: string } | undefined, failed: string | undefined): string =>
  refused !== undefined
    ? `the endpoint refused the agent's request (${refused.code}): ${refused.message}`
    : failed ?? "the agent asked the endpoint for no completion (give its client AgentContext.baseURL, apiKey and model)"

/** One episode: the agent run against its own key, its key retired after, its record built. */
const playAgent = (agent: Agent<unknown>, options: GroupOptions, i: number) =>
  Effect.gen(function* () {
    const endpoint = yield* Endpoint
    const tokenizer = yield* Tokenizer
    const { apiKey, session } = yield* endpoint.open({
      sampling: options.sampling,
      affinityKey: options.affinityKey,
      version: options.version,
      index: i,
      context: yield* ContextLength,
      maxTurns: agent.limits.maxTurns,
      // the group's own sampler: on an episode worker, not the one the endpoint was made with
      sampler: yield* Sampler,
    })
    const run = Effect.tryPromise({
      try: (signal) => Promise.resolve(agent.run({ problem: options.task.problem, baseURL: endpoint.baseURL, apiKey, model: endpoint.model, signal, index: i })),
      catch: (e) => e,
    })
    const exit = yield* run.pipe(Effect.timeoutOption(agent.limits.timeout), Effect.exit, Effect.ensuring(endpoint.close(apiKey)))
    const completions = session.completions
    const record: EpisodeRecord = {
      turns: turnsOf(tokenizer, completions),
      stop: "completed",
      toolCalls: completions.reduce((n, c) => n + (c.chat?.reply.toolCalls.length ?? 0), 0),
      toolErrors: 0,
      parseErrors: 0,
      turnReward: 0,
      version: Math.min(options.version, ...completions.map((c) => c.version)),
      agent: { requests: completions.length, diverged: completions.reduce((n, c) => n + c.diverged, 0), rewritten: session.rewritten },
    }
    if (Exit.isSuccess(exit)) {
      if (Option.isNone(exit.value)) record.stop = "timeout"
      else record.output = outputText(exit.value.value)
      if (session.limit !== undefined) record.stop = session.limit
    } else if (session.limit !== undefined) {
      // the agent stopped because the endpoint enforced a limit: scored as it stands
      record.stop = session.limit
    } else {
      record.stop = "infra_failed"
      record.infra = { reason: `the agent failed: ${messageOf(Cause.squash(exit.cause))}`, source: "agent" }
    }
    if (completions.length === 0) {
      record.stop = "infra_failed"
      record.infra = { reason: noCompletion(session.refused, record.infra?.reason), source: "agent" }
    }
    return record
  })

/**
 * Plays `numSamples` episodes of one problem with the env's agent, concurrently.
 * @since 0.1.0 @category rollouts
 */
export const playAgents = Effect.fnUntraced(function* (options: GroupOptions) {
  const agent = options.env.agent
  if (agent === undefined) return yield* Effect.die(new Error(`env ${options.env.name} has no agent`))
  const endpoint = yield* Effect.serviceOption(Endpoint)
  if (Option.isNone(endpoint)) {
    return yield* new RunError({ reason: "Env", step: options.step, message: `env ${options.env.name} is an agent env, but the run started no agent endpoint` })
  }
  const episodes = yield* Effect.forEach(
    Array.from({ length: options.numSamples }, (_, i) => i),
    (i) => playAgent(agent as Agent<unknown>, options, i).pipe(Effect.provideService(Endpoint, endpoint.value)),
    { concurrency: "unbounded" },
  )
  return { episodes, version: Math.min(...episodes.map((e) => e.version)) }
})

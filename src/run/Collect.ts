/**
 * Rollout collection: draw a step's problems, sample `groupSize` completions per problem
 * (one affinity key per group, pinned to a policy version) and score them.
 *
 * @since 0.1.0
 */
import { Context, Effect } from "effect"
import type { SamplingParams } from "../contract/Contract.ts"
import * as Env from "../vocabulary/Env.ts"
import * as Reward from "../vocabulary/Reward.ts"
import { encodePrompt, type Prompt, Tokenizer } from "../services/Tokenizer.ts"
import type { Trainer } from "../services/Trainer.ts"
import { at } from "../util/Lookup.ts"
import { Progress } from "./Progress.ts"
import { playAgents } from "./AgentRollout.ts"
import { playGames } from "./GameRollout.ts"
import { episodeOverlongPenalty } from "./Overlong.ts"
import { type EpisodeRecord, playGroup } from "./Rollout.ts"
import { fail, RunError, type RunSettings } from "./Settings.ts"

/** One problem's sampled and scored completions. @since 0.1.0 @category models */
export interface Group {
  readonly task: Env.Task<unknown> & { readonly envDef: Env.AnyEnv }
  readonly index: number
  readonly promptTokens: Array<number>
  readonly prompt: Prompt
  readonly version: number
  readonly rollouts: Array<Reward.Rollout<unknown>>
  /** each rollout's episode: its turns as tokens, stop reason and counters */
  readonly episodes: Array<EpisodeRecord>
  /** a game env's group: the role each sample played (advantages are normalized per role) */
  readonly roles?: ReadonlyArray<string>
  readonly scores: Array<Reward.Score>
}

/**
 * One row per sample of a group, as `rollouts.jsonl` and `eval.jsonl` write them: the
 * prompt and completion (for episodes every turn, what the model wrote and what the env
 * answered, and why it ended), the reward (none when masked: a partial sum would read as
 * a real total), the mask reason and the components; when there are any, the components
 * that failed with their messages (`failed`) and what rewards noted (`notes`).
 * @since 0.1.0 @category rollouts
 */
export const sampleRows = (g: Group) =>
  g.rollouts.map((r, si) => {
    const score = scoreOf(g, si)
    return {
      group: g.index,
      sample: si,
      env: g.task.env,
      key: g.task.key,
      version: g.version,
      prompt: g.prompt,
      completion: r.completion,
      stopReason: r.stopReason,
      ...(r.role !== undefined ? { role: r.role, outcome: r.outcome ?? 0 } : {}),
      reward: score.masked !== undefined ? null : score.value ?? null,
      masked: score.masked ?? null,
      components: score.components,
      // each component that failed (any weight) with its message, and what a reward noted (a judge's replies)
      ...(score.failed !== undefined ? { failed: score.failed } : {}),
      ...(score.notes !== undefined ? { notes: score.notes } : {}),
      ...(g.task.envDef.episode !== undefined || g.task.envDef.agent !== undefined || g.task.envDef.game !== undefined ? episodeRow(at(g.episodes, si, `group ${g.index}: episode of sample`)) : {}),
    }
  })

/** The score of sample `si` of a group: its scores are parallel to its rollouts. @since 0.1.0 @category rollouts */
export const scoreOf = (g: Pick<Group, "index" | "scores">, si: number): Reward.Score => at(g.scores, si, `group ${g.index}: score of sample`)

/** An episode's turns (what the model wrote and what the env answered) and why it ended. */
const episodeRow = (e: EpisodeRecord) => ({
  turns: e.turns.map((t) => ({
    sampled: t.text,
    ...(t.observation !== undefined ? { observation: t.observation } : {}),
    ...(t.toolError !== undefined ? { toolError: t.toolError } : {}),
    ...(t.toolResult !== undefined ? { toolResult: t.toolResult } : {}),
    ...(t.rewritten !== undefined ? { rewritten: t.rewritten } : {}),
  })),
  episodeStop: e.stop,
  ...(e.agent !== undefined ? { agent: e.agent } : {}),
})

/** What playing a group gives: its episodes, and for a game each sample's role and outcome. */
interface Played {
  readonly episodes: Array<EpisodeRecord>
  readonly version: number
  readonly roles?: ReadonlyArray<string>
  readonly outcomes?: ReadonlyArray<number>
}

/**
 * A played group's rollouts, one per episode, as its rewards see them: the completion is
 * what an agent returned, else the last turn's text; multi-turn episodes carry their turns.
 * @since 0.1.0 @category rollouts
 */
export const rolloutsOf = (task: Group["task"], prompt: Prompt, played: Pick<Played, "episodes" | "roles" | "outcomes">) => {
  const env = task.envDef
  const multi = env.episode !== undefined || env.agent !== undefined || env.game !== undefined
  return played.episodes.map((e, i): Reward.Rollout<unknown> => {
    const last = e.turns.at(-1)
    return {
      problem: task.problem,
      prompt,
      completion: e.output ?? last?.text ?? "",
      tokens: last?.sampled ?? [],
      stopReason: last?.stopReason ?? "stop",
      index: i,
      groupSize: played.episodes.length,
      ...(multi ? { turns: e.turns.map((t) => ({ text: t.text, ...(t.observation !== undefined ? { observation: t.observation } : {}) })) } : {}),
      ...(played.roles !== undefined ? { role: played.roles[i]!, outcome: played.outcomes![i]! } : {}),
    }
  })
}

/** One step's groups. @since 0.1.0 @category models */
export interface Batch {
  readonly step: number
  /** the groups that train */
  readonly groups: Array<Group>
  readonly sampleSeconds: number
  /** async: groups that were older than maxLag when this step trained */
  readonly staleGroups: number
  /** dynamic sampling: what it dropped and refilled (absent when it is off) */
  readonly dynamic?: Dynamic | undefined
}

/** What dynamic sampling did in one step. @since 0.1.0 @category models */
export interface Dynamic {
  /** the step's first `groups` problems as drawn, before any was dropped: the step's reward metrics */
  readonly drawn: Array<Group>
  /** every group dropped for having no signal (first draws and refills) */
  readonly dropped: Array<Group>
  /** refill groups kept */
  readonly refilled: number
  /** extra sampling rounds run */
  readonly rounds: number
}

/**
 * Whether a group carries a learning signal: at least two unmasked rewards, not all equal
 * (relative tolerance 1e-9, as `Metrics.groupFractions` tells groups apart).
 * @since 0.1.0 @category rollouts
 */
export const hasSignal = (group: Pick<Group, "scores">): boolean => {
  const xs = group.scores.flatMap((s) => (s.masked === undefined && s.value !== undefined && !Number.isNaN(s.value) ? [s.value] : []))
  if (xs.length < 2) return false
  const lo = Math.min(...xs)
  const hi = Math.max(...xs)
  return !(lo === hi || Math.abs(hi - lo) <= 1e-9 * Math.max(1, Math.abs(lo), Math.abs(hi)))
}

/**
 * The seed of step `step`'s refill problems: a stream of its own per step, so refills
 * never take problems from (or shift) the main stream `step * groups + g`.
 * @since 0.1.0 @category rollouts
 */
export const refillSeed = (seed: number, step: number) => Env.hash32(`refill/${seed}/${step}`)

/** The pool as `sampleGroup` sees it. @since 0.1.0 @category models */
export interface PoolShape {
  /** how many worker threads play groups */
  readonly threads: number
  /** whether groups of `env` go to the workers (the first time one cannot, it logs why) */
  readonly takes: (env: Env.AnyEnv) => Effect.Effect<boolean>
  /** plays one group on a worker: `sampleGroup`'s arguments */
  readonly play: (
    settings: RunSettings,
    runId: string,
    step: number,
    g: number,
    version: number,
    task: Env.Task<unknown> & { readonly envDef: Env.AnyEnv },
    options: { readonly split: Env.Split; readonly numSamples: number; readonly temperature?: number },
  ) => Effect.Effect<Group, RunError>
}

/**
 * The episode workers of a run, when it has them (`--cores` above 1); none by default,
 * and none inside a worker.
 * @since 0.1.0 @category services
 */
export const EpisodeWorkers = Context.Reference<PoolShape | undefined>("gyre/run/EpisodeWorkers", { defaultValue: () => undefined })

/**
 * Samples one problem's completions and scores them: on an episode worker thread when the
 * run has them (`--cores`, `workers/Pool.ts`) and they can play the env, else here.
 * @since 0.1.0 @category rollouts
 */
export const sampleGroup = (
  settings: RunSettings,
  runId: string,
  step: number,
  g: number,
  version: number,
  task: Env.Task<unknown> & { readonly envDef: Env.AnyEnv },
  options: { readonly split: Env.Split; readonly numSamples: number; readonly temperature?: number },
) =>
  Effect.flatMap(EpisodeWorkers, (pool) =>
    pool === undefined
      ? playHere(settings, runId, step, g, version, task, options)
      : Effect.flatMap(pool.takes(task.envDef), (on) => (on ? pool.play(settings, runId, step, g, version, task, options) : playHere(settings, runId, step, g, version, task, options))))

/** Samples one problem's completions and scores them on this thread. */
const playHere = Effect.fnUntraced(function* (
  settings: RunSettings,
  runId: string,
  step: number,
  g: number,
  version: number,
  task: Env.Task<unknown> & { readonly envDef: Env.AnyEnv },
  options: { readonly split: Env.Split; readonly numSamples: number; readonly temperature?: number },
) {
  const tokenizer = yield* Tokenizer
  const env = task.envDef
  const prompt = env.prompt(task.problem)
  const sampling: SamplingParams = {
    ...settings.sampling,
    ...env.sampling,
    ...settings.samplingOverrides,
    ...(options.temperature !== undefined ? { temperature: options.temperature } : {}),
    seed: Env.hash32(`${settings.seed}/${options.split}/${step}/${g}`),
  }
  const game = { env, task, sampling, numSamples: options.numSamples, affinityKey: `${runId}/${options.split}/${step}/${g}`, version, step }
  // an agent's or a game's prompt is what it sends each time: the first turn's tokens stand for it
  const promptTokens = env.agent !== undefined || env.game !== undefined ? [] : yield* encodePrompt(tokenizer, prompt).pipe(
    Effect.mapError((e) => new RunError({ reason: "Env", step, message: `${env.name}: cannot encode the prompt of ${task.key}: ${e.message}` })),
  )
  const played: Played = env.game !== undefined
    ? yield* playGames({ ...game, split: options.split })
    : env.agent !== undefined
    ? yield* playAgents(game)
    : yield* playGroup({ ...game, promptTokens })
  const rollouts = rolloutsOf(task, prompt, played)
  const scores = yield* Reward.evaluate(env.reward, rollouts).pipe(
    Effect.mapError((e) =>
      new RunError({
        reason: "Reward",
        step,
        message: `env ${env.name}, reward ${e.reward}, problem ${JSON.stringify(task.problem)} (${task.key}): ${e.message}`,
      })
    ),
  )
  return {
    task,
    index: g,
    promptTokens: env.agent !== undefined || env.game !== undefined ? [...(played.episodes[0]?.turns[0]?.input ?? [])] : promptTokens,
    ...(played.roles !== undefined ? { roles: played.roles } : {}),
    prompt,
    version: played.version,
    rollouts,
    episodes: played.episodes,
    // the env's per-turn rewards add to the final reward
    scores: scores.map((sc, i) => {
      // one score per rollout, and one rollout per episode
      const episode = at(played.episodes, i, "episode")
      // the env's infrastructure failed on it (a lost tool server): masked, whatever the reward said
      if (episode.infra !== undefined) return { ...sc, value: undefined, masked: `infra_failed: ${episode.infra.reason}` }
      const extra = episode.turnReward
      const turned = extra === 0 || sc.value === undefined ? sc : { ...sc, value: sc.value + extra, components: { ...sc.components, turn_reward: extra } }
      // DAPO's overlong shaping lowers training rewards only
      if (settings.overlong === undefined || options.split !== "train" || turned.value === undefined) return turned
      const penalty = episodeOverlongPenalty(episode.turns.map((t) => t.sampled.length), sampling.maxTokens, settings.overlong.fraction)
      return { ...turned, value: turned.value + penalty, components: { ...turned.components, overlong: penalty } }
    }),
  } satisfies Group
})

/**
 * Samples and scores one step's groups; `onGroup` (streaming minibatches) sees each group
 * of the first draw as soon as it is scored.
 * @since 0.1.0 @category rollouts
 */
export const collect = Effect.fn("Collect.collect")(function* (
  settings: RunSettings,
  source: Env.AnyEnv | Env.Mixture,
  runId: string,
  step: number,
  version: number,
  onGroup?: (group: Group) => Effect.Effect<void, RunError, Trainer | Tokenizer>,
) {
  const progress = yield* Progress
  const start = performance.now()
  const tasks = yield* Effect.forEach(Array.from({ length: settings.groups }, (_, g) => g), (g) =>
    Env.taskAt(source, {
      seed: settings.seed,
      index: step * settings.groups + g,
      split: "train",
      ...(settings.difficulty !== undefined ? { difficulty: settings.difficulty } : {}),
    }).pipe(Effect.mapError(fail("Env", step))))
  let done = 0
  let total = tasks.length
  // group index g of task i: first draws are 0..groups-1, refills follow
  const play = (list: ReadonlyArray<Env.Task<unknown> & { readonly envDef: Env.AnyEnv }>, first: number) =>
    Effect.forEach(
      list,
      (task, i) =>
        sampleGroup(settings, runId, step, first + i, version, task, { split: "train", numSamples: settings.groupSize }).pipe(
          Effect.tap((group) => {
            done++
            return progress.onPhase({ step, steps: settings.steps, phase: "sample+score", done, total }).pipe(
              Effect.andThen(onGroup === undefined ? Effect.void : onGroup(group)),
            )
          }),
        ),
      { concurrency: settings.sampleConcurrency },
    )
  const groups = yield* play(tasks, 0)
  const dynamicSampling = settings.sft ? undefined : settings.dynamicSampling
  if (dynamicSampling === undefined) {
    return { step, groups, sampleSeconds: (performance.now() - start) / 1000, staleGroups: 0 } satisfies Batch
  }

  // Dynamic sampling: keep the groups with signal, refill from this step's own stream.
  const kept = groups.filter(hasSignal)
  const dropped = groups.filter((g) => !hasSignal(g))
  let refilled = 0
  let rounds = 0
  let drawnRefills = 0
  while (kept.length < settings.groups && rounds < dynamicSampling.maxRounds) {
    rounds++
    const needed = settings.groups - kept.length
    const refills = yield* Effect.forEach(Array.from({ length: needed }, (_, j) => drawnRefills + j), (j) =>
      Env.taskAt(source, {
        seed: refillSeed(settings.seed, step),
        index: j,
        split: "train",
        ...(settings.difficulty !== undefined ? { difficulty: settings.difficulty } : {}),
      }).pipe(Effect.mapError(fail("Env", step))))
    total += needed
    const played = yield* play(refills, settings.groups + drawnRefills)
    drawnRefills += needed
    for (const g of played) {
      if (hasSignal(g)) {
        kept.push(g)
        refilled++
      } else {
        dropped.push(g)
      }
    }
  }
  if (dropped.length > 0) {
    yield* Effect.logDebug(`step ${step + 1}: dynamic sampling dropped ${dropped.length} group(s) with no signal, refilled ${refilled} in ${rounds} round(s)`)
  }
  return {
    step,
    groups: kept,
    sampleSeconds: (performance.now() - start) / 1000,
    staleGroups: 0,
    dynamic: { drawn: groups, dropped, refilled, rounds },
  } satisfies Batch
})


/**
 * Rollout collection: draw a step's problems, sample `groupSize` completions per problem
 * (one affinity key per group, pinned to a policy version) and score them.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { SamplingParams } from "../Contract.ts"
import * as Env from "../Env.ts"
import * as Reward from "../Reward.ts"
import { encodePrompt, type Prompt, Tokenizer } from "../Tokenizer.ts"
import { Progress } from "./Progress.ts"
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
  readonly scores: Array<Reward.Score>
}

/** One step's groups. @since 0.1.0 @category models */
export interface Batch {
  readonly step: number
  readonly groups: Array<Group>
  readonly sampleSeconds: number
  /** async: groups that were older than maxLag when this step trained */
  readonly staleGroups: number
}


/** Samples one problem's completions and scores them. @since 0.1.0 @category rollouts */
export const sampleGroup = Effect.fnUntraced(function* (
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
  const promptTokens = yield* encodePrompt(tokenizer, prompt).pipe(
    Effect.mapError((e) => new RunError({ reason: "Env", step, message: `${env.name}: cannot encode the prompt of ${task.key}: ${e.message}` })),
  )
  const sampling: SamplingParams = {
    ...settings.sampling,
    ...env.sampling,
    ...settings.samplingOverrides,
    ...(options.temperature !== undefined ? { temperature: options.temperature } : {}),
    seed: Env.hash32(`${settings.seed}/${options.split}/${step}/${g}`),
  }
  const played = yield* playGroup({
    env,
    task,
    promptTokens,
    sampling,
    numSamples: options.numSamples,
    affinityKey: `${runId}/${options.split}/${step}/${g}`,
    version,
    step,
  })
  const rollouts = played.episodes.map((e, i): Reward.Rollout<unknown> => {
    const last = e.turns[e.turns.length - 1]!
    return {
      problem: task.problem,
      prompt,
      completion: last.text,
      tokens: last.sampled,
      stopReason: last.stopReason,
      index: i,
      groupSize: played.episodes.length,
      ...(env.episode !== undefined ? { turns: e.turns.map((t) => ({ text: t.text, ...(t.observation !== undefined ? { observation: t.observation } : {}) })) } : {}),
    }
  })
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
    promptTokens,
    prompt,
    version: played.version,
    rollouts,
    episodes: played.episodes,
    // the env's per-turn rewards add to the final reward
    scores: scores.map((sc, i) => {
      const extra = played.episodes[i]!.turnReward
      return extra === 0 || sc.value === undefined ? sc : { ...sc, value: sc.value + extra, components: { ...sc.components, turn_reward: extra } }
    }),
  } satisfies Group
})

/** Samples and scores one step's groups. @since 0.1.0 @category rollouts */
export const collect = Effect.fnUntraced(function* (settings: RunSettings, source: Env.AnyEnv | Env.Mixture, runId: string, step: number, version: number) {
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
  const groups = yield* Effect.forEach(
    tasks,
    (task, g) =>
      sampleGroup(settings, runId, step, g, version, task, { split: "train", numSamples: settings.groupSize }).pipe(
        Effect.tap(() => {
          done++
          return progress.onPhase({ step, steps: settings.steps, phase: "sample+score", done, total: tasks.length })
        }),
      ),
    { concurrency: settings.sampleConcurrency },
  )
  const seconds = (performance.now() - start) / 1000
  return { step, groups, sampleSeconds: seconds, staleGroups: 0 } satisfies Batch
})


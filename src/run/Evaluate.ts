/**
 * Held-out evaluation, and the reward metrics of a set of groups.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import * as Env from "../vocabulary/Env.ts"
import * as K from "../metrics/MetricKeys.ts"
import * as Dpo from "./Dpo.ts"
import * as Metrics from "../metrics/Metrics.ts"
import { failureCounts } from "../reward/FailureLog.ts"
import { type Group, sampleGroup } from "./Collect.ts"
import type { EpisodeRecord } from "./Rollout.ts"
import { fail, type RunSettings } from "./Settings.ts"

/**
 * Scores the fixed held-out set: one sample per problem at the eval temperature.
 * Returns `test/env/<env>/<component>` means.
 * @since 0.1.0 @category evaluation
 */
export const evaluate = Effect.fn("Evaluate.evaluate")(function* (
  settings: RunSettings,
  source: Env.AnyEnv | Env.Mixture,
  runId: string,
  step: number,
  version: number,
) {
  return (yield* evaluateGroups(settings, source, runId, step, version)).metrics
})

/**
 * What `evaluate` measures, with every scored group (for `eval.jsonl`). `split` picks
 * the held-out problems (default) or distinct training problems; `samples` per problem
 * (default 1). Logs `test/env/<env>/problems`, the number of distinct problems scored.
 * @since 0.1.0 @category evaluation
 */
export const evaluateGroups = Effect.fn("Evaluate.evaluateGroups")(function* (
  settings: RunSettings,
  source: Env.AnyEnv | Env.Mixture,
  runId: string,
  step: number,
  version: number,
  options: { readonly split?: Env.Split; readonly samples?: number } = {},
) {
  const start = performance.now()
  const split = options.split ?? "eval"
  const members = Env.members(source)
  const total = members.reduce((s, [, w]) => s + w, 0)
  const groups: Array<Group> = []
  const counts: Metrics.MetricRecord = {}
  // One running index over all envs, so no two eval problems share a sampling seed or key.
  let offset = 0
  for (const [env, w] of members) {
    const size = Math.max(1, Math.round((settings.evalSize * w) / total))
    const difficulty = settings.difficulty !== undefined ? { difficulty: settings.difficulty } : {}
    const tasks = split === "eval"
      ? yield* Env.evalSet(env, { seed: settings.seed, size, ...difficulty }).pipe(Effect.mapError(fail("Env", step)))
      : (yield* Env.distinctTasks(env, { split, seed: settings.seed, size, ...difficulty }).pipe(Effect.mapError(fail("Env", step)))).tasks
    counts[K.envKey("test", members.length > 1 ? env.name : K.ALL, K.EnvStat.problems)] = tasks.length
    const scored = yield* Effect.forEach(
      tasks,
      (task, i) =>
        sampleGroup(settings, runId, step, offset + i, version, { ...task, envDef: env }, {
          split: "eval",
          numSamples: options.samples ?? 1,
          temperature: settings.evalTemperature,
        }),
      { concurrency: settings.sampleConcurrency },
    )
    groups.push(...scored)
    offset += tasks.length
  }
  const metrics = { ...scoreMetrics(groups, "test"), ...counts }
  // --dpo: how often the policy prefers the chosen completion of a held-out pair
  if (settings.dpo !== undefined && split === "eval") metrics[K.DPO_ACCURACY] = yield* Dpo.accuracy(groups, step, settings.dpo.beta)
  metrics[K.Time.eval] = (performance.now() - start) / 1000
  return { metrics, groups }
})

/**
 * Reward and component means over groups, overall and per env, under the keys of `split`
 * (`env/...` for a training batch, `test/env/...` for an evaluation). Masked samples are
 * left out of every mean and counted (`masked`, `frac_masked`).
 * @since 0.1.0 @category evaluation
 */
export const scoreMetrics = (groups: ReadonlyArray<Group>, split: K.Split): Metrics.MetricRecord => {
  const out: Metrics.MetricRecord = {}
  const byEnv = new Map<string, Array<Group>>()
  for (const g of groups) byEnv.set(g.task.env, [...(byEnv.get(g.task.env) ?? []), g])
  const scopes: Array<readonly [string, ReadonlyArray<Group>]> = [[K.ALL, groups]]
  if (byEnv.size > 1) scopes.push(...byEnv.entries())
  for (const [scope, gs] of scopes) {
    const scores = gs.flatMap((g) => g.scores)
    // a masked sample's scores are not the policy's: its components (scored before its tool
    // server was lost, say) stay out of every mean, as its total does
    const scored = scores.filter((s) => s.masked === undefined)
    const masked = scores.length - scored.length
    const key = (name: string) => K.envKey(split, scope, name)
    const total = Metrics.mean(scored.map((s) => s.value))
    if (total !== undefined) out[key(K.EnvStat.total)] = total
    const names = new Set(scored.flatMap((s) => Object.keys(s.components)))
    for (const name of names) {
      const m = Metrics.mean(scored.map((s) => s.components[name]))
      if (m !== undefined) out[key(name)] = m
    }
    out[key(K.EnvStat.fracMasked)] = scores.length === 0 ? 0 : masked / scores.length
    out[key(K.EnvStat.masked)] = masked
    Object.assign(out, episodeMetrics(gs.filter((g) => g.task.envDef.episode !== undefined || g.task.envDef.agent !== undefined || g.task.envDef.game !== undefined).flatMap((g) => g.episodes), K.envPrefix(split, scope)))
    Object.assign(out, roleMetrics(gs, key))
  }
  // failures of a reward component, at any weight (0 included): only where there were some
  for (const [name, n] of Object.entries(failureCounts(groups.flatMap((g) => g.scores)))) {
    if (n > 0) out[`${split === "test" ? "test/" : ""}${K.rewardFailed(name)}`] = n
  }
  // episodes masked because a tool's infrastructure failed, by tool (or "env" when the env named none)
  for (const e of groups.flatMap((g) => g.episodes)) {
    if (e.infra === undefined) continue
    const key = `${split === "test" ? "test/" : ""}${K.toolInfraFailed(e.infra.source ?? "env")}`
    out[key] = (out[key] ?? 0) + 1
  }
  return out
}

/**
 * A game env's samples, per role the policy played: the mean outcome (`role/<role>/outcome`)
 * and the fraction won (`role/<role>/win_rate`, an outcome above 0).
 * @since 0.1.0 @category evaluation
 */
export const roleMetrics = (groups: ReadonlyArray<Group>, key: (name: string) => string): Metrics.MetricRecord => {
  const byRole = new Map<string, Array<number>>()
  for (const g of groups) {
    g.rollouts.forEach((r) => {
      if (r.role !== undefined) byRole.set(r.role, [...(byRole.get(r.role) ?? []), r.outcome ?? 0])
    })
  }
  const out: Metrics.MetricRecord = {}
  for (const [role, outcomes] of byRole) {
    out[key(`role/${role}/outcome`)] = outcomes.reduce((a, b) => a + b, 0) / outcomes.length
    out[key(`role/${role}/win_rate`)] = outcomes.filter((o) => o > 0).length / outcomes.length
  }
  return out
}

/**
 * Per-episode means of turns, tool calls, tool errors and parse errors (and, for agent
 * envs, of diverged tokens and rewritten replies), and the fraction of episodes that ended
 * for each stop reason (`stop/<reason>`), for multi-turn and agent envs.
 * @since 0.1.0 @category evaluation
 */
export const episodeMetrics = (episodes: ReadonlyArray<EpisodeRecord>, prefix: string): Metrics.MetricRecord => {
  if (episodes.length === 0) return {}
  const n = episodes.length
  const sum = (f: (e: EpisodeRecord) => number) => episodes.reduce((s, e) => s + f(e), 0)
  const out: Metrics.MetricRecord = {
    [`${prefix}${K.EnvStat.turns}`]: sum((e) => e.turns.length) / n,
    [`${prefix}${K.EnvStat.toolCalls}`]: sum((e) => e.toolCalls) / n,
    [`${prefix}${K.EnvStat.toolErrors}`]: sum((e) => e.toolErrors) / n,
    [`${prefix}${K.EnvStat.parseErrors}`]: sum((e) => e.parseErrors) / n,
  }
  // agent envs: how far the agent's messages drift from what the policy wrote
  const agents = episodes.flatMap((e) => (e.agent !== undefined ? [e.agent] : []))
  if (agents.length > 0) {
    out[`${prefix}${K.EnvStat.agentDiverged}`] = agents.reduce((s, a) => s + a.diverged, 0) / agents.length
    out[`${prefix}${K.EnvStat.agentRewritten}`] = agents.reduce((s, a) => s + a.rewritten, 0) / agents.length
  }
  for (const e of episodes) {
    const stop = `${prefix}${K.STOP_PREFIX}${e.stop}`
    out[stop] = (out[stop] ?? 0) + 1 / n
  }
  return out
}


/**
 * Reward evaluation: walks a reward tree over the G rollouts of one group, runs its
 * leaves (with their policies and the run's cache) and combines their outcomes into one
 * `Score` per rollout. Separate from the constructors and combinators, which only build
 * trees.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { cacheKey, makeCache, RewardCache, type ScoreCache } from "./Cache.ts"
import { RewardDefect } from "./Failures.ts"
import { describeValue, type LeafOutcome, runLeaf } from "./Leaf.ts"
import type { Node, Reward, Rollout, Score } from "./Model.ts"

const finiteScore = (name: string, value: unknown): Effect.Effect<number, RewardDefect> =>
  typeof value === "number" && Number.isFinite(value)
    ? Effect.succeed(value)
    : Effect.fail(new RewardDefect({ reward: name, message: `returned ${describeValue(value)}; a score must be a finite number` }))

const evalLeaf = <P, R>(
  node: Extract<Node<P, R>, { _tag: "Leaf" }>,
  rollouts: ReadonlyArray<Rollout<P>>,
  cache: ScoreCache,
): Effect.Effect<Array<LeafOutcome>, RewardDefect, R> => {
  const run = (rollout: Rollout<P>) =>
    runLeaf<R>(node.name, node.options, node, (context) => node.score(rollout, context)).pipe(
      Effect.flatMap((r) =>
        r._tag === "Outcome"
          ? Effect.succeed(r.outcome)
          : Effect.map(finiteScore(node.name, r.value), (value): LeafOutcome => ({ value, masked: undefined }))
      ),
    )
  const version = node.options.cacheVersion
  if (version === undefined) return Effect.forEach(rollouts, run, { concurrency: "unbounded" })
  // A cached leaf scores each distinct key once per call, and reuses the run's scores.
  const keys = rollouts.map((r) => cacheKey(node.name, version, r))
  const first = new Map<string, number>()
  keys.forEach((k, i) => {
    if (!first.has(k)) first.set(k, i)
  })
  return Effect.forEach(
    [...first.values()],
    (i) => {
      const hit = cache.get(keys[i]!)
      if (hit !== undefined) return Effect.succeed(hit)
      return Effect.map(run(rollouts[i]!), (outcome) => {
        if (outcome.masked === undefined) cache.set(keys[i]!, outcome)
        return outcome
      })
    },
    { concurrency: "unbounded" },
  ).pipe(Effect.map((distinct) => {
    const byKey = new Map([...first.keys()].map((k, j) => [k, distinct[j]!]))
    return keys.map((k) => byKey.get(k)!)
  }))
}

const evalGroupLeaf = <P, R>(
  node: Extract<Node<P, R>, { _tag: "GroupLeaf" }>,
  rollouts: ReadonlyArray<Rollout<P>>,
): Effect.Effect<Array<LeafOutcome>, RewardDefect, R> =>
  Effect.gen(function* () {
    const result = yield* runLeaf<R>(node.name, node.options, node, (context) => node.score(rollouts, context))
    if (result._tag === "Outcome") return rollouts.map(() => result.outcome)
    const values = result.value
    if (!Array.isArray(values)) {
      return yield* new RewardDefect({
        reward: node.name,
        message: `returned ${describeValue(values)}; a group reward must return an array of one finite score per rollout`,
      })
    }
    if (values.length !== rollouts.length) {
      return yield* new RewardDefect({
        reward: node.name,
        message: `a group reward must return one score per rollout: got ${values.length} for a group of ${rollouts.length}`,
      })
    }
    const outcomes: Array<LeafOutcome> = []
    for (const v of values) outcomes.push({ value: yield* finiteScore(node.name, v), masked: undefined })
    return outcomes
  })

interface Evaluated {
  readonly values: Array<LeafOutcome>
  readonly components: Array<Record<string, number | undefined>>
}

const evalNode = <P, R>(reward: Reward<P, R>, rollouts: ReadonlyArray<Rollout<P>>, cache: ScoreCache): Effect.Effect<Evaluated, RewardDefect, R> =>
  Effect.gen(function* () {
    const node = reward.node
    switch (node._tag) {
      case "Leaf":
      case "GroupLeaf": {
        const values = node._tag === "Leaf" ? yield* evalLeaf<P, R>(node, rollouts, cache) : yield* evalGroupLeaf<P, R>(node, rollouts)
        return { values, components: values.map((v) => ({ [node.name]: v.value })) }
      }
      case "Weighted": {
        const parts = yield* Effect.forEach(node.members, ([, r]) => evalNode(r, rollouts, cache), { concurrency: "unbounded" })
        const values = rollouts.map((_, i) => {
          let sum = 0
          let applied = 0
          let masked: string | undefined
          node.members.forEach(([, , weight], m) => {
            // a zero-weight member is a metric only: it neither defines nor masks the total
            if (weight === 0) return
            const v = parts[m]!.values[i]!
            masked ??= v.masked
            if (v.value !== undefined) {
              sum += weight * v.value
              applied++
            }
          })
          return { value: applied === 0 ? undefined : sum, masked }
        })
        return { values, components: rollouts.map((_, i) => Object.assign({}, ...parts.map((p) => p.components[i]))) }
      }
      case "Gate": {
        const parts = yield* Effect.forEach(node.members, (r) => evalNode(r, rollouts, cache), { concurrency: "unbounded" })
        const values = rollouts.map((_, i) => {
          const vs = parts.map((p) => p.values[i]!)
          const masked = vs.find((v) => v.masked !== undefined)?.masked
          const applicable = vs.filter((v) => v.value !== undefined).map((v) => v.value!)
          if (applicable.length === 0) return { value: undefined, masked }
          const pass = node.mode === "all"
            ? applicable.every((v) => v >= node.threshold)
            : applicable.some((v) => v >= node.threshold)
          return { value: pass ? 1 : 0, masked }
        })
        return {
          values,
          components: rollouts.map((_, i) =>
            Object.assign({}, ...parts.map((p) => p.components[i]), node.members.length > 1 ? { [reward.name]: values[i]!.value } : {})
          ),
        }
      }
      case "Map": {
        const inner = yield* evalNode(node.inner, rollouts, cache)
        const values: Array<LeafOutcome> = []
        for (const v of inner.values) {
          const input = v.value
          const mapped = input === undefined ? undefined : yield* Effect.try({
            try: () => node.f(input),
            catch: (cause) => new RewardDefect({ reward: reward.name, message: `its map function threw ${cause instanceof Error ? cause.message : String(cause)}`, cause }),
          })
          if (mapped !== undefined) yield* finiteScore(reward.name, mapped)
          values.push({ value: mapped, masked: v.masked })
        }
        const innerName = node.inner.name
        return {
          values,
          components: inner.components.map((c, i) =>
            innerName in c && Object.keys(c).length === 1 ? { [reward.name]: values[i]!.value } : c
          ),
        }
      }
    }
  })

/**
 * Scores the G rollouts of one group. Leaves run concurrently (bounded by
 * `RewardPermits` and each leaf's own `concurrency`); cached leaves use the
 * `RewardCache` in force, or a fresh cache for this call.
 * @since 0.1.0 @category evaluation
 */
export const evaluate = Effect.fnUntraced(function* <P, R>(reward: Reward<P, R>, rollouts: ReadonlyArray<Rollout<P>>) {
  const cache = (yield* RewardCache) ?? makeCache()
  const result = yield* evalNode(reward, rollouts, cache)
  return result.values.map((v, i): Score => ({
    value: v.value,
    masked: v.masked,
    components: result.components[i]!,
  }))
})

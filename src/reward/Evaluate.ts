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
import { logFailures } from "./FailureLog.ts"
import { RewardDefect } from "./Failures.ts"
import { describeValue, type LeafOutcome, runLeaf } from "./Leaf.ts"
import type { Node, Reward, Rollout, Score } from "./Model.ts"

const finiteScore = (name: string, value: unknown): Effect.Effect<number, RewardDefect> =>
  typeof value === "number" && Number.isFinite(value)
    ? Effect.succeed(value)
    : Effect.fail(new RewardDefect({ reward: name, message: `returned ${describeValue(value)}; a score must be a finite number` }))

const valueOutcome = (name: string, value: unknown, notes: ReadonlyArray<string>): Effect.Effect<LeafOutcome, RewardDefect> =>
  Effect.map(finiteScore(name, value), (v): LeafOutcome => ({ value: v, masked: undefined, ...(notes.length > 0 ? { notes } : {}) }))

const evalLeaf = <P, R>(
  node: Extract<Node<P, R>, { _tag: "Leaf" }>,
  rollouts: ReadonlyArray<Rollout<P>>,
  cache: ScoreCache,
): Effect.Effect<Array<LeafOutcome>, RewardDefect, R> => {
  const run = (rollout: Rollout<P>) =>
    runLeaf<R>(node.name, node.options, node, (context) => node.score(rollout, context)).pipe(
      Effect.flatMap((r) => (r._tag === "Outcome" ? Effect.succeed(r.outcome) : valueOutcome(node.name, r.value, r.notes))),
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
    // what a group scorer notes goes with every rollout of the group
    const outcomes: Array<LeafOutcome> = []
    for (const v of values) outcomes.push(yield* valueOutcome(node.name, v, result.notes))
    return outcomes
  })

/**
 * What a node gave each rollout: its outcome, each component's raw score, and by
 * component the failures and notes of its leaves.
 */
interface Evaluated {
  readonly values: Array<LeafOutcome>
  readonly components: Array<Record<string, number | undefined>>
  readonly failed: Array<Record<string, string>>
  readonly notes: Array<Record<string, ReadonlyArray<string>>>
}

/** The components, failures and notes of several members, merged per rollout. */
const merged = (parts: ReadonlyArray<Evaluated>, i: number) => ({
  components: Object.assign({}, ...parts.map((p) => p.components[i])) as Record<string, number | undefined>,
  failed: Object.assign({}, ...parts.map((p) => p.failed[i])) as Record<string, string>,
  notes: Object.assign({}, ...parts.map((p) => p.notes[i])) as Record<string, ReadonlyArray<string>>,
})

const leafEvaluated = (name: string, values: Array<LeafOutcome>): Evaluated => ({
  values,
  components: values.map((v) => ({ [name]: v.value })),
  failed: values.map((v) => (v.failed !== undefined ? { [name]: v.failed } : {})),
  notes: values.map((v) => (v.notes !== undefined && v.notes.length > 0 ? { [name]: v.notes } : {})),
})

const evalWeighted = <P, R>(node: Extract<Node<P, R>, { _tag: "Weighted" }>, rollouts: ReadonlyArray<Rollout<P>>, cache: ScoreCache) =>
  Effect.map(Effect.forEach(node.members, ([, r]) => evalNode(r, rollouts, cache), { concurrency: "unbounded" }), (parts): Evaluated => {
    const values = rollouts.map((_, i) => {
      let sum = 0
      let applied = 0
      let masked: string | undefined
      node.members.forEach(([, , weight], m) => {
        // a zero-weight member is a metric only: it neither defines nor masks the total
        // (its failures are still kept, in `failed`)
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
    const each = rollouts.map((_, i) => merged(parts, i))
    return { values, components: each.map((e) => e.components), failed: each.map((e) => e.failed), notes: each.map((e) => e.notes) }
  })

const evalGate = <P, R>(node: Extract<Node<P, R>, { _tag: "Gate" }>, name: string, rollouts: ReadonlyArray<Rollout<P>>, cache: ScoreCache) =>
  Effect.map(Effect.forEach(node.members, (r) => evalNode(r, rollouts, cache), { concurrency: "unbounded" }), (parts): Evaluated => {
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
    const each = rollouts.map((_, i) => merged(parts, i))
    return {
      values,
      components: each.map((e, i) => (node.members.length > 1 ? { ...e.components, [name]: values[i]!.value } : e.components)),
      failed: each.map((e) => e.failed),
      notes: each.map((e) => e.notes),
    }
  })

const evalMap = <P, R>(node: Extract<Node<P, R>, { _tag: "Map" }>, name: string, rollouts: ReadonlyArray<Rollout<P>>, cache: ScoreCache) =>
  Effect.gen(function* () {
    const inner = yield* evalNode(node.inner, rollouts, cache)
    const values: Array<LeafOutcome> = []
    for (const v of inner.values) {
      const input = v.value
      const mapped = input === undefined ? undefined : yield* Effect.try({
        try: () => node.f(input),
        catch: (cause) => new RewardDefect({ reward: name, message: `its map function threw ${cause instanceof Error ? cause.message : String(cause)}`, cause }),
      })
      if (mapped !== undefined) yield* finiteScore(name, mapped)
      values.push({ value: mapped, masked: v.masked })
    }
    // a map of one component reports under its own name, and so do that component's failures and notes
    const innerName = node.inner.name
    const one = (i: number) => innerName in inner.components[i]! && Object.keys(inner.components[i]!).length === 1
    const renamed = <T>(c: Record<string, T>, i: number): Record<string, T> => (one(i) && innerName in c ? { [name]: c[innerName]! } : c)
    return {
      values,
      components: inner.components.map((c, i) => (one(i) ? { [name]: values[i]!.value } : c)),
      failed: inner.failed.map(renamed),
      notes: inner.notes.map(renamed),
    } satisfies Evaluated
  })

const evalNode = <P, R>(reward: Reward<P, R>, rollouts: ReadonlyArray<Rollout<P>>, cache: ScoreCache): Effect.Effect<Evaluated, RewardDefect, R> => {
  const node = reward.node
  switch (node._tag) {
    case "Leaf":
      return Effect.map(evalLeaf<P, R>(node, rollouts, cache), (values) => leafEvaluated(node.name, values))
    case "GroupLeaf":
      return Effect.map(evalGroupLeaf<P, R>(node, rollouts), (values) => leafEvaluated(node.name, values))
    case "Weighted":
      return evalWeighted(node, rollouts, cache)
    case "Gate":
      return evalGate(node, reward.name, rollouts, cache)
    case "Map":
      return evalMap(node, reward.name, rollouts, cache)
  }
}

/**
 * Scores the G rollouts of one group. Leaves run concurrently (bounded by
 * `RewardPermits` and each leaf's own `concurrency`); cached leaves use the
 * `RewardCache` in force, or a fresh cache for this call. Each leaf that failed is kept
 * in its rollout's `Score.failed`, and the first failure of each kind in the run is
 * logged as a warning (see `reward/FailureLog.ts`).
 * @since 0.1.0 @category evaluation
 */
export const evaluate = Effect.fnUntraced(function* <P, R>(reward: Reward<P, R>, rollouts: ReadonlyArray<Rollout<P>>) {
  const cache = (yield* RewardCache) ?? makeCache()
  const result = yield* evalNode(reward, rollouts, cache)
  const scores = result.values.map((v, i): Score => ({
    value: v.value,
    masked: v.masked,
    components: result.components[i]!,
    ...(Object.keys(result.failed[i]!).length > 0 ? { failed: result.failed[i]! } : {}),
    ...(Object.keys(result.notes[i]!).length > 0 ? { notes: result.notes[i]! } : {}),
  }))
  yield* logFailures(cache, scores)
  return scores
})

/**
 * Reward evaluation: walks a reward tree over the G rollouts of one group, runs its
 * leaves (with their policies and the run's cache) and combines their outcomes into one
 * `Score` per rollout. Separate from the constructors and combinators, which only build
 * trees.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { at } from "../util/Lookup.ts"
import { cacheKey, makeCache, RewardCache, type ScoreCache } from "./Cache.ts"
import { logFailures } from "./FailureLog.ts"
import { RewardDefect } from "./Failures.ts"
import { describeValue, type LeafOutcome, runLeaf } from "./Leaf.ts"
import type { Node, Reward, Rollout, Score } from "./Model.ts"

/** A bug in this module: a cached leaf scores every distinct key, so no key's outcome can be missing. */
const missing = (what: string): never => {
  throw new Error(`reward evaluation: ${what} is missing`)
}

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
  const keyed = rollouts.map((r) => [cacheKey(node.name, version, r), r] as const)
  const first = new Map<string, Rollout<P>>()
  for (const [k, r] of keyed) if (!first.has(k)) first.set(k, r)
  return Effect.forEach(
    first,
    ([key, rollout]) => {
      const hit = cache.get(key)
      if (hit !== undefined) return Effect.succeed([key, hit] as const)
      return Effect.map(run(rollout), (outcome) => {
        if (outcome.masked === undefined) cache.set(key, outcome)
        return [key, outcome] as const
      })
    },
    { concurrency: "unbounded" },
  ).pipe(Effect.map((distinct) => {
    const byKey = new Map(distinct)
    return keyed.map(([k]) => byKey.get(k) ?? missing(`the outcome of cache key ${k}`))
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
 * What a node gave one rollout: its outcome, each component's raw score, and by component
 * the failures and notes of its leaves.
 */
interface Evaluated {
  readonly outcome: LeafOutcome
  readonly components: Record<string, number | undefined>
  readonly failed: Record<string, string>
  readonly notes: Record<string, ReadonlyArray<string>>
}

/** What a member gave rollout `i` (every node gives one entry per rollout). */
const ofRollout = (each: ReadonlyArray<Evaluated>, i: number): Evaluated => at(each, i, "reward evaluation: a member's entry for rollout")

/** The components, failures and notes of several members of one rollout, merged. */
const merged = (members: ReadonlyArray<Evaluated>) => ({
  components: Object.assign({}, ...members.map((e) => e.components)) as Record<string, number | undefined>,
  failed: Object.assign({}, ...members.map((e) => e.failed)) as Record<string, string>,
  notes: Object.assign({}, ...members.map((e) => e.notes)) as Record<string, ReadonlyArray<string>>,
})

const leafEvaluated = (name: string, values: Array<LeafOutcome>): Array<Evaluated> =>
  values.map((v) => ({
    outcome: v,
    components: { [name]: v.value },
    failed: v.failed !== undefined ? { [name]: v.failed } : {},
    notes: v.notes !== undefined && v.notes.length > 0 ? { [name]: v.notes } : {},
  }))

const evalWeighted = <P, R>(node: Extract<Node<P, R>, { _tag: "Weighted" }>, rollouts: ReadonlyArray<Rollout<P>>, cache: ScoreCache) =>
  Effect.map(
    Effect.forEach(node.members, ([, r, weight]) => Effect.map(evalNode(r, rollouts, cache), (each) => ({ weight, each })), { concurrency: "unbounded" }),
    (parts): Array<Evaluated> =>
      rollouts.map((_, i) => {
        const members = parts.map(({ weight, each }) => ({ weight, e: ofRollout(each, i) }))
        let sum = 0
        let applied = 0
        let masked: string | undefined
        for (const { weight, e } of members) {
          // a zero-weight member is a metric only: it neither defines nor masks the total
          // (its failures are still kept, in `failed`)
          if (weight === 0) continue
          const v = e.outcome
          masked ??= v.masked
          if (v.value !== undefined) {
            sum += weight * v.value
            applied++
          }
        }
        return { outcome: { value: applied === 0 ? undefined : sum, masked }, ...merged(members.map(({ e }) => e)) }
      }),
  )

const evalGate = <P, R>(node: Extract<Node<P, R>, { _tag: "Gate" }>, name: string, rollouts: ReadonlyArray<Rollout<P>>, cache: ScoreCache) =>
  Effect.map(Effect.forEach(node.members, (r) => evalNode(r, rollouts, cache), { concurrency: "unbounded" }), (parts): Array<Evaluated> =>
    rollouts.map((_, i) => {
      const members = parts.map((each) => ofRollout(each, i))
      const outcome = gateOutcome(node, members.map((e) => e.outcome))
      const { components, failed, notes } = merged(members)
      return { outcome, components: node.members.length > 1 ? { ...components, [name]: outcome.value } : components, failed, notes }
    }))

/** A gate's outcome from its members': 1 when all (or any) that apply reach the threshold. */
const gateOutcome = <P, R>(node: Extract<Node<P, R>, { _tag: "Gate" }>, vs: ReadonlyArray<LeafOutcome>): LeafOutcome => {
  const masked = vs.find((v) => v.masked !== undefined)?.masked
  const applicable = vs.flatMap((v) => (v.value !== undefined ? [v.value] : []))
  if (applicable.length === 0) return { value: undefined, masked }
  const pass = node.mode === "all"
    ? applicable.every((v) => v >= node.threshold)
    : applicable.some((v) => v >= node.threshold)
  return { value: pass ? 1 : 0, masked }
}

const evalMap = <P, R>(node: Extract<Node<P, R>, { _tag: "Map" }>, name: string, rollouts: ReadonlyArray<Rollout<P>>, cache: ScoreCache) =>
  Effect.gen(function* () {
    const inner = yield* evalNode(node.inner, rollouts, cache)
    // a map of one component reports under its own name, and so do that component's failures and notes
    const innerName = node.inner.name
    const out: Array<Evaluated> = []
    for (const e of inner) {
      const input = e.outcome.value
      const mapped = input === undefined ? undefined : yield* Effect.try({
        try: () => node.f(input),
        catch: (cause) => new RewardDefect({ reward: name, message: `its map function threw ${cause instanceof Error ? cause.message : String(cause)}`, cause }),
      })
      if (mapped !== undefined) yield* finiteScore(name, mapped)
      const one = innerName in e.components && Object.keys(e.components).length === 1
      const renamed = <T>(c: Record<string, T>): Record<string, T> => {
        const own = c[innerName]
        return one && own !== undefined ? { [name]: own } : c
      }
      out.push({
        outcome: { value: mapped, masked: e.outcome.masked },
        components: one ? { [name]: mapped } : e.components,
        failed: renamed(e.failed),
        notes: renamed(e.notes),
      })
    }
    return out
  })

const evalNode = <P, R>(reward: Reward<P, R>, rollouts: ReadonlyArray<Rollout<P>>, cache: ScoreCache): Effect.Effect<Array<Evaluated>, RewardDefect, R> => {
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
  const scores = result.map((e): Score => ({
    value: e.outcome.value,
    masked: e.outcome.masked,
    components: e.components,
    ...(Object.keys(e.failed).length > 0 ? { failed: e.failed } : {}),
    ...(Object.keys(e.notes).length > 0 ? { notes: e.notes } : {}),
  }))
  yield* logFailures(cache, scores)
  return scores
})

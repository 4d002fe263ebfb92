/**
 * The reward combinators: weighted sums, gates (`all`, `any`, `threshold`), score maps
 * (`map`, `clamp`), the leaf policies applied to a whole tree (`timeout`, `retry`,
 * `withConcurrency`, `cached`), renaming, and the getters that read a tree's shape
 * (`weights`, `componentNames`). Separate from the evaluation: these only build trees.
 *
 * @since 0.1.0
 */
import type { Duration } from "effect"
import { type Backoff, backoffSchedule, type LeafOptions } from "./Leaf.ts"
import { type AnyReward, make_, type Node, type Reward, type RewardOver, type Services } from "./Model.ts"

/**
 * Weighted sum of named components. A zero weight keeps the component as a metric only.
 * Components that do not apply are left out of the sum. The sum requires every service
 * its components require (`Reward<P, AnswerKey | Judge>` below).
 *
 * @example
 * Reward.weighted({ correct: [numericAnswer(gold), 1], brief: [maxLength(12), 0.1] })
 * Reward.weighted({ correct: [usesKey, 1], judged: [usesJudge, 0] })   // Reward<P, AnswerKey | Judge>
 * @since 0.1.0 @category combinators
 */
export const weighted = <P, M extends Record<string, readonly [AnyReward, number]>>(
  members: Record<string, readonly [RewardOver<P>, number]> & M,
): Reward<P, Services<M[keyof M][0]>> => {
  type R = Services<M[keyof M][0]>
  const entries = Object.entries(members).map(([name, [reward, weight]]) => {
    if (!Number.isFinite(weight)) throw new TypeError(`Reward.weighted: weight of "${name}" must be a finite number, got ${weight}`)
    return [name, rename(reward as unknown as Reward<P, R>, name), weight] as const
  })
  if (entries.length === 0) throw new TypeError("Reward.weighted: give at least one component")
  return make_<P, R>("total", { _tag: "Weighted", members: entries })
}

/**
 * Each component's weight in the total, for a `weighted` reward (0 = a metric only);
 * undefined for any other reward. The run records it in `config.json` for the report.
 * @since 0.1.0 @category getters
 */
export const weights = (reward: Reward<any, any>): Record<string, number> | undefined => {
  const node = reward.node
  if (node._tag !== "Weighted") return undefined
  const out: Record<string, number> = {}
  for (const [name, , w] of node.members) out[name] = w
  return out
}

/**
 * 1 when every member scores at least `threshold` (default 1), else 0. Requires every
 * service its members require.
 * @since 0.1.0 @category combinators
 */
export const all = <P, M extends ReadonlyArray<AnyReward>>(name: string, members: ReadonlyArray<RewardOver<P>> & M, threshold = 1): Reward<P, Services<M[number]>> =>
  make_(name, { _tag: "Gate", mode: "all", members: members as unknown as ReadonlyArray<Reward<P, Services<M[number]>>>, threshold })

/**
 * 1 when some member scores at least `threshold` (default 1), else 0. Requires every
 * service its members require.
 * @since 0.1.0 @category combinators
 */
export const any = <P, M extends ReadonlyArray<AnyReward>>(name: string, members: ReadonlyArray<RewardOver<P>> & M, threshold = 1): Reward<P, Services<M[number]>> =>
  make_(name, { _tag: "Gate", mode: "any", members: members as unknown as ReadonlyArray<Reward<P, Services<M[number]>>>, threshold })

/** 1 when the reward scores at least `min`, else 0. @since 0.1.0 @category combinators */
export const threshold = <P, R>(reward: Reward<P, R>, min: number): Reward<P, R> =>
  make_(reward.name, { _tag: "Gate", mode: "all", members: [reward], threshold: min })

/** Transforms the score. @since 0.1.0 @category combinators */
export const map = <P, R>(reward: Reward<P, R>, f: (score: number) => number): Reward<P, R> =>
  make_(reward.name, { _tag: "Map", inner: reward, f })

/** Clamps the score into [min, max]. @since 0.1.0 @category combinators */
export const clamp = <P, R>(reward: Reward<P, R>, min: number, max: number): Reward<P, R> =>
  map(reward, (s) => Math.min(max, Math.max(min, s)))

const mapLeaves = <P, R>(reward: Reward<P, R>, f: (options: LeafOptions) => LeafOptions): Reward<P, R> => {
  const node = reward.node
  switch (node._tag) {
    case "Leaf":
    case "GroupLeaf":
      return make_(reward.name, { ...node, options: f(node.options) } as Node<P, R>)
    case "Weighted":
      return make_(reward.name, { ...node, members: node.members.map(([n, r, w]) => [n, mapLeaves(r, f), w] as const) })
    case "Gate":
      return make_(reward.name, { ...node, members: node.members.map((r) => mapLeaves(r, f)) })
    case "Map":
      return make_(reward.name, { ...node, inner: mapLeaves(node.inner, f) })
  }
}

/**
 * Limits every leaf's evaluation time per attempt; a timeout is an `InfraFault`. See
 * `make` for what a timeout can stop: an Effect is interrupted, a Promise is abandoned
 * (its signal aborted, its permits held until it settles), a synchronous scorer runs
 * to completion.
 * @since 0.1.0 @category combinators
 */
export const timeout = <P, R>(reward: Reward<P, R>, duration: Duration.Input): Reward<P, R> =>
  mapLeaves(reward, (o) => ({ ...o, timeout: duration }))

/**
 * Retries every leaf up to `times` after an `InfraFault`, then masks the sample. The
 * delays grow exponentially with jitter (see `Backoff`: by default 200 ms, 400 ms,
 * 800 ms, ... up to 30 s, each scaled by a random factor in [0.8, 1.2]). A leaf holds
 * no permit while it waits to retry.
 *
 * @example
 * Reward.retry(judge, 4, { base: "1 second", max: "20 seconds" })
 * @since 0.1.0 @category combinators
 */
export const retry = <P, R>(reward: Reward<P, R>, times: number, backoff?: Backoff): Reward<P, R> => {
  if (!(Number.isInteger(times) && times >= 0)) throw new TypeError(`Reward.retry: times must be an integer >= 0, got ${times}`)
  backoffSchedule(backoff) // checks the backoff now rather than at the first retry
  return mapLeaves(reward, (o) => ({ ...o, retries: times, ...(backoff !== undefined ? { backoff } : {}) }))
}

/** Bounds how many evaluations of each leaf run at once. @since 0.1.0 @category combinators */
export const withConcurrency = <P, R>(reward: Reward<P, R>, concurrency: number): Reward<P, R> =>
  mapLeaves(reward, (o) => ({ ...o, concurrency }))

/**
 * Caches every leaf's score keyed by (leaf name, `version`, problem, completion, stop
 * reason). Change `version` whenever the scoring logic changes. Masked samples are not
 * cached.
 *
 * The cache belongs to a run, not to the process: it is the `RewardCache` in force
 * (the runner provides one per run; `withCache` makes one for any program), or else a
 * fresh one per `evaluate` call. Two runs never share scores, and `laws.deterministic`
 * still catches a nondeterministic reward wrapped in `cached`.
 * @since 0.1.0 @category combinators
 */
export const cached = <P, R>(reward: Reward<P, R>, version: string): Reward<P, R> =>
  mapLeaves(reward, (o) => ({ ...o, cacheVersion: version }))

/** Renames a leaf (composites keep their members' names). @since 0.1.0 @category combinators */
export const rename = <P, R>(reward: Reward<P, R>, name: string): Reward<P, R> => {
  const node = reward.node
  return node._tag === "Leaf" || node._tag === "GroupLeaf"
    ? make_(name, { ...node, name } as Node<P, R>)
    : make_(name, node)
}

/** Names of every component a reward reports, in order. @since 0.1.0 @category getters */
export const componentNames = (reward: Reward<any, any>): Array<string> => {
  const node = reward.node
  switch (node._tag) {
    case "Leaf":
    case "GroupLeaf":
      return [node.name]
    case "Weighted":
      return node.members.flatMap(([, r]) => componentNames(r))
    case "Gate":
      return [...node.members.flatMap(componentNames), reward.name]
    case "Map":
      return componentNames(node.inner)
  }
}

/**
 * Rewards: composable Effect programs from a rollout to a score.
 *
 * A reward is a small tree. Leaves score one rollout (`Reward.make`) or a whole group
 * of G rollouts of one prompt (`Reward.group`); combinators (`weighted`, `all`, `any`,
 * `threshold`, `clamp`, `map`, `timeout`, `retry`, `cached`) build on them. Every leaf
 * is a named component whose raw score reaches the metrics and the rollout log.
 *
 * A leaf fails in one of three typed ways, each with a fixed policy:
 * - `NotApplicable`: the reward does not apply; the component is left out of means.
 * - `ModelFault`: the model's fault (say, no answer at all); scores the declared penalty.
 * - `InfraFault`: the scorer's infrastructure failed; retried when the leaf asks for it,
 *   then the sample is masked (never trained on, never silently 0).
 * Anything else is a defect: a leaf that throws, or returns something that is not a
 * finite number, stops the run with a `RewardDefect` that names the reward (the runner
 * adds the env and the problem).
 *
 * The failure types live in `reward/Failures.ts`, the leaf policies (permits, timeouts,
 * abort signals, retries) in `reward/Leaf.ts`, the run-scoped cache in
 * `reward/Cache.ts`; this module re-exports them.
 *
 * @since 0.1.0
 */
import { type Duration, Effect } from "effect"
import type { StopReason } from "./Contract.ts"
import { cacheKey, RewardCache, makeCache, type ScoreCache } from "./reward/Cache.ts"
import { RewardDefect, type RewardFailure } from "./reward/Failures.ts"
import { type Backoff, backoffSchedule, describeValue, type LeafOptions, type LeafOutcome, runLeaf, type ScoreContext } from "./reward/Leaf.ts"
import type { Prompt } from "./Tokenizer.ts"

export { InfraFault, isRewardFailure, ModelFault, NotApplicable, RewardDefect } from "./reward/Failures.ts"
export type { RewardFailure } from "./reward/Failures.ts"
export { backoffSchedule, RewardPermits } from "./reward/Leaf.ts"
export type { Backoff, LeafOptions, ScoreContext } from "./reward/Leaf.ts"
export { makeCache, RewardCache, withCache } from "./reward/Cache.ts"
export type { CachedScore, ScoreCache } from "./reward/Cache.ts"

// ===== Models =====

/** What a reward sees of one sampled completion. @since 0.1.0 @category models */
export interface Rollout<P> {
  readonly problem: P
  readonly prompt: Prompt
  /** the decoded completion, without the end-of-sequence token */
  readonly completion: string
  readonly tokens: ReadonlyArray<number>
  readonly stopReason: StopReason
  /** index of this completion within its group */
  readonly index: number
  /** the group's size G */
  readonly groupSize: number
  /**
   * a multi-turn episode, turn by turn: what the model wrote and what the env answered
   * (`completion` is the last turn); absent for single-turn envs
   */
  readonly turns?: ReadonlyArray<{ readonly text: string; readonly observation?: string }>
}

/**
 * The score of one rollout: `value` is undefined when nothing applied; `masked` says why
 * the sample must not be trained on; `components` holds each leaf's raw score.
 * @since 0.1.0 @category models
 */
export interface Score {
  readonly value: number | undefined
  readonly masked: string | undefined
  readonly components: Readonly<Record<string, number | undefined>>
}

/**
 * What a scorer may return: a number, a Promise of one, or an Effect.
 * @since 0.1.0 @category models
 */
export type ScoreResult<R> = number | PromiseLike<number> | Effect.Effect<number, RewardFailure, R>

/**
 * What a group scorer may return: one number per rollout, a Promise of them, or an Effect.
 * @since 0.1.0 @category models
 */
export type GroupScoreResult<R> =
  | ReadonlyArray<number>
  | PromiseLike<ReadonlyArray<number>>
  | Effect.Effect<ReadonlyArray<number>, RewardFailure, R>

// The scorers are stored as the user gave them; what they return is checked when they run.
type Node<P, R> =
  | {
    readonly _tag: "Leaf"
    readonly name: string
    readonly score: (rollout: Rollout<P>, context: ScoreContext) => unknown
    readonly options: LeafOptions
  }
  | {
    readonly _tag: "GroupLeaf"
    readonly name: string
    readonly score: (group: ReadonlyArray<Rollout<P>>, context: ScoreContext) => unknown
    readonly options: LeafOptions
  }
  | {
    readonly _tag: "Weighted"
    readonly members: ReadonlyArray<readonly [name: string, reward: Reward<P, R>, weight: number]>
  }
  | {
    readonly _tag: "Gate"
    readonly mode: "all" | "any"
    readonly members: ReadonlyArray<Reward<P, R>>
    readonly threshold: number
  }
  | {
    readonly _tag: "Map"
    readonly inner: Reward<P, R>
    readonly f: (score: number) => number
  }

/**
 * A reward over problems of type `P`, needing services `R`.
 * @since 0.1.0 @category models
 */
export interface Reward<in P, out R = never> {
  readonly "~gyre/Reward": "~gyre/Reward"
  readonly name: string
  /** @internal */
  readonly node: Node<P, R>
}

const make_ = <P, R>(name: string, node: Node<P, R>): Reward<P, R> => ({ "~gyre/Reward": "~gyre/Reward", name, node }) as Reward<P, R>

/** @since 0.1.0 @category guards */
export const isReward = (u: unknown): u is Reward<unknown, unknown> =>
  typeof u === "object" && u !== null && (u as { "~gyre/Reward"?: unknown })["~gyre/Reward"] === "~gyre/Reward"

// ===== Constructors =====

/**
 * A reward that scores one rollout. The scorer returns a number, a Promise of one, or
 * an Effect, and fails in a typed way by failing the Effect, or by throwing or
 * rejecting with a `NotApplicable`, `ModelFault` or `InfraFault`. Anything else it
 * throws, and any result that is not a finite number (NaN, a string, an object), is a
 * `RewardDefect` that stops the run, naming the reward and what it returned.
 *
 * Its second argument carries an `AbortSignal`, aborted when the evaluation is
 * abandoned (timed out, or the run interrupted).
 *
 * What a timeout (`options.timeout`, `Reward.timeout`) can and cannot stop:
 * - an Effect is interrupted at its next async boundary, and its permits are returned;
 * - a Promise cannot be stopped from outside: the sample is masked at once and the
 *   scorer's `signal` is aborted, but the Promise keeps its concurrency permits (the
 *   leaf's own and the run's) until it settles, so abandoned work still counts against
 *   every limit. Pass the signal to `fetch` (or check it) so abandoned work ends early;
 *   a Promise that ignores it and never settles holds its permits for good. Return
 *   the Promise itself: one wrapped in an Effect (`Effect.tryPromise`) is an Effect,
 *   and its permits are returned when the Effect is interrupted;
 * - a synchronous scorer cannot be stopped at all: it runs to completion, blocking
 *   everything else on the thread meanwhile, and its score is kept however long it
 *   took (the timer cannot fire while it runs). Keep synchronous scorers fast, or run
 *   slow work in a Promise (a worker thread, a subprocess) that honours the signal.
 *
 * @example
 * const nonEmpty = Reward.make("non_empty", (r) => (r.completion.trim() ? 1 : 0))
 * const judge = Reward.make("judge", async (r, { signal }) => {
 *   const res = await fetch(url, { method: "POST", body: r.completion, signal })
 *   if (!res.ok) throw new Reward.InfraFault({ message: `judge answered ${res.status}` })
 *   return Number(await res.text())
 * }, { timeout: "30 seconds", retries: 3, concurrency: 8 })
 * @since 0.1.0 @category constructors
 */
export const make = <P, R = never>(
  name: string,
  score: (rollout: Rollout<P>, context: ScoreContext) => ScoreResult<R>,
  options: LeafOptions = {},
): Reward<P, R> => make_(name, { _tag: "Leaf", name, score, options })

/**
 * A reward that sees all G completions of one prompt and returns G scores
 * (pairwise preference, diversity bonus, majority vote, ...). Returns, failures,
 * timeouts and the abort signal work as in `make`.
 * @since 0.1.0 @category constructors
 */
export const group = <P, R = never>(
  name: string,
  score: (group: ReadonlyArray<Rollout<P>>, context: ScoreContext) => GroupScoreResult<R>,
  options: LeafOptions = {},
): Reward<P, R> => make_(name, { _tag: "GroupLeaf", name, score, options })

// ===== Combinators =====

/**
 * Weighted sum of named components. A zero weight keeps the component as a metric only.
 * Components that do not apply are left out of the sum.
 *
 * @example
 * Reward.weighted({ correct: [numericAnswer(gold), 1], brief: [maxLength(12), 0.1] })
 * @since 0.1.0 @category combinators
 */
export const weighted = <P, R>(
  members: Record<string, readonly [Reward<P, R>, number]>,
): Reward<P, R> => {
  const entries = Object.entries(members).map(([name, [reward, weight]]) => {
    if (!Number.isFinite(weight)) throw new TypeError(`Reward.weighted: weight of "${name}" must be a finite number, got ${weight}`)
    return [name, rename(reward, name), weight] as const
  })
  if (entries.length === 0) throw new TypeError("Reward.weighted: give at least one component")
  return make_("total", { _tag: "Weighted", members: entries })
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

/** 1 when every member scores at least `threshold` (default 1), else 0. @since 0.1.0 @category combinators */
export const all = <P, R>(name: string, members: ReadonlyArray<Reward<P, R>>, threshold = 1): Reward<P, R> =>
  make_(name, { _tag: "Gate", mode: "all", members, threshold })

/** 1 when some member scores at least `threshold` (default 1), else 0. @since 0.1.0 @category combinators */
export const any = <P, R>(name: string, members: ReadonlyArray<Reward<P, R>>, threshold = 1): Reward<P, R> =>
  make_(name, { _tag: "Gate", mode: "any", members, threshold })

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

// ===== Evaluation =====

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

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
 * Anything else a leaf throws is a defect: the run stops with a `RewardDefect` that names
 * the reward (the runner adds the env and the problem).
 *
 * @since 0.1.0
 */
import { Context, Duration, Effect, Schema, Semaphore } from "effect"
import type { StopReason } from "./Contract.ts"
import type { Prompt } from "./Tokenizer.ts"

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
}

/** The reward does not apply to this rollout; it is left out of means. @since 0.1.0 @category errors */
export class NotApplicable extends Schema.TaggedError<NotApplicable>()("NotApplicable", {
  message: Schema.optional(Schema.String),
}) {}

/** The model's fault: scores `penalty`. @since 0.1.0 @category errors */
export class ModelFault extends Schema.TaggedError<ModelFault>()("ModelFault", {
  penalty: Schema.Finite,
  message: Schema.optional(Schema.String),
}) {}

/** Scoring infrastructure failed (a judge timed out, a sandbox crashed): retry, then mask. @since 0.1.0 @category errors */
export class InfraFault extends Schema.TaggedError<InfraFault>()("InfraFault", {
  message: Schema.String,
}) {}

/** @since 0.1.0 @category errors */
export type RewardFailure = NotApplicable | ModelFault | InfraFault

/** A reward threw, returned a non-finite score, or broke its contract: the run stops. @since 0.1.0 @category errors */
export class RewardDefect extends Schema.TaggedError<RewardDefect>()("RewardDefect", {
  reward: Schema.String,
  message: Schema.String,
  cause: Schema.optional(Schema.Defect()),
}) {}

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

/** Options of a leaf. @since 0.1.0 @category models */
export interface LeafOptions {
  /** time limit per evaluation; exceeding it is an `InfraFault` */
  readonly timeout?: Duration.Input
  /** retries after an `InfraFault` before the sample is masked */
  readonly retries?: number
  /** at most this many evaluations of this leaf at once */
  readonly concurrency?: number
  /** cache results under this version; bump it when the scoring logic changes */
  readonly cacheVersion?: string
}

type Node<P, R> =
  | {
    readonly _tag: "Leaf"
    readonly name: string
    readonly score: (rollout: Rollout<P>) => Effect.Effect<number, RewardFailure, R>
    readonly options: LeafOptions
  }
  | {
    readonly _tag: "GroupLeaf"
    readonly name: string
    readonly score: (group: ReadonlyArray<Rollout<P>>) => Effect.Effect<ReadonlyArray<number>, RewardFailure, R>
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

type ScoreResult<R> = number | Effect.Effect<number, RewardFailure, R>

// ===== Constructors =====

/**
 * A reward that scores one rollout. The function may return a number or an Effect.
 *
 * @example
 * const nonEmpty = Reward.make("non_empty", (r) => (r.completion.trim() ? 1 : 0))
 * @since 0.1.0 @category constructors
 */
export const make = <P, R = never>(
  name: string,
  score: (rollout: Rollout<P>) => ScoreResult<R>,
  options: LeafOptions = {},
): Reward<P, R> =>
  make_(name, {
    _tag: "Leaf",
    name,
    score: (rollout) => {
      const out = score(rollout)
      return typeof out === "number" ? Effect.succeed(out) : out
    },
    options,
  })

/**
 * A reward that sees all G completions of one prompt and returns G scores
 * (pairwise preference, diversity bonus, majority vote, ...).
 * @since 0.1.0 @category constructors
 */
export const group = <P, R = never>(
  name: string,
  score: (group: ReadonlyArray<Rollout<P>>) => ReadonlyArray<number> | Effect.Effect<ReadonlyArray<number>, RewardFailure, R>,
  options: LeafOptions = {},
): Reward<P, R> =>
  make_(name, {
    _tag: "GroupLeaf",
    name,
    score: (rollouts) => {
      const out = score(rollouts)
      return Effect.isEffect(out) ? out : Effect.succeed(out)
    },
    options,
  })

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

/** Limits every leaf's evaluation time; a timeout is an `InfraFault`. @since 0.1.0 @category combinators */
export const timeout = <P, R>(reward: Reward<P, R>, duration: Duration.Input): Reward<P, R> =>
  mapLeaves(reward, (o) => ({ ...o, timeout: duration }))

/** Retries every leaf up to `times` after an `InfraFault`, then masks the sample. @since 0.1.0 @category combinators */
export const retry = <P, R>(reward: Reward<P, R>, times: number): Reward<P, R> =>
  mapLeaves(reward, (o) => ({ ...o, retries: times }))

/** Bounds how many evaluations of each leaf run at once. @since 0.1.0 @category combinators */
export const withConcurrency = <P, R>(reward: Reward<P, R>, concurrency: number): Reward<P, R> =>
  mapLeaves(reward, (o) => ({ ...o, concurrency }))

/**
 * Caches every leaf's score keyed by (leaf name, `version`, problem, completion).
 * Change `version` whenever the scoring logic changes.
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

/**
 * Bounds the number of leaf evaluations in flight across a whole step. The runner
 * provides one; without it, leaves run with no global bound.
 * @since 0.1.0 @category services
 */
export const RewardPermits = Context.Reference<Semaphore.Semaphore | undefined>("gyre/RewardPermits", {
  defaultValue: () => undefined,
})

type LeafOutcome = { readonly value: number | undefined; readonly masked: string | undefined }

const semaphores = new WeakMap<object, Semaphore.Semaphore>()
const caches = new Map<string, LeafOutcome>()
const CACHE_LIMIT = 100_000

const leafSemaphore = (node: object, permits: number | undefined) => {
  if (permits === undefined) return undefined
  let s = semaphores.get(node)
  if (s === undefined) {
    s = Semaphore.makeUnsafe(permits)
    semaphores.set(node, s)
  }
  return s
}

const checkFinite = (name: string, value: number) =>
  Number.isFinite(value)
    ? Effect.succeed(value)
    : Effect.fail(new RewardDefect({ reward: name, message: `returned ${value}; a score must be a finite number` }))

/** Runs one leaf evaluation under its policies: timeout, retries, permits; maps failures to outcomes. */
const runLeaf = <R>(
  name: string,
  options: LeafOptions,
  node: object,
  evaluate: Effect.Effect<number | ReadonlyArray<number>, RewardFailure, R>,
): Effect.Effect<ReadonlyArray<LeafOutcome> | LeafOutcome, RewardDefect, R> =>
  Effect.gen(function* () {
    let attempt: Effect.Effect<number | ReadonlyArray<number>, RewardFailure, R> = evaluate
    if (options.timeout !== undefined) {
      const d = options.timeout
      attempt = attempt.pipe(
        Effect.timeoutOrElse({
          duration: d,
          orElse: () => Effect.fail(new InfraFault({ message: `timed out after ${Duration.format(Duration.fromInputUnsafe(d))}` })),
        }),
      )
    }
    if (options.retries !== undefined && options.retries > 0) {
      attempt = attempt.pipe(Effect.retry({ times: options.retries, while: (e) => e._tag === "InfraFault" }))
    }
    // The global permit is taken inside the leaf's own one, so a leaf waiting for its
    // own permit never holds a global permit that other leaves could use.
    const global = yield* RewardPermits
    if (global !== undefined) attempt = global.withPermits(1)(attempt)
    const own = leafSemaphore(node, options.concurrency)
    if (own !== undefined) attempt = own.withPermits(1)(attempt)
    const result = yield* attempt.pipe(
      Effect.map((v): ReadonlyArray<LeafOutcome> | LeafOutcome =>
        typeof v === "number" ? { value: v, masked: undefined } : v.map((x) => ({ value: x, masked: undefined }))
      ),
      Effect.catchTags({
        NotApplicable: () => Effect.succeed<LeafOutcome>({ value: undefined, masked: undefined }),
        ModelFault: (e) => Effect.succeed<LeafOutcome>({ value: e.penalty, masked: undefined }),
        InfraFault: (e) => Effect.succeed<LeafOutcome>({ value: undefined, masked: `${name}: ${e.message}` }),
      }),
      Effect.catchDefect((defect) =>
        Effect.fail(
          new RewardDefect({
            reward: name,
            message: `threw ${defect instanceof Error ? defect.message : String(defect)}`,
            cause: defect,
          }),
        )
      ),
    )
    const values = Array.isArray(result) ? result : [result as LeafOutcome]
    for (const o of values) if (o.value !== undefined) yield* checkFinite(name, o.value)
    return result
  })

const cacheKey = (name: string, version: string, rollout: Rollout<unknown>) =>
  JSON.stringify([name, version, rollout.problem, rollout.completion, rollout.stopReason])

const evalLeaf = <P, R>(
  node: Extract<Node<P, R>, { _tag: "Leaf" }>,
  rollouts: ReadonlyArray<Rollout<P>>,
): Effect.Effect<Array<LeafOutcome>, RewardDefect, R> =>
  Effect.forEach(
    rollouts,
    (rollout) => {
      const key = node.options.cacheVersion === undefined ? undefined : cacheKey(node.name, node.options.cacheVersion, rollout)
      const hit = key === undefined ? undefined : caches.get(key)
      if (hit !== undefined) return Effect.succeed(hit)
      const scored = Effect.suspend(() => node.score(rollout))
      return runLeaf(node.name, node.options, node, scored).pipe(
        Effect.map((o) => {
          const outcome = o as LeafOutcome
          if (key !== undefined && outcome.masked === undefined) {
            if (caches.size >= CACHE_LIMIT) caches.clear()
            caches.set(key, outcome)
          }
          return outcome
        }),
      )
    },
    { concurrency: "unbounded" },
  )

const evalGroupLeaf = <P, R>(
  node: Extract<Node<P, R>, { _tag: "GroupLeaf" }>,
  rollouts: ReadonlyArray<Rollout<P>>,
): Effect.Effect<Array<LeafOutcome>, RewardDefect, R> =>
  Effect.gen(function* () {
    const result = yield* runLeaf(node.name, node.options, node, Effect.suspend(() => node.score(rollouts)))
    if (!Array.isArray(result)) return rollouts.map(() => result as LeafOutcome)
    if (result.length !== rollouts.length) {
      return yield* new RewardDefect({
        reward: node.name,
        message: `a group reward must return one score per rollout: got ${result.length} for a group of ${rollouts.length}`,
      })
    }
    return result as Array<LeafOutcome>
  })

interface Evaluated {
  readonly values: Array<LeafOutcome>
  readonly components: Array<Record<string, number | undefined>>
}

const evalNode = <P, R>(reward: Reward<P, R>, rollouts: ReadonlyArray<Rollout<P>>): Effect.Effect<Evaluated, RewardDefect, R> =>
  Effect.gen(function* () {
    const node = reward.node
    switch (node._tag) {
      case "Leaf":
      case "GroupLeaf": {
        const values = node._tag === "Leaf" ? yield* evalLeaf(node, rollouts) : yield* evalGroupLeaf(node, rollouts)
        return { values, components: values.map((v) => ({ [node.name]: v.value })) }
      }
      case "Weighted": {
        const parts = yield* Effect.forEach(node.members, ([, r]) => evalNode(r, rollouts), { concurrency: "unbounded" })
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
        const parts = yield* Effect.forEach(node.members, (r) => evalNode(r, rollouts), { concurrency: "unbounded" })
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
        const inner = yield* evalNode(node.inner, rollouts)
        const values: Array<LeafOutcome> = []
        for (const v of inner.values) {
          const input = v.value
          const mapped = input === undefined ? undefined : yield* Effect.try({
            try: () => node.f(input),
            catch: (cause) => new RewardDefect({ reward: reward.name, message: `its map function threw ${cause instanceof Error ? cause.message : String(cause)}`, cause }),
          })
          if (mapped !== undefined) yield* checkFinite(reward.name, mapped)
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
 * `RewardPermits` and each leaf's own `concurrency`).
 * @since 0.1.0 @category evaluation
 */
export const evaluate = Effect.fnUntraced(function* <P, R>(reward: Reward<P, R>, rollouts: ReadonlyArray<Rollout<P>>) {
  const result = yield* evalNode(reward, rollouts)
  return result.values.map((v, i): Score => ({
    value: v.value,
    masked: v.masked,
    components: result.components[i]!,
  }))
})

/**
 * The reward tree and what it scores: a `Rollout`, the `Score` it gets, what a scorer
 * may return, and the `Reward` itself, a named node (a leaf, a group leaf, a weighted
 * sum, a gate or a map). Separate so that the constructors, the combinators and the
 * evaluation can share the node type without it becoming part of `Reward.*`.
 *
 * @since 0.1.0
 */
import type { Effect } from "effect"
import type { StopReason } from "../contract/Contract.ts"
import type { Prompt } from "../services/Tokenizer.ts"
import type { RewardFailure } from "./Failures.ts"
import type { LeafOptions, ScoreContext } from "./Leaf.ts"

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
  /** a game env's rollout: the role the policy played */
  readonly role?: string
  /** a game env's rollout: the role's outcome (e.g. 1 won, -1 lost, 0 a draw) */
  readonly outcome?: number
}

/**
 * The score of one rollout: `value` is undefined when nothing applied; `masked` says why
 * the sample must not be trained on; `components` holds each leaf's raw score.
 *
 * `failed` names each leaf that failed on this rollout (an `InfraFault`, a timeout
 * included, after its retries) with its message, whatever its weight: a weight-0 leaf
 * masks nothing, but its failure is still kept here. `notes` holds what each leaf's
 * scorer recorded with `context.note` (a judge's replies). Both are absent when empty.
 * @since 0.1.0 @category models
 */
export interface Score {
  readonly value: number | undefined
  readonly masked: string | undefined
  readonly components: Readonly<Record<string, number | undefined>>
  readonly failed?: Readonly<Record<string, string>>
  readonly notes?: Readonly<Record<string, ReadonlyArray<string>>>
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

/**
 * A leaf's pre-flight check of one problem, run before training (`gyre check`): what is
 * wrong with the problem for this reward (a gold it cannot read, a missing field), or
 * undefined when nothing is. It needs no services.
 * @since 0.1.0 @category models
 */
export type ProblemCheck<P> = (problem: P) => Effect.Effect<string | undefined> | string | undefined

/** What a pre-flight check found: the leaf that found it and its message. @since 0.1.0 @category models */
export interface Finding {
  readonly reward: string
  readonly message: string
}

// The scorers are stored as the user gave them; what they return is checked when they run.
export type Node<P, R> =
  | {
    readonly _tag: "Leaf"
    readonly name: string
    readonly score: (rollout: Rollout<P>, context: ScoreContext) => unknown
    readonly options: LeafOptions
    readonly check?: ProblemCheck<P> | undefined
  }
  | {
    readonly _tag: "GroupLeaf"
    readonly name: string
    readonly score: (group: ReadonlyArray<Rollout<P>>, context: ScoreContext) => unknown
    readonly options: LeafOptions
    readonly check?: ProblemCheck<P> | undefined
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
  /** @internal the problem type alone, so that combinators infer it apart from the services */
  readonly "~gyre/Problem"?: (problem: P) => void
  readonly name: string
  /** @internal */
  readonly node: Node<P, R>
}

/** The services a reward (or each of a union of rewards) requires. @since 0.1.0 @category models */
export type Services<T> = 0 extends (1 & T) ? never : T extends Reward<any, infer R> ? R : never

/** What the combinators accept as a member before they infer its problem and services. @since 0.1.0 @category models */
export interface AnyReward {
  readonly "~gyre/Reward": "~gyre/Reward"
}

/** A reward over problems of type `P`, whatever services it needs (how combinators see a member). @since 0.1.0 @category models */
export interface RewardOver<in P> extends AnyReward {
  readonly "~gyre/Problem"?: (problem: P) => void
  readonly name: string
}

/**
 * The services a scorer's result requires (an Effect's; none for a number, a Promise or an
 * untyped `any`, such as a field of `JSON.parse`'s result).
 * @since 0.1.0 @category models
 */
export type ResultServices<Out> = 0 extends (1 & Out) ? never : Out extends Effect.Effect<any, any, infer R> ? R : never

/** Wraps a node as a reward (for the constructors and combinators). */
export const make_ = <P, R>(name: string, node: Node<P, R>): Reward<P, R> => ({ "~gyre/Reward": "~gyre/Reward", name, node }) as Reward<P, R>

/** @since 0.1.0 @category guards */
export const isReward = (u: unknown): u is Reward<unknown, unknown> =>
  typeof u === "object" && u !== null && (u as { "~gyre/Reward"?: unknown })["~gyre/Reward"] === "~gyre/Reward"

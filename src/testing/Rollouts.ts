/**
 * Rollouts for tests: build a `Rollout` from a problem and a completion text, and score
 * it with `Reward.evaluate`.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import * as Reward from "../vocabulary/Reward.ts"
import type { Rollout } from "../vocabulary/Reward.ts"

/** Fields of a rollout a test may set. @since 0.1.0 @category models */
export type RolloutOverrides = Partial<Omit<Rollout<never>, "problem" | "completion">>

/**
 * Fake tokens of a completion: one token per Unicode code point (the code point
 * itself), so `tokens.length` is the number of code points.
 * @since 0.1.0 @category utils
 */
export const fakeTokens = (completion: string): Array<number> =>
  // each element of Array.from(string) is one whole code point, never empty
  Array.from(completion, (c) => c.codePointAt(0)!)

/**
 * A rollout of `problem` whose completion is `completion`: prompt `""`, one token per
 * code point (see `fakeTokens`), stop reason "stop", alone in a group of 1. Override
 * any field with `overrides`.
 *
 * @example
 * rollout({ a: 2, b: 3 }, " 5")
 * rollout(problem, "cut off", { stopReason: "length", tokens: [1, 2, 3] })
 * @since 0.1.0 @category constructors
 */
export const rollout = <P>(problem: P, completion: string, overrides: RolloutOverrides = {}): Rollout<P> => ({
  problem,
  completion,
  prompt: "",
  tokens: fakeTokens(completion),
  stopReason: "stop",
  index: 0,
  groupSize: 1,
  ...overrides,
})

/**
 * The G rollouts of one group: one per completion, indexed 0..G-1.
 *
 * @example
 * group(problem, [" 5", " 6", "no idea"]) // 3 rollouts with groupSize 3
 * @since 0.1.0 @category constructors
 */
export const group = <P>(problem: P, completions: ReadonlyArray<string>, overrides: Omit<RolloutOverrides, "index" | "groupSize"> = {}): Array<Rollout<P>> =>
  completions.map((c, index) => rollout(problem, c, { ...overrides, index, groupSize: completions.length }))

/**
 * Scores one completion: `Reward.evaluate` on a group of one.
 *
 * @example
 * const s = yield* score(numericAnswer(gold), problem, "it is 56")
 * assert.strictEqual(s.value, 1)
 * @since 0.1.0 @category evaluation
 */
export const score = <P, R>(
  reward: Reward.Reward<P, R>,
  problem: P,
  completion: string,
  overrides: RolloutOverrides = {},
): Effect.Effect<Reward.Score, Reward.RewardDefect, R> =>
  Reward.evaluate(reward, [rollout(problem, completion, overrides)]).pipe(
    // evaluate gives one score per rollout; none would be a bug in it
    Effect.flatMap(([s]) => (s !== undefined ? Effect.succeed(s) : Effect.die(new Error("Reward.evaluate gave no score for a group of one")))),
  )

/**
 * Scores the completions of one group together (group rewards see all of them).
 *
 * @example
 * const [a, b] = yield* scoreGroup(majorityVote, problem, [" 5", " 6"])
 * @since 0.1.0 @category evaluation
 */
export const scoreGroup = <P, R>(
  reward: Reward.Reward<P, R>,
  problem: P,
  completions: ReadonlyArray<string>,
  overrides: Omit<RolloutOverrides, "index" | "groupSize"> = {},
): Effect.Effect<ReadonlyArray<Reward.Score>, Reward.RewardDefect, R> => Reward.evaluate(reward, group(problem, completions, overrides))

/**
 * Pre-flight checks of problems: every leaf of a reward tree may declare what is wrong
 * with a problem for it (`check` in `Reward.make`'s options), and `checkProblem` runs
 * them all on one problem before training. Separate from the evaluation: no completion
 * is scored.
 *
 * @since 0.1.0
 */
import { Cause, Effect } from "effect"
import type { Finding, ProblemCheck, Reward } from "./Model.ts"

/**
 * Every leaf's pre-flight check in a reward tree, each with the leaf's name (a component
 * of `weighted` is named as the component), in order; leaves with no check are left out.
 * @since 0.1.0 @category getters
 */
export const checksOf = <P>(reward: Reward<P, any>): Array<{ readonly reward: string; readonly check: ProblemCheck<P> }> => {
  const node = reward.node
  switch (node._tag) {
    case "Leaf":
    case "GroupLeaf":
      return node.check === undefined ? [] : [{ reward: node.name, check: node.check }]
    case "Weighted":
      return node.members.flatMap(([, r]) => checksOf(r))
    case "Gate":
      return node.members.flatMap((r) => checksOf(r))
    case "Map":
      return checksOf(node.inner)
  }
}

/**
 * Runs every leaf's pre-flight check on one problem and returns what they found, each
 * finding with the leaf's name; empty when nothing is wrong. A check that throws or
 * fails is itself a finding ("the check failed: ...").
 *
 * @example
 * const findings = yield* Reward.checkProblem(reward, { question: "1/2?", answer: "\\notreadable{" })
 * // => [{ reward: "correct", message: "the gold answer ... cannot be read as math; it will be compared as text" }]
 * @since 0.1.0 @category utils
 */
export const checkProblem = <P>(reward: Reward<P, any>, problem: P): Effect.Effect<Array<Finding>> =>
  Effect.forEach(checksOf(reward), ({ reward: name, check }) =>
    Effect.suspend(() => {
      const out = check(problem)
      return Effect.isEffect(out) ? out : Effect.succeed(out)
    }).pipe(
      Effect.catchCause((cause) => {
        const e = Cause.squash(cause)
        return Effect.succeed(`the check failed: ${e instanceof Error ? e.message : String(e)}`)
      }),
      Effect.map((message): Array<Finding> => (message === undefined ? [] : [{ reward: name, message }])),
    )).pipe(Effect.map((found) => found.flat()))

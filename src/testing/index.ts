/**
 * gyre/testing: property tests for rewards.
 *
 * - `arb`: fast-check arbitraries for completions (numbers in many formats, noise,
 *   completions carrying an answer, any text);
 * - `laws`: ready-made laws (`bounded`, `finite`, `deterministic`, `goldScoresMax`,
 *   `invariant`, `monotone`, `agrees`, `orderIndependent`, `wellBehaved`), each a
 *   Promise that rejects with a counterexample;
 * - `transforms`: transformations of completions for `laws.invariant` / `laws.monotone`;
 * - `rollout`, `group`, `score`, `scoreGroup`: build rollouts and score them;
 * - `probes`: reward-hacking probes, known exploits run against a reward
 *   (`probes.probe`, `probes.assertNoExploits`).
 *
 * @example
 * import { describe, it } from "@effect/vitest"
 * import * as fc from "fast-check"
 * import { arb, laws, transforms } from "gyre/testing"
 * import { numericAnswer } from "../../rewards/answers.ts"
 *
 * const problems = fc.record({ a: fc.integer(), b: fc.integer() })
 * const reward = numericAnswer((p: { a: number; b: number }) => p.a + p.b)
 *
 * describe("numericAnswer", () => {
 *   it("is well behaved", () => laws.wellBehaved(reward, { min: 0, max: 1, problems }))
 *   it("scores the gold answer 1", () => laws.goldScoresMax(reward, { problems, gold: (p) => arb.answerCompletion(p.a + p.b) }))
 *   it("ignores padding", () => laws.invariant(reward, { problems, transform: transforms.padWhitespace }))
 * })
 *
 * @since 0.1.0
 */
export * as arb from "./Arbitraries.ts"
export * as laws from "./Laws.ts"
export * as probes from "./Probes.ts"
export * as transforms from "./Transforms.ts"
export { fakeTokens, group, rollout, score, scoreGroup } from "./Rollouts.ts"
export type { RolloutOverrides } from "./Rollouts.ts"

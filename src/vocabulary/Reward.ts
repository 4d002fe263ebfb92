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
 * `reward/Cache.ts`, the reward tree and what it scores in `reward/Model.ts`, the
 * combinators in `reward/Combinators.ts`, the evaluation in `reward/Evaluate.ts` and
 * what happens to failures (kept with the score, counted, logged once per kind) in
 * `reward/FailureLog.ts`, the leaves' pre-flight checks of problems in `reward/Check.ts`; this module re-exports them and defines the leaf constructors.
 *
 * @since 0.1.0
 */
import type { LeafOptions, ScoreContext } from "../reward/Leaf.ts"
import { type GroupScoreResult, make_, type ProblemCheck, type ResultServices, type Reward, type Rollout, type ScoreResult } from "../reward/Model.ts"

export { InfraFault, isRewardFailure, ModelFault, NotApplicable, RewardDefect } from "../reward/Failures.ts"
export type { RewardFailure } from "../reward/Failures.ts"
export { backoffSchedule, RewardPermits } from "../reward/Leaf.ts"
export type { Backoff, LeafOptions, ScoreContext } from "../reward/Leaf.ts"
export { makeCache, RewardCache, withCache } from "../reward/Cache.ts"
export type { CachedScore, ScoreCache } from "../reward/Cache.ts"
export { isReward } from "../reward/Model.ts"
export type { AnyReward, Finding, GroupScoreResult, ProblemCheck, ResultServices, Reward, Rollout, Score, ScoreResult, Services } from "../reward/Model.ts"
export { checkProblem, checksOf } from "../reward/Check.ts"
export { all, any, cached, clamp, componentNames, map, rename, retry, threshold, timeout, weighted, weights, withConcurrency } from "../reward/Combinators.ts"
export { evaluate } from "../reward/Evaluate.ts"
export { failureCounts } from "../reward/FailureLog.ts"

/**
 * Options of `make` and `group`: the leaf's policies, and its pre-flight check.
 * @since 0.1.0 @category models
 */
export interface MakeOptions<P> extends LeafOptions {
  /**
   * What is wrong with a problem for this reward (a gold it cannot read), or undefined:
   * run on an env's problems before training by `gyre check` and `checkProblem`; it needs
   * no services
   */
  readonly check?: ProblemCheck<P>
}

const leafOptions = <P>({ check: _, ...options }: MakeOptions<P>): LeafOptions => options

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
 * // with a pre-flight check of each problem (`gyre check`)
 * const exact = Reward.make<{ gold: string }>("exact", (r) => (r.completion.trim() === r.problem.gold ? 1 : 0), {
 *   check: (p) => (p.gold.trim() === "" ? "the gold is empty" : undefined),
 * })
 * @since 0.1.0 @category constructors
 */
export const make = <P, R = never, Out extends ScoreResult<any> = ScoreResult<R>>(
  name: string,
  score: (rollout: Rollout<P>, context: ScoreContext) => Out,
  options: MakeOptions<P> = {},
): Reward<P, R | ResultServices<Out>> => make_(name, { _tag: "Leaf", name, score, options: leafOptions(options), check: options.check })

/**
 * A reward that sees all G completions of one prompt and returns G scores
 * (pairwise preference, diversity bonus, majority vote, ...). Returns, failures,
 * timeouts and the abort signal work as in `make`.
 * @since 0.1.0 @category constructors
 */
export const group = <P, R = never, Out extends GroupScoreResult<any> = GroupScoreResult<R>>(
  name: string,
  score: (group: ReadonlyArray<Rollout<P>>, context: ScoreContext) => Out,
  options: MakeOptions<P> = {},
): Reward<P, R | ResultServices<Out>> => make_(name, { _tag: "GroupLeaf", name, score, options: leafOptions(options), check: options.check })

/**
 * Reward scheduling overhead: 1,000 evaluations of a reward that takes 50 ms, as
 * 125 groups of 8 rollouts scored concurrently (as the runner does), under
 *   1. a global `RewardPermits` semaphore of 64 permits,
 *   2. a per-leaf `concurrency: 64`,
 *   3. both at once,
 *   4. a Promise scorer (a 50 ms timer) under the global semaphore: the path where a
 *      Promise's permits are handed to a fiber that returns them when it settles.
 * The ideal wall time is 1000 * 50 / 64 ms; the goal is a ratio of at most 1.1.
 *
 * Run: npx tsx bench/rewards.ts
 */
import { Effect, Semaphore } from "effect"
import { Reward } from "gyre"

const GROUPS = 125
const GROUP_SIZE = 8
const SLEEP_MS = 50
const PERMITS = 64
const ROUNDS = 3

type Problem = { readonly id: number }

const groups: ReadonlyArray<ReadonlyArray<Reward.Rollout<Problem>>> = Array.from({ length: GROUPS }, (_, g) =>
  Array.from({ length: GROUP_SIZE }, (_, index) => ({
    problem: { id: g },
    prompt: `problem ${g}`,
    completion: `completion ${index}`,
    tokens: [1, 2, 3],
    stopReason: "stop" as const,
    index,
    groupSize: GROUP_SIZE,
  })))

const slow = Reward.make<Problem>("slow", () => Effect.sleep(SLEEP_MS).pipe(Effect.as(1)))
const slowPromise = Reward.make<Problem>("slow_promise", () => new Promise<number>((resolve) => setTimeout(() => resolve(1), SLEEP_MS)))

const scoreAll = (reward: Reward.Reward<Problem>) =>
  Effect.forEach(groups, (group) => Reward.evaluate(reward, group), { concurrency: "unbounded" })

const variants: ReadonlyArray<readonly [string, Effect.Effect<unknown, unknown>]> = [
  ["global RewardPermits(64)", Effect.gen(function* () {
    const permits = yield* Semaphore.make(PERMITS)
    return yield* scoreAll(slow).pipe(Effect.provideService(Reward.RewardPermits, permits))
  })],
  ["per-leaf concurrency 64", scoreAll(Reward.withConcurrency(slow, PERMITS))],
  ["both", Effect.gen(function* () {
    const permits = yield* Semaphore.make(PERMITS)
    return yield* scoreAll(Reward.withConcurrency(slow, PERMITS)).pipe(Effect.provideService(Reward.RewardPermits, permits))
  })],
  ["Promise, RewardPermits(64)", Effect.gen(function* () {
    const permits = yield* Semaphore.make(PERMITS)
    return yield* scoreAll(slowPromise).pipe(Effect.provideService(Reward.RewardPermits, permits))
  })],
]

const time = async (program: Effect.Effect<unknown, unknown>) => {
  const start = performance.now()
  await Effect.runPromise(program)
  return performance.now() - start
}

const ideal = (GROUPS * GROUP_SIZE * SLEEP_MS) / PERMITS
const waves = Math.ceil((GROUPS * GROUP_SIZE) / PERMITS) * SLEEP_MS

console.log(`${GROUPS * GROUP_SIZE} evaluations of ${SLEEP_MS} ms (${GROUPS} groups x ${GROUP_SIZE}), ${PERMITS} at a time`)
console.log(`ideal ${ideal.toFixed(1)} ms (whole waves: ${waves} ms, ratio ${(waves / ideal).toFixed(3)})`)
await time(variants[0]![1]) // warm-up
for (const [name, program] of variants) {
  const runs: Array<number> = []
  for (let i = 0; i < ROUNDS; i++) runs.push(await time(program))
  const best = Math.min(...runs)
  const median = [...runs].sort((a, b) => a - b)[Math.floor(runs.length / 2)]!
  console.log(
    `${name.padEnd(28)} wall ${best.toFixed(1)} ms best, ${median.toFixed(1)} ms median of ${ROUNDS}  ratio ${(best / ideal).toFixed(3)} (median ${(median / ideal).toFixed(3)})`,
  )
}

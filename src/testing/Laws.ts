/**
 * Ready-made laws for rewards. Each law runs a fast-check property through
 * `Reward.evaluate` and returns a Promise that rejects with the counterexample (the
 * problem, the completions, the scores and the seed to replay) when the law fails.
 *
 * @example
 * import { arb, laws } from "gyre/testing"
 *
 * it("stays in [0, 1]", () => laws.bounded(numericAnswer(gold), { min: 0, max: 1, problems }))
 * it("the gold answer scores 1", () =>
 *   laws.goldScoresMax(numericAnswer(gold), { problems, gold: (p) => arb.answerCompletion(gold(p)) }))
 *
 * @since 0.1.0
 */
import { isDeepStrictEqual } from "node:util"
import { Cause, Effect, Exit } from "effect"
import * as fc from "fast-check"
import { at } from "../util/Lookup.ts"
import * as Reward from "../vocabulary/Reward.ts"
import { FailureScope } from "../reward/FailureLog.ts"
import { completion as anyCompletion } from "./Arbitraries.ts"
import { rollout } from "./Rollouts.ts"

// ===== Options =====

/** Values given as an arbitrary or as a fixed list. @since 0.1.0 @category models */
export type Source<A> = fc.Arbitrary<A> | ReadonlyArray<A>

/** Completions to try, fixed or drawn per problem. @since 0.1.0 @category models */
export type Completions<P> = fc.Arbitrary<string> | ((problem: P) => fc.Arbitrary<string>)

/**
 * A transformation of a completion: returns the new text, or an arbitrary of texts
 * for a random transformation (see `transforms`).
 * @since 0.1.0 @category models
 */
export type Transform<P> = (completion: string, problem: P) => string | fc.Arbitrary<string>

/** How many cases a law tries, and with which seed. @since 0.1.0 @category models */
export interface RunOptions {
  /** cases to try (default 100) */
  readonly numRuns?: number
  /** replay a failure with the seed it printed */
  readonly seed?: number
}

/**
 * Supplies the services a reward needs, as `Effect.provide(layer)` does. Required when
 * the reward needs services, absent otherwise.
 * @since 0.1.0 @category models
 */
export type Provide<R> = [R] extends [never]
  ? { readonly provide?: undefined }
  : {
    readonly provide: (
      self: Effect.Effect<ReadonlyArray<Reward.Score>, Reward.RewardDefect, R>,
    ) => Effect.Effect<ReadonlyArray<Reward.Score>, unknown, never>
  }

/** The inputs a law draws. @since 0.1.0 @category models */
export interface Domain<P> extends RunOptions {
  /** the problems */
  readonly problems: Source<P>
  /** the completions (default `arb.completion()`: any text) */
  readonly completions?: Completions<P>
  /** completions scored together per case (default 1; more for group rewards) */
  readonly groupSize?: number
}

// ===== Machinery =====

const toArbitrary = <A>(what: string, source: Source<A>): fc.Arbitrary<A> => {
  if (source instanceof fc.Arbitrary) return source
  if (source.length === 0) throw new TypeError(`laws: ${what} is an empty list`)
  return fc.constantFrom(...source)
}

const completionsFor = <P>(completions: Completions<P> | undefined, problem: P): fc.Arbitrary<string> =>
  completions === undefined ? anyCompletion() : typeof completions === "function" ? completions(problem) : completions

const textArbitrary = (out: string | fc.Arbitrary<string>): fc.Arbitrary<string> => (typeof out === "string" ? fc.constant(out) : out)

const groupSizeOf = (domain: { readonly groupSize?: number }) => {
  const g = domain.groupSize ?? 1
  if (!(Number.isInteger(g) && g >= 1)) throw new TypeError(`laws: groupSize must be an integer >= 1, got ${g}`)
  return g
}

/** A problem and a group of completions for it. */
const cases = <P>(domain: Domain<P>): fc.Arbitrary<[P, Array<string>]> => {
  const size = groupSizeOf(domain)
  return toArbitrary("problems", domain.problems).chain((problem) =>
    fc.tuple(fc.constant(problem), fc.array(completionsFor(domain.completions, problem), { minLength: size, maxLength: size }))
  )
}

const show = (u: unknown): string => {
  if (typeof u === "string") return JSON.stringify(u)
  try {
    return JSON.stringify(u, (_, v) => (typeof v === "number" && !Number.isFinite(v) ? String(v) : v))
  } catch {
    return String(u)
  }
}

/** A failed law, with what it saw. */
class LawViolation extends Error {
  override readonly name = "LawViolation"
}

const fail = (law: string, reward: { readonly name: string }, what: string, details: Record<string, unknown>): never => {
  const lines = Object.entries(details).map(([k, v]) => `  ${k}: ${k === "cause" ? String(v).replace(/\n/g, "\n    ") : show(v)}`)
  throw new LawViolation([`law ${law}: reward "${reward.name}" ${what}`, ...lines].join("\n"))
}

type AnyProvide = ((self: Effect.Effect<ReadonlyArray<Reward.Score>, Reward.RewardDefect, any>) => Effect.Effect<ReadonlyArray<Reward.Score>, unknown, never>) | undefined

const scoreAll = async <P, R>(
  law: string,
  reward: Reward.Reward<P, R>,
  problem: P,
  completions: ReadonlyArray<string>,
  provide: AnyProvide,
): Promise<ReadonlyArray<Reward.Score>> => {
  const rollouts = completions.map((c, index) => rollout(problem, c, { index, groupSize: completions.length }))
  // Each scoring gets a cache of its own, so `Reward.cached` (even under a cache that
  // `provide` supplies) cannot replay one scoring's results into another.
  // A failure of the reward is logged once per kind for the reward, not once per case.
  const evaluated = Reward.withCache(Reward.evaluate(reward, rollouts)).pipe(Effect.provideService(FailureScope, reward))
  const runnable = (provide === undefined ? evaluated : provide(evaluated)) as Effect.Effect<ReadonlyArray<Reward.Score>, unknown, never>
  const exit = await Effect.runPromiseExit(runnable)
  if (Exit.isFailure(exit)) {
    const error = Cause.squash(exit.cause)
    return error instanceof Reward.RewardDefect
      ? fail(law, reward, `failed instead of scoring: RewardDefect in component "${error.reward}": ${error.message}`, { problem, completions })
      : fail(law, reward, "failed instead of scoring", { problem, completions, cause: Cause.pretty(exit.cause) })
  }
  return exit.value
}

const runProperty = <T>(options: RunOptions, arbitrary: fc.Arbitrary<T>, check: (value: T) => Promise<void>): Promise<void> =>
  fc.assert(fc.asyncProperty(arbitrary, check), {
    numRuns: options.numRuns ?? 100,
    includeErrorInReport: true,
    ...(options.seed !== undefined ? { seed: options.seed } : {}),
  })

const valuesEqual = (a: number | undefined, b: number | undefined, tolerance: number) =>
  a === undefined || b === undefined ? a === b : Math.abs(a - b) <= tolerance

// ===== Laws =====

/**
 * Every score that applies lies in `[min, max]`.
 *
 * @example
 * it("bounded", () => laws.bounded(maxLength(12), { min: 0, max: 1, problems: [null] }))
 * @since 0.1.0 @category laws
 */
export const bounded = <P, R>(
  reward: Reward.Reward<P, R>,
  options: Domain<P> & { readonly min: number; readonly max: number } & Provide<R>,
): Promise<void> => {
  const { min, max } = options
  if (!(min <= max)) throw new TypeError(`laws.bounded: min (${min}) must be <= max (${max})`)
  return runProperty(options, cases(options), async ([problem, completions]) => {
    const scores = await scoreAll("bounded", reward, problem, completions, options.provide)
    scores.forEach((s, i) => {
      if (s.value !== undefined && !(s.value >= min && s.value <= max)) {
        fail("bounded", reward, `scored ${s.value}, outside [${min}, ${max}]`, { problem, completion: completions[i], score: s })
      }
    })
  })
}

/**
 * The reward never fails (no `RewardDefect`: no throw, no NaN or infinite score) and
 * every score is a finite number or does not apply.
 * @since 0.1.0 @category laws
 */
export const finite = <P, R>(reward: Reward.Reward<P, R>, options: Domain<P> & Provide<R>): Promise<void> =>
  runProperty(options, cases(options), async ([problem, completions]) => {
    const scores = await scoreAll("finite", reward, problem, completions, options.provide)
    scores.forEach((s, i) => {
      if (s.value !== undefined && !Number.isFinite(s.value)) fail("finite", reward, `scored ${s.value}`, { problem, completion: completions[i] })
      for (const [name, v] of Object.entries(s.components)) {
        if (v !== undefined && !Number.isFinite(v)) fail("finite", reward, `reported component ${name} = ${v}`, { problem, completion: completions[i] })
      }
    })
  })

/**
 * Scoring the same rollouts twice gives the same scores (values, masks and components).
 * The two scorings share no cache, so a nondeterministic reward fails this law even
 * when it is wrapped in `Reward.cached`.
 * @since 0.1.0 @category laws
 */
export const deterministic = <P, R>(reward: Reward.Reward<P, R>, options: Domain<P> & Provide<R>): Promise<void> =>
  runProperty(options, cases(options), async ([problem, completions]) => {
    const first = await scoreAll("deterministic", reward, problem, completions, options.provide)
    const second = await scoreAll("deterministic", reward, problem, completions, options.provide)
    if (!isDeepStrictEqual(first, second)) fail("deterministic", reward, "scored the same rollouts differently", { problem, completions, first, second })
  })

/**
 * `bounded`, `finite` and `deterministic` at once: the checks every reward should pass.
 *
 * @example
 * it("well behaved", () => laws.wellBehaved(numericAnswer(gold), { min: 0, max: 1, problems }))
 * @since 0.1.0 @category laws
 */
export const wellBehaved = async <P, R>(
  reward: Reward.Reward<P, R>,
  options: Domain<P> & { readonly min: number; readonly max: number } & Provide<R>,
): Promise<void> => {
  await bounded(reward, options)
  await deterministic(reward, options)
}

/** Options of `goldScoresMax`. @since 0.1.0 @category models */
export interface GoldOptions<P> extends RunOptions {
  readonly problems: Source<P>
  /** a gold completion of a problem, or an arbitrary of gold completions */
  readonly gold: (problem: P) => string | fc.Arbitrary<string>
  /** the best score (default 1) */
  readonly max?: number
  /** allowed distance from `max` (default 0) */
  readonly tolerance?: number
}

/**
 * A gold completion scores the maximum.
 *
 * @example
 * laws.goldScoresMax(numericAnswer(answer), { problems, gold: (p) => arb.answerCompletion(answer(p)) })
 * @since 0.1.0 @category laws
 */
export const goldScoresMax = <P, R>(reward: Reward.Reward<P, R>, options: GoldOptions<P> & Provide<R>): Promise<void> => {
  const max = options.max ?? 1
  const tolerance = options.tolerance ?? 0
  const arbitrary = toArbitrary("problems", options.problems).chain((problem) =>
    fc.tuple(fc.constant(problem), textArbitrary(options.gold(problem)))
  )
  return runProperty(options, arbitrary, async ([problem, gold]) => {
    const s = at(await scoreAll("goldScoresMax", reward, problem, [gold], options.provide), 0, "law goldScoresMax: score")
    if (s.value === undefined || Math.abs(s.value - max) > tolerance) {
      fail("goldScoresMax", reward, `scored ${s.value} on a gold completion, not the maximum ${max}`, { problem, completion: gold, score: s })
    }
  })
}

/** Options of `invariant`. @since 0.1.0 @category models */
export interface InvariantOptions<P> extends Domain<P> {
  /** the transformation the score must not notice */
  readonly transform: Transform<P>
  /** allowed difference between the scores (default 0) */
  readonly tolerance?: number
}

const transformed = <P>(domain: Domain<P>, transform: Transform<P>): fc.Arbitrary<[P, Array<string>, Array<string>]> =>
  cases(domain).chain(([problem, completions]) =>
    fc.tuple(fc.constant(problem), fc.constant(completions), fc.tuple(...completions.map((c) => textArbitrary(transform(c, problem)))))
  )

/**
 * The score does not change under a transformation of the completion (padding with
 * whitespace, changing case, appending text after the answer, ...). Whether a reward
 * applies and whether the sample is masked must not change either.
 *
 * @example
 * laws.invariant(exactMatch(gold), { problems, completions, transform: transforms.padWhitespace })
 * @since 0.1.0 @category laws
 */
export const invariant = <P, R>(reward: Reward.Reward<P, R>, options: InvariantOptions<P> & Provide<R>): Promise<void> => {
  const tolerance = options.tolerance ?? 0
  return runProperty(options, transformed(options, options.transform), async ([problem, before, after]) => {
    const a = await scoreAll("invariant", reward, problem, before, options.provide)
    const b = await scoreAll("invariant", reward, problem, after, options.provide)
    a.forEach((s, i) => {
      const t = at(b, i, "law invariant: score after the transformation")
      if (!valuesEqual(s.value, t.value, tolerance) || s.masked !== t.masked) {
        fail("invariant", reward, `scored ${s.value} before the transformation and ${t.value} after`, {
          problem,
          before: before[i],
          after: after[i],
        })
      }
    })
  })
}

/** Options of `monotone`. @since 0.1.0 @category models */
export interface MonotoneOptions<P> extends Domain<P> {
  readonly transform: Transform<P>
  /** how the score may move under the transformation */
  readonly direction: "nonIncreasing" | "nonDecreasing"
}

/**
 * The score moves only one way under a transformation: appending text never raises a
 * length reward, say. Whether the reward applies must not change.
 *
 * @example
 * laws.monotone(lengthPenalty({ from: 10, to: 20 }), { problems: [null], transform: transforms.appendNoise, direction: "nonIncreasing" })
 * @since 0.1.0 @category laws
 */
export const monotone = <P, R>(reward: Reward.Reward<P, R>, options: MonotoneOptions<P> & Provide<R>): Promise<void> =>
  runProperty(options, transformed(options, options.transform), async ([problem, before, after]) => {
    const a = await scoreAll("monotone", reward, problem, before, options.provide)
    const b = await scoreAll("monotone", reward, problem, after, options.provide)
    a.forEach((s, i) => {
      const x = s.value
      const y = at(b, i, "law monotone: score after the transformation").value
      const ok = x === undefined || y === undefined
        ? x === y
        : options.direction === "nonIncreasing" ? y <= x : y >= x
      if (!ok) {
        fail("monotone", reward, `went from ${x} to ${y}; it must be ${options.direction}`, { problem, before: before[i], after: after[i] })
      }
    })
  })

/** Options of `agrees`. @since 0.1.0 @category models */
export interface AgreesOptions<P> extends Domain<P> {
  /** the expected score (`undefined`: the reward does not apply) */
  readonly expected: (problem: P, completion: string) => number | undefined
  /** allowed difference (default 0) */
  readonly tolerance?: number
}

/**
 * The reward agrees with a reference implementation (an oracle) on every case.
 *
 * @example
 * laws.agrees(maxLength(5), { problems: [null], expected: (_, c) => (c.length <= 5 ? 1 : 0) })
 * @since 0.1.0 @category laws
 */
export const agrees = <P, R>(reward: Reward.Reward<P, R>, options: AgreesOptions<P> & Provide<R>): Promise<void> => {
  const tolerance = options.tolerance ?? 0
  return runProperty(options, cases(options), async ([problem, completions]) => {
    const scores = await scoreAll("agrees", reward, problem, completions, options.provide)
    scores.forEach((s, i) => {
      const completion = at(completions, i, "law agrees: completion")
      const want = options.expected(problem, completion)
      if (!valuesEqual(s.value, want, tolerance)) {
        fail("agrees", reward, `scored ${s.value} where ${want} was expected`, { problem, completion, score: s })
      }
    })
  })
}

/**
 * A group reward does not depend on the order of the group: shuffling the completions
 * shuffles the scores the same way. `groupSize` defaults to 4 here.
 * @since 0.1.0 @category laws
 */
export const orderIndependent = <P, R>(reward: Reward.Reward<P, R>, options: Domain<P> & Provide<R>): Promise<void> => {
  const domain: Domain<P> = { ...options, groupSize: options.groupSize ?? 4 }
  const size = groupSizeOf(domain)
  const indices = Array.from({ length: size }, (_, i) => i)
  const arbitrary = cases(domain).chain(([problem, completions]) =>
    fc.tuple(fc.constant(problem), fc.constant(completions), fc.shuffledSubarray(indices, { minLength: size, maxLength: size }))
  )
  return runProperty(options, arbitrary, async ([problem, completions, order]) => {
    const a = await scoreAll("orderIndependent", reward, problem, completions, options.provide)
    const b = await scoreAll("orderIndependent", reward, problem, order.map((i) => at(completions, i, "law orderIndependent: completion")), options.provide)
    order.forEach((from, to) => {
      const [before, after] = [at(a, from, "law orderIndependent: score"), at(b, to, "law orderIndependent: score")]
      if (!valuesEqual(before.value, after.value, 0)) {
        fail("orderIndependent", reward, `scored completion ${from} ${before.value} in one order and ${after.value} in another`, {
          problem,
          completions,
          order,
        })
      }
    })
  })
}

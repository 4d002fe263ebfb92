/**
 * Distinct problem sets: up to `size` distinct problems of a split, drawn without
 * replacement and the same for every call with a seed, and the fixed held-out eval set
 * built from them. Separate from `Tasks.ts` because it is about sets of problems (when a
 * split is exhausted, what is logged), not about any one problem.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { Env } from "./Definition.ts"
import { rowIndex } from "./RowIndex.ts"
import { heldOutFraction, problemAt, type Split, splitRows, type Task } from "./Tasks.ts"

/**
 * A seeded source is taken to have run out of new problems once this many draws in
 * a row brought none: 20 times the distinct problems found so far, at least 200. For a
 * split of k equally likely problems, the chance that one of them is still missing is
 * then about k * e^-20.
 */
const staleLimit = (distinct: number) => Math.max(200, 20 * distinct)

/** A set of distinct problems of one split, and how it was drawn. @since 0.1.0 @category models */
export interface DistinctSet<P> {
  /** distinct problems, in the order they were drawn */
  readonly tasks: Array<Task<P>>
  /** how many were asked for */
  readonly requested: number
  /** true when the split has fewer distinct problems than asked for */
  readonly exhausted: boolean
}

/** @since 0.1.0 @category models */
export type EvalSetInfo<P> = DistinctSet<P>

const distinctCache = new WeakMap<Env<any, any>, Map<string, DistinctSet<any>>>()

/**
 * Up to `size` distinct problems of a split, drawn without replacement, the same for
 * every call with the same seed:
 *
 * - seeded sources: problems are drawn from the split until `size` distinct ones are
 *   found, or until no new one has appeared for a long run of draws (the split is
 *   exhausted: single-digit arithmetic, for one, has only a few dozen held-out facts);
 * - rows and JSONL: the split's rows in a seeded order, each distinct row once.
 *
 * Problems are compared by their JSON. `exhausted` says the split ran out first.
 * @since 0.1.0 @category accessors
 */
export const distinctTasks = Effect.fnUntraced(function* <P, R>(
  env: Env<P, R>,
  options: { readonly split: Split; readonly seed: number; readonly size: number; readonly difficulty?: number },
) {
  const { split, seed, size: requested } = options
  const difficulty = options.difficulty ?? env.difficulty ?? 1
  const cacheKey = `${split}/${seed}/${requested}/${difficulty}`
  const cache = distinctCache.get(env) ?? new Map<string, DistinctSet<any>>()
  distinctCache.set(env, cache)
  const cached = cache.get(cacheKey)
  if (cached !== undefined) return { ...cached, tasks: [...cached.tasks] } as DistinctSet<P>
  const seen = new Set<string>()
  const tasks: Array<Task<P>> = []
  const add = (task: Task<P>) => {
    const k = JSON.stringify(task.problem)
    if (seen.has(k)) return false
    seen.add(k)
    tasks.push(task)
    return true
  }
  if (env.source._tag === "Seeded") {
    let stale = 0
    for (let index = 0; tasks.length < requested && stale < staleLimit(tasks.length); index++) {
      const task = yield* problemAt(env, { seed, index, split, difficulty })
      stale = add(task) ? 0 : stale + 1
    }
  } else {
    const rows = yield* rowIndex(env)
    const pool = yield* splitRows(env, rows, split)
    const order = rows.order(split, seed, 0)
    for (let index = 0; index < order.length && tasks.length < requested; index++) {
      add({ key: `${env.name}/${split}/${seed}/${index}`, env: env.name, problem: yield* rows.row(pool[order[index]!]!) })
    }
  }
  const out: DistinctSet<P> = { tasks, requested, exhausted: tasks.length < requested }
  cache.set(cacheKey, out)
  return { ...out, tasks: [...tasks] }
})

/** eval sets whose size was already logged: once per env, seed, size and difficulty */
const loggedEvalSets = new WeakMap<Env<any, any>, Set<string>>()

/**
 * The fixed held-out evaluation set of a seed, with its size: {@link distinctTasks} of
 * the eval split, `size` of them (default `eval.size`, else 200) or the whole split when
 * it has fewer. Then an info line (once per env, seed, size and difficulty) says how many
 * distinct problems the set has.
 * @since 0.1.0 @category accessors
 */
export const evalSetInfo = Effect.fnUntraced(function* <P, R>(
  env: Env<P, R>,
  options: { readonly seed: number; readonly size?: number; readonly difficulty?: number },
) {
  const difficulty = options.difficulty ?? env.difficulty ?? 1
  const info = yield* distinctTasks(env, { split: "eval", seed: options.seed, size: options.size ?? env.eval?.size ?? 200, difficulty })
  const logged = loggedEvalSets.get(env) ?? new Set<string>()
  loggedEvalSets.set(env, logged)
  const logKey = `${options.seed}/${info.requested}/${difficulty}`
  if (info.exhausted && !logged.has(logKey)) {
    logged.add(logKey)
    yield* Effect.logInfo(
      `${env.name}: the eval set has ${info.tasks.length} distinct problems, fewer than the ${info.requested} asked for: ` +
        `that is the whole eval split${env.source._tag === "Seeded" ? ` at difficulty ${difficulty}` : ""} (eval.heldOut ${heldOutFraction(env)})`,
    )
  }
  return info
})

/**
 * The fixed held-out evaluation set of a seed: distinct problems of the eval split, at
 * most `size` (default `eval.size`, else 200), the same in every run with that seed. Its
 * length is the number of problems; see {@link evalSetInfo}.
 * @since 0.1.0 @category accessors
 */
export const evalSet = <P, R>(env: Env<P, R>, options: { readonly seed: number; readonly size?: number; readonly difficulty?: number }) =>
  evalSetInfo(env, options).pipe(Effect.map((info) => info.tasks))

/**
 * Stable task keys and the train/eval split: problem `index` of seed `s` in a split is
 * always the same problem (key `<env>/<split>/<s>/<index>`), and a hash of the problem
 * itself decides its split, so the eval set never overlaps training. Separate from the
 * definition (what an env is) and from the eval set (which distinct problems are scored).
 *
 * @since 0.1.0
 */
import { Effect, Schema } from "effect"
import { formatIssue } from "../util/Decode.ts"
import { type Env, EnvError } from "./Definition.ts"
import { random } from "../util/Random.ts"
import { heldOutFraction, type Split, splitOf } from "./Split.ts"

export { heldOutFraction, type Split, splitOf } from "./Split.ts"
import { type RowIndex, rowIndex } from "./RowIndex.ts"

/** A problem with its stable key. @since 0.1.0 @category models */
export interface Task<P> {
  readonly key: string
  readonly env: string
  readonly problem: P
}

const MAX_REJECTIONS = 1000

/**
 * Problem `index` of `seed` in `split`. Seeded envs draw until the problem falls in the
 * split; row envs walk a seeded permutation of the split's rows (a new one per epoch),
 * computed once and kept (`RowIndex.ts`), so a draw costs the same at any data size.
 * @since 0.1.0 @category accessors
 */
export const problemAt = Effect.fnUntraced(function* <P, R>(
  env: Env<P, R>,
  options: { readonly seed: number; readonly index: number; readonly split: Split; readonly difficulty?: number },
) {
  const { seed, index, split } = options
  const key = `${env.name}/${split}/${seed}/${index}`
  const difficulty = options.difficulty ?? env.difficulty ?? 1
  const source = env.source
  if (source._tag === "Seeded") {
    for (let attempt = 0; attempt < MAX_REJECTIONS; attempt++) {
      const rng = random(`${key}/${difficulty}/${attempt}`)
      const candidate = yield* Effect.suspend(() => {
        const out = source.generate({ random: rng, difficulty, index })
        return Effect.isEffect(out) ? out : Effect.succeed(out)
      }).pipe(
        Effect.catchDefect((d) =>
          Effect.fail(new EnvError({ env: env.name, reason: "GeneratorFailed", message: `generator threw for ${key}: ${String(d)}` }))
        ),
      )
      const problem = yield* Schema.decodeUnknownEffect(env.problem)(candidate).pipe(
        Effect.mapError((e) =>
          new EnvError({ env: env.name, reason: "GeneratorFailed", message: `generator returned a problem that does not match the Schema (${key}): ${formatIssue(e.issue, "", { value: candidate })}` })
        ),
      )
      if (heldOutFraction(env) === 0 || splitOf(env, problem) === split) return { key, env: env.name, problem } satisfies Task<P>
    }
    return yield* new EnvError({
      env: env.name,
      reason: "ProblemSpaceTooSmall",
      message: `no ${split} problem found in ${MAX_REJECTIONS} draws at difficulty ${difficulty}; lower eval.heldOut or widen the generator`,
    })
  }
  const rows = yield* rowIndex(env)
  const pool = yield* splitRows(env, rows, split)
  const order = rows.order(split, seed, Math.floor(index / pool.length))
  // index % length is below the length, and so is every position of the order
  const problem = yield* rows.row(pool[order[index % pool.length]!]!)
  return { key, env: env.name, problem } satisfies Task<P>
})

/** The row numbers of a split; an empty split is an error that says what to change. */
export const splitRows = <P>(env: Env<P, any>, rows: RowIndex<P>, split: Split) => {
  const pool = rows.split(split)
  return pool.length > 0
    ? Effect.succeed(pool)
    : Effect.fail(new EnvError({ env: env.name, reason: "ProblemSpaceTooSmall", message: `the ${split} split has no rows; change eval.heldOut` }))
}

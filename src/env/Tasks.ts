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
import { hash32, random } from "../util/Random.ts"

/** @since 0.1.0 @category models */
export type Split = "train" | "eval"

/** A problem with its stable key. @since 0.1.0 @category models */
export interface Task<P> {
  readonly key: string
  readonly env: string
  readonly problem: P
}

/** `eval.heldOut`, default 0.1 */
export const heldOutFraction = (env: Env<any, any>) => env.eval?.heldOut ?? 0.1

/**
 * Which split a (decoded) problem belongs to: a hash of the env's name and the problem's
 * JSON, compared with `eval.heldOut`. The same problem is always in the same split, in
 * every run and every seed. With `heldOut: 0` every problem is in both.
 * @since 0.1.0 @category accessors
 */
export const splitOf = (env: Env<any, any>, problem: unknown): Split =>
  (hash32(`${env.name}:${JSON.stringify(problem)}`) % 10_000) / 10_000 < heldOutFraction(env) ? "eval" : "train"

const MAX_REJECTIONS = 1000

const decodedRows = new WeakMap<Env<any, any>, Array<unknown>>()
const loadRows = (env: Env<any, any>) =>
  Effect.gen(function* () {
    const cached = decodedRows.get(env)
    if (cached) return cached
    if (env.source._tag !== "Rows") return []
    const source = env.source
    const raw = yield* Effect.try({
      try: () => source.load(),
      catch: (e) => new EnvError({ env: env.name, reason: "InvalidRow", message: (e as Error).message }),
    })
    const decode = Schema.decodeUnknownEffect(env.problem)
    const out: Array<unknown> = []
    for (let i = 0; i < raw.length; i++) {
      const row = yield* decode(raw[i]).pipe(
        Effect.mapError((e) =>
          new EnvError({
            env: env.name,
            reason: "InvalidRow",
            message: `${source.locate?.(i) ?? `${source.origin}[${i}]`}: ${formatIssue(e.issue, "", { value: raw[i] })}`,
          })
        ),
      )
      out.push(row)
    }
    if (out.length === 0) return yield* new EnvError({ env: env.name, reason: "InvalidRow", message: `${source.origin} has no rows` })
    decodedRows.set(env, out)
    return out
  })

/**
 * Problem `index` of `seed` in `split`. Seeded envs draw until the problem falls in the
 * split; row envs walk a seeded permutation of the split's rows (a new one per epoch).
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
  const pool = yield* splitRows(env, split)
  const epoch = Math.floor(index / pool.length)
  const rows = shuffledRows(env, split, seed, epoch, pool)
  // index % length is below the length (splitRows refuses an empty split)
  return { key, env: env.name, problem: rows[index % rows.length]! as P } satisfies Task<P>
})

/** The decoded rows of a split (all rows when nothing is held out). */
export const splitRows = (env: Env<any, any>, split: Split) =>
  Effect.gen(function* () {
    const all = yield* loadRows(env)
    const pool = heldOutFraction(env) === 0 ? all : all.filter((p) => splitOf(env, p) === split)
    if (pool.length === 0) {
      return yield* new EnvError({ env: env.name, reason: "ProblemSpaceTooSmall", message: `the ${split} split has no rows; change eval.heldOut` })
    }
    return pool
  })

/** A split's rows in their seeded order of one epoch (a Fisher-Yates shuffle of a copy). */
export const shuffledRows = <A>(env: Env<any, any>, split: Split, seed: number, epoch: number, rows: ReadonlyArray<A>): Array<A> => {
  const rng = random(`${env.name}/${split}/${seed}/epoch${epoch}`)
  const order = [...rows]
  for (let i = order.length - 1; i > 0; i--) {
    // j <= i < order.length
    const j = Math.floor(rng.next() * (i + 1))
    ;[order[i], order[j]] = [order[j]!, order[i]!]
  }
  return order
}

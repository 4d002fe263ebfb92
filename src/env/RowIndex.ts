/**
 * The index behind every draw from a row source: one pass over the rows decodes each
 * once and files its number under its split (a hash of the decoded row, as `splitOf`
 * says); each epoch's seeded order of a split is computed once and kept; a drawn row is
 * read by its number and decoded, with the last rows kept in a bounded cache. A draw is
 * then O(1) and memory holds row numbers, not rows. Separate from `Tasks.ts` (which
 * problem a key names) because this is how rows are found, not which.
 *
 * @since 0.1.0
 */
import { Deferred, Effect, Result, Schema, Stream } from "effect"
import { formatIssue } from "../util/Decode.ts"
import { random } from "../util/Random.ts"
import { type Env, EnvError } from "./Definition.ts"
import { heldOutFraction, type Split, splitOf } from "./Split.ts"
import { type RowTable, SourceError } from "./sources/RowTable.ts"

/** decoded rows kept per env (the rest are read again when drawn) */
const DECODED_ROWS = 4096
/** epoch orders kept per env (each is 4 bytes a row of its split) */
const ORDERS = 8

/** Row numbers, growable. */
class RowNumbers {
  data = new Int32Array(1024)
  length = 0
  push(value: number) {
    if (this.length === this.data.length) {
      const next = new Int32Array(this.data.length * 2)
      next.set(this.data)
      this.data = next
    }
    this.data[this.length++] = value
  }
  done(): Int32Array {
    return this.data.subarray(0, this.length)
  }
}

/** @since 0.1.0 @category models */
export interface RowIndex<P> {
  /** how many rows the source has */
  readonly size: number
  /** the row numbers of a split, in file order (every row when nothing is held out) */
  readonly split: (split: Split) => Int32Array
  /** the decoded row `index` */
  readonly row: (index: number) => Effect.Effect<P, EnvError>
  /** a split's positions in the seeded order of one epoch, computed once */
  readonly order: (split: Split, seed: number, epoch: number) => Int32Array
}

const toEnvError = (env: Env<any, any>) => (e: SourceError) =>
  new EnvError({ env: env.name, reason: e.reason === "InvalidRow" ? "InvalidRow" : e.reason === "NotFound" ? "NotFound" : "SourceUnavailable", message: e.message })

/** The table of a row source: `Env.rows` and hand-written `Rows` sources are read into memory. */
const tableOf = (env: Env<any, any>): Effect.Effect<RowTable, EnvError> => {
  const source = env.source
  if (source._tag === "Table") return Effect.mapError(source.open, toEnvError(env))
  if (source._tag === "Seeded") return Effect.die(new TypeError(`${env.name}: a seeded env has no rows`))
  let items: ReadonlyArray<unknown> = []
  const fail = (message: string) => new SourceError({ origin: source.origin, reason: "InvalidRow", message })
  return Effect.succeed({
    scan: Stream.fromEffect(Effect.try({ try: () => (items = source.load()), catch: (e) => fail((e as Error).message) })),
    read: (index) => Effect.succeed(items[index]),
    locate: (index) => source.locate?.(index) ?? `${source.origin}[${index}]`,
  })
}

/** A seeded order of positions 0..n-1: the Fisher-Yates shuffle the draws have always used. */
const shuffle = (key: string, n: number): Int32Array => {
  const rng = random(key)
  const order = new Int32Array(n)
  for (let i = 0; i < n; i++) order[i] = i
  for (let i = n - 1; i > 0; i--) {
    // j <= i < n
    const j = Math.floor(rng.next() * (i + 1))
    const t = order[i]!
    order[i] = order[j]!
    order[j] = t
  }
  return order
}

/** A Map used as a cache that forgets its least recently used entry past `capacity`. */
const remember = <K, V>(cache: Map<K, V>, key: K, value: V, capacity: number) => {
  cache.set(key, value)
  if (cache.size > capacity) cache.delete(cache.keys().next().value!)
  return value
}
const recall = <K, V>(cache: Map<K, V>, key: K): V | undefined => {
  const value = cache.get(key)
  if (value !== undefined) {
    cache.delete(key)
    cache.set(key, value)
  }
  return value
}

/** One pass: decode every row, file its number under its split. */
const build = <P>(env: Env<P, any>) =>
  Effect.gen(function*() {
    const table = yield* tableOf(env)
    const decode = Schema.decodeUnknownResult(env.problem)
    const heldOut = heldOutFraction(env) > 0
    const train = new RowNumbers()
    const evals = new RowNumbers()
    let size = 0
    yield* table.scan.pipe(
      Stream.mapError(toEnvError(env)),
      Stream.runForEach((rows) =>
        Effect.suspend(() => {
          for (const raw of rows) {
            const decoded = decode(raw)
            if (Result.isFailure(decoded)) {
              return Effect.fail(new EnvError({ env: env.name, reason: "InvalidRow", message: `${table.locate(size)}: ${formatIssue(decoded.failure.issue, "", { value: raw })}` }))
            }
            if (heldOut && splitOf(env, decoded.success) === "eval") evals.push(size)
            else train.push(size)
            size++
          }
          return Effect.void
        })
      ),
    )
    if (size === 0) return yield* new EnvError({ env: env.name, reason: "InvalidRow", message: `${env.source._tag === "Seeded" ? env.name : env.source.origin} has no rows` })
    const splits = { train: train.done(), eval: evals.done() }
    const all = heldOut ? undefined : splits.train
    const decoded = new Map<number, P>()
    const orders = new Map<string, Int32Array>()
    const index: RowIndex<P> = {
      size,
      split: (split) => all ?? splits[split],
      row: (n) => {
        const hit = recall(decoded, n)
        if (hit !== undefined) return Effect.succeed(hit)
        return table.read(n).pipe(
          Effect.mapError(toEnvError(env)),
          Effect.flatMap((raw) => {
            const r = decode(raw)
            return Result.isSuccess(r)
              ? Effect.succeed(remember(decoded, n, r.success, DECODED_ROWS))
              : Effect.fail(new EnvError({ env: env.name, reason: "InvalidRow", message: `${table.locate(n)}: ${formatIssue(r.failure.issue, "", { value: raw })}` }))
          }),
        )
      },
      order: (split, seed, epoch) => {
        const key = `${env.name}/${split}/${seed}/epoch${epoch}`
        return recall(orders, key) ?? remember(orders, key, shuffle(key, index.split(split).length), ORDERS)
      },
    }
    return index
  })

const indexes = new WeakMap<Env<any, any>, Deferred.Deferred<RowIndex<any>, EnvError>>()

/**
 * The row index of an env, built on first use and shared by every draw after it (draws
 * made while it is being built wait for the same pass). A failed pass is not kept: the
 * next draw tries again (a download may succeed then).
 * @since 0.1.0 @category accessors
 */
export const rowIndex = <P>(env: Env<P, any>): Effect.Effect<RowIndex<P>, EnvError> =>
  Effect.suspend(() => {
    const known = indexes.get(env)
    if (known !== undefined) return Deferred.await(known as Deferred.Deferred<RowIndex<P>, EnvError>)
    // registered before anything yields, so concurrent draws find it and wait
    const pending = Deferred.makeUnsafe<RowIndex<P>, EnvError>()
    indexes.set(env, pending)
    return build(env).pipe(
      Effect.onExit((exit) => {
        if (exit._tag === "Failure") indexes.delete(env)
        return Deferred.done(pending, exit)
      }),
    )
  })

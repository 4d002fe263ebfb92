/**
 * The index behind every draw from a row source: one pass over the rows decodes each
 * once and files its number under its split (a hash of the decoded row, as `splitOf`
 * says), and a big file's index is kept on disk for the next run (`IndexCache.ts`);
 * each epoch's seeded order of a split is computed once and kept; a drawn row is read by
 * its number and decoded, with the last rows kept in a bounded cache. A draw is then
 * O(1) and memory holds row numbers, not rows. Separate from `Tasks.ts` (which problem a
 * key names) because this is how rows are found, not which.
 *
 * @since 0.1.0
 */
import { Deferred, Effect, Result, Schema, Stream } from "effect"
import { formatIssue } from "../util/Decode.ts"
import { random } from "../util/Random.ts"
import { type Env, EnvError } from "./Definition.ts"
import * as IndexCache from "./IndexCache.ts"
import { jsonHash } from "./JsonHash.ts"
import { heldOutFraction, type Split, splitOfHash } from "./Split.ts"
import { type RowTable, SourceError } from "./sources/RowTable.ts"

/** decoded rows kept per env (the rest are read again when drawn) */
const DECODED_ROWS = 4096
/** epoch orders kept per env (each is 4 bytes a row of its split) */
const ORDERS = 8

/** Row numbers (or row hashes), growable. */
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

/** Reads row `n` and decodes it, failing with the row's place. */
const reader = <P>(env: Env<P, any>, table: RowTable) => {
  const decode = Schema.decodeUnknownResult(env.problem)
  return (n: number): Effect.Effect<P, EnvError> =>
    table.read(n).pipe(
      Effect.mapError(toEnvError(env)),
      Effect.flatMap((raw) => {
        const r = decode(raw)
        return Result.isSuccess(r)
          ? Effect.succeed(r.success)
          : Effect.fail(new EnvError({ env: env.name, reason: "InvalidRow", message: `${table.locate(n)}: ${formatIssue(r.failure.issue, "", { value: raw })}` }))
      }),
    )
}

/** One pass: decode every row (so a bad one fails here), keep its split hash where rows are held out. */
const scan = <P>(env: Env<P, any>, table: RowTable, heldOut: boolean) =>
  Effect.gen(function*() {
    const decode = Schema.decodeUnknownResult(env.problem)
    const prefix = `${env.name}:`
    const hashes = new RowNumbers()
    let rows = 0
    yield* table.scan.pipe(
      Stream.mapError(toEnvError(env)),
      Stream.runForEach((chunk) =>
        Effect.suspend(() => {
          for (const raw of chunk) {
            const decoded = decode(raw)
            if (Result.isFailure(decoded)) {
              return Effect.fail(new EnvError({ env: env.name, reason: "InvalidRow", message: `${table.locate(rows)}: ${formatIssue(decoded.failure.issue, "", { value: raw })}` }))
            }
            if (heldOut) hashes.push(jsonHash(prefix, decoded.success))
            rows++
          }
          return Effect.void
        })
      ),
    )
    return { rows, hashes: hashes.done() }
  })

/** rows a kept index is checked on before it is used */
const CHECKED_ROWS = 16

/**
 * A kept index, if it fits the table and agrees with rows decoded now (spread over the
 * file): a file rewritten in place or a Schema that decodes differently is scanned again.
 */
const restore = <P>(env: Env<P, any>, table: RowTable, slot: IndexCache.Slot, kept: IndexCache.Kept, heldOut: boolean) =>
  Effect.gen(function*() {
    if (kept.rows === 0 || (heldOut && kept.hashes.length !== kept.rows)) return false
    if (!(yield* Effect.orElseSucceed(Effect.try(() => table.persist?.restore(kept.parts, slot.beside) === true), () => false))) return false
    const read = reader(env, table)
    for (let k = 0; k < CHECKED_ROWS; k++) {
      const n = Math.floor((k * (kept.rows - 1)) / (CHECKED_ROWS - 1))
      const row = yield* Effect.result(read(n))
      if (Result.isFailure(row) || (heldOut && jsonHash(`${env.name}:`, row.success) !== kept.hashes[n]! >>> 0)) return false
    }
    return true
  })

/** Every row's split hash: from the kept index where it is still good, else from a scan (then kept). */
const hashesOf = <P>(env: Env<P, any>, table: RowTable, heldOut: boolean) =>
  Effect.gen(function*() {
    const slot = yield* IndexCache.slotOf(env, table)
    if (slot === undefined) return yield* scan(env, table, heldOut)
    const kept = yield* IndexCache.read(slot)
    if (kept !== undefined && (yield* restore(env, table, slot, kept, heldOut))) {
      yield* Effect.logDebug(`${env.name}: the row index of ${kept.rows} rows was read from ${slot.file}`)
      return { rows: kept.rows, hashes: kept.hashes }
    }
    const scanned = yield* scan(env, table, heldOut)
    // kept only if the data did not change while it was scanned
    const after = yield* IndexCache.slotOf(env, table)
    if (scanned.rows > 0 && after?.key === slot.key) yield* IndexCache.write(slot, scanned, (beside) => table.persist?.save(beside) ?? [])
    return scanned
  })

/** The row numbers of each split (every row in train where nothing is held out). */
const splitsOf = (env: Env<any, any>, rows: number, hashes: Int32Array) => {
  const fraction = heldOutFraction(env)
  const train = new RowNumbers()
  const evals = new RowNumbers()
  for (let n = 0; n < rows; n++) {
    if (fraction > 0 && splitOfHash(fraction, hashes[n]! >>> 0) === "eval") evals.push(n)
    else train.push(n)
  }
  return { train: train.done(), eval: evals.done() }
}

const build = <P>(env: Env<P, any>) =>
  Effect.gen(function*() {
    const table = yield* tableOf(env)
    const heldOut = heldOutFraction(env) > 0
    const { rows: size, hashes } = yield* hashesOf(env, table, heldOut)
    if (size === 0) return yield* new EnvError({ env: env.name, reason: "InvalidRow", message: `${env.source._tag === "Seeded" ? env.name : env.source.origin} has no rows` })
    const splits = splitsOf(env, size, hashes)
    const all = heldOut ? undefined : splits.train
    const read = reader(env, table)
    const decoded = new Map<number, P>()
    const orders = new Map<string, Int32Array>()
    const index: RowIndex<P> = {
      size,
      split: (split) => all ?? splits[split],
      row: (n) => {
        const hit = recall(decoded, n)
        return hit !== undefined ? Effect.succeed(hit) : Effect.map(read(n), (row) => remember(decoded, n, row, DECODED_ROWS))
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

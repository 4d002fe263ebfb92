/**
 * The file sources (JSONL, CSV, Parquet) read what they are given, draw exactly what
 * `Env.rows` draws from the same rows, and say which file and row is wrong; and the row
 * index behind the draws scans a source once, reads rows by number and keeps few of them.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { afterAll, assert, describe, it } from "@effect/vitest"
import { ConfigProvider, Effect, Schema, Stream } from "effect"
import { Env, Reward } from "gyre"
import { writeParquet } from "./ParquetWriter.ts"

const Problem = Schema.Struct({ question: Schema.String, answer: Schema.Number, note: Schema.NullOr(Schema.String) })
type Problem = typeof Problem.Type
const exact = Reward.make<Problem>("exact", (r) => (r.completion.trim() === String(r.problem.answer) ? 1 : 0))
const envOf = (source: Env.Source<Problem>, options: { readonly name?: string; readonly heldOut?: number } = {}) =>
  Env.make({ name: options.name ?? "sources", problem: Problem, source, prompt: (p) => p.question, reward: exact, eval: { heldOut: options.heldOut ?? 0.25 } })

const rows: Array<Problem> = Array.from({ length: 120 }, (_, i) => ({ question: `q${i}, "quoted", with\nlines`, answer: i * 1_000_003, note: i % 3 === 0 ? null : `n${i}` }))

const tmp = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-sources-"))
afterAll(() => Fs.rmSync(tmp, { recursive: true, force: true }))
const file = (name: string, data: string | Buffer) => {
  const path = Path.join(tmp, name)
  Fs.writeFileSync(path, data)
  return path
}
const csvField = (v: unknown) => `"${String(v).replaceAll('"', '""')}"`

/** The first n problems of a split for a seed, and the eval set. */
const drawsOf = (env: Env.AnyEnv, n = 60) =>
  Effect.gen(function*() {
    const train = yield* Effect.forEach(Array.from({ length: n }, (_, index) => index), (index) => Env.problemAt(env, { seed: 3, index, split: "train" }))
    const evals = yield* Effect.forEach(Array.from({ length: n }, (_, index) => index), (index) => Env.problemAt(env, { seed: 3, index, split: "eval" }))
    const evalSet = yield* Env.evalSet(env, { seed: 3, size: 10 })
    return { train: train.map((t) => t.problem), evals: evals.map((t) => t.problem), evalSet: evalSet.map((t) => t.problem) }
  })

describe("file sources draw what Env.rows draws from the same rows", () => {
  const CsvProblem = Schema.Struct({ question: Schema.String, answer: Schema.NumberFromString, note: Schema.String })
  const csvRows = rows.map((r) => ({ ...r, note: r.note ?? "" }))

  it.effect("parquet, in several row groups, with each codec", () =>
    Effect.gen(function*() {
      const expected = yield* drawsOf(envOf(Env.rows(rows)))
      for (const codec of ["UNCOMPRESSED", "SNAPPY", "GZIP"] as const) {
        const data = writeParquet(
          [{ name: "question", type: "string" }, { name: "answer", type: "int64" }, { name: "note", type: "string", optional: true }],
          rows,
          { rowGroupSize: 25, codec },
        )
        const env = envOf(Env.parquet(file(`rows-${codec}.parquet`, data)))
        assert.deepStrictEqual(yield* drawsOf(env), expected, codec)
      }
    }))

  it.effect("jsonl, read in chunks whose lines cross chunk ends", () =>
    Effect.gen(function*() {
      // rows of about 40 KB: a 1 MB read ends inside one of them
      const big = rows.map((r, i) => ({ ...r, question: `${r.question} ${"x".repeat(40_000 + i)}` }))
      const expected = yield* drawsOf(envOf(Env.rows(big)))
      const path = file("big.jsonl", big.map((r) => JSON.stringify(r)).join("\r\n"))
      assert.isAbove(Fs.statSync(path).size, 4 * 1024 * 1024)
      // a file this big has its index kept: in this test's folder, not the user's cache
      const drawn = yield* drawsOf(envOf(Env.jsonl(path))).pipe(Effect.provide(ConfigProvider.layer(ConfigProvider.fromUnknown({ GYRE_CACHE: Path.join(tmp, "cache") }))))
      assert.deepStrictEqual(drawn, expected)
    }))

  it.effect("csv, with quoted commas, quotes and line breaks, a header row or given columns, any delimiter", () =>
    Effect.gen(function*() {
      const csvEnv = (source: Env.Source<typeof CsvProblem.Type>) =>
        Env.make({ name: "sources", problem: CsvProblem, source, prompt: (p) => p.question, reward: Reward.make("one", () => 1), eval: { heldOut: 0.25 } })
      const expected = yield* drawsOf(csvEnv(Env.rows(csvRows.map((r) => ({ ...r, answer: String(r.answer) })))))
      const lines = csvRows.map((r) => [r.question, r.answer, r.note].map(csvField))
      const withHeader = file("rows.csv", ["question,answer,note", ...lines.map((l) => l.join(","))].join("\n") + "\n")
      assert.deepStrictEqual(yield* drawsOf(csvEnv(Env.csv(withHeader))), expected)
      const semicolons = file("rows-semi.csv", lines.map((l) => l.join(";")).join("\n"))
      assert.deepStrictEqual(yield* drawsOf(csvEnv(Env.csv(semicolons, { delimiter: ";", columns: ["question", "answer", "note"] }))), expected)
    }))
})

describe("errors name the file and the row", () => {
  it.effect("a csv record that does not decode: the file and its line", () =>
    Effect.gen(function*() {
      const Typed = Schema.Struct({ question: Schema.String, answer: Schema.FiniteFromString })
      const path = file("bad.csv", 'question,answer\n"two\nlines",2\nthree,x\n')
      const env = Env.make({ name: "badcsv", problem: Typed, source: Env.csv<typeof Typed.Type>(path), prompt: (p) => p.question, reward: Reward.make("one", () => 1) })
      const error = yield* Effect.flip(Env.problemAt(env, { seed: 0, index: 0, split: "train" }))
      assert.strictEqual(error.reason, "InvalidRow")
      assert.include(error.message, `${path}:4: answer`)
    }))

  it.effect("a parquet row that does not decode: the file and the row number", () =>
    Effect.gen(function*() {
      const path = file("bad.parquet", writeParquet([{ name: "question", type: "string" }, { name: "answer", type: "double" }], [{ question: "a", answer: 1 }, { question: "b", answer: 2.5 }]))
      const Typed = Schema.Struct({ question: Schema.String, answer: Schema.Int })
      const env = Env.make({ name: "badpq", problem: Typed, source: Env.parquet<typeof Typed.Type>(path), prompt: (p) => p.question, reward: Reward.make("one", () => 1) })
      const error = yield* Effect.flip(Env.problemAt(env, { seed: 0, index: 0, split: "train" }))
      assert.include(error.message, `${path} row 1: answer`)
    }))

  it.effect("a missing file: NotFound, naming the path and the constructor", () =>
    Effect.gen(function*() {
      for (const [source, name] of [[Env.jsonl(Path.join(tmp, "none.jsonl")), "Env.jsonl"], [Env.csv(Path.join(tmp, "none.csv")), "Env.csv"], [Env.parquet(Path.join(tmp, "none.parquet")), "Env.parquet"]] as const) {
        const error = yield* Effect.flip(Env.problemAt(envOf(source as Env.Source<Problem>), { seed: 0, index: 0, split: "train" }))
        assert.strictEqual(error.reason, "NotFound")
        assert.include(error.message, "none.")
        assert.include(error.message, name)
      }
    }))

  it.effect("a file that is not parquet: what it is and where", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(Env.problemAt(envOf(Env.parquet(file("not.parquet", "hello"))), { seed: 0, index: 0, split: "train" }))
      assert.strictEqual(error.reason, "SourceUnavailable")
      assert.match(error.message, /not\.parquet: not a readable Parquet file/)
    }))
})

describe("the row index", () => {
  /** a table source that counts its scans and reads (a `Table` source as a user could write one) */
  const counted = (items: ReadonlyArray<unknown>, options: { readonly failFirstOpen?: boolean } = {}) => {
    const counts = { opens: 0, scans: 0, reads: 0 }
    const table: Env.RowTable = {
      scan: Stream.fromEffect(Effect.sync(() => {
        counts.scans++
        return items
      })),
      read: (index) => Effect.sync(() => {
        counts.reads++
        return items[index]
      }),
      locate: (index) => `counted[${index}]`,
    }
    const source: Env.Source<Problem> = {
      _tag: "Table",
      origin: "counted",
      open: Effect.suspend(() => {
        counts.opens++
        return options.failFirstOpen === true && counts.opens === 1
          ? Effect.fail(new Env.SourceError({ origin: "counted", reason: "Download", message: "counted: the network is down" }))
          : Effect.succeed(table)
      }),
    }
    return { source, counts }
  }

  it.effect("scans a source once for any number of draws, also when the first draws run at once", () =>
    Effect.gen(function*() {
      const { source, counts } = counted(rows)
      const env = envOf(source)
      yield* Effect.forEach(Array.from({ length: 400 }, (_, index) => index), (index) => Env.problemAt(env, { seed: 1, index, split: index % 2 === 0 ? "train" : "eval" }), { concurrency: "unbounded" })
      yield* Env.evalSet(env, { seed: 2 })
      assert.strictEqual(counts.scans, 1)
      assert.strictEqual(counts.opens, 1)
    }))

  it.effect("reads a drawn row once while it is among the recently drawn", () =>
    Effect.gen(function*() {
      const { source, counts } = counted(rows)
      const env = envOf(source, { heldOut: 0 })
      // two epochs of 120 rows: each row read once, the second epoch from the cache
      yield* Effect.forEach(Array.from({ length: 240 }, (_, index) => index), (index) => Env.problemAt(env, { seed: 1, index, split: "train" }))
      assert.strictEqual(counts.reads, 120)
    }))

  it.effect("keeps a bounded number of decoded rows: a big source is read again, not held", () =>
    Effect.gen(function*() {
      const many = Array.from({ length: 10_000 }, (_, i) => ({ question: `q${i}`, answer: i, note: null }))
      const { source, counts } = counted(many)
      const env = envOf(source, { heldOut: 0 })
      const draw = (index: number) => Env.problemAt(env, { seed: 1, index, split: "train" })
      yield* Effect.forEach(Array.from({ length: 10_000 }, (_, index) => index), draw)
      const firstPass = counts.reads
      yield* Effect.forEach(Array.from({ length: 10_000 }, (_, index) => index), draw)
      assert.strictEqual(firstPass, 10_000)
      // the rows drawn first were forgotten: the second epoch read (almost) every row again
      assert.isAbove(counts.reads - firstPass, 5_000)
    }))

  it.effect("a failed pass is not kept: the next draw opens the source again", () =>
    Effect.gen(function*() {
      const { source, counts } = counted(rows, { failFirstOpen: true })
      const env = envOf(source)
      const error = yield* Effect.flip(Env.problemAt(env, { seed: 0, index: 0, split: "train" }))
      assert.strictEqual(error.reason, "SourceUnavailable")
      assert.include(error.message, "the network is down")
      const task = yield* Env.problemAt(env, { seed: 0, index: 0, split: "train" })
      assert.deepStrictEqual(task, yield* Env.problemAt(envOf(Env.rows(rows)), { seed: 0, index: 0, split: "train" }))
      assert.strictEqual(counts.opens, 2)
    }))
})

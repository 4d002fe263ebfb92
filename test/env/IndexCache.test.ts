/**
 * A big file's row index is kept in gyre's cache folder: the next env over the same file
 * draws the same problems from it without a scan (a Parquet or CSV file's spool of rows is
 * kept beside it); a file rewritten in place (same size and time), a damaged index, a
 * missing spool or another Schema is scanned again; small files keep nothing; an index
 * kept with nothing held out serves that, and held-out splits after one more pass; the
 * folder keeps a bounded number of indexes and clears what stopped writes left.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { afterAll, assert, describe, it } from "@effect/vitest"
import { ConfigProvider, Effect, Layer, Logger, References, Schema } from "effect"
import { Env, Reward } from "gyre"
import * as IndexCache from "../../src/env/IndexCache.ts"
import { writeParquet } from "./ParquetWriter.ts"

const Problem = Schema.Struct({ question: Schema.String, answer: Schema.Int })
type Problem = typeof Problem.Type
const pad = "x".repeat(480)
/** 10,000 rows of the same length (about 5 MB): big enough to be kept */
const items = Array.from({ length: 10_000 }, (_, i) => ({ question: `q${String(i).padStart(5, "0")} ${pad}`, answer: i, extra: i % 7 }))

const tmp = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-kept-index-"))
afterAll(() => Fs.rmSync(tmp, { recursive: true, force: true }))
const cache = Path.join(tmp, "cache")
const folderFiles = () => (Fs.existsSync(Path.join(cache, "index")) ? Fs.readdirSync(Path.join(cache, "index")).map((f) => Path.join(cache, "index", f)) : [])
const kept = () => folderFiles().filter((f) => f.endsWith(".bin"))
/** the index last written or read */
const newest = () => kept().reduce((a, b) => (Fs.statSync(a).mtimeMs >= Fs.statSync(b).mtimeMs ? a : b))

/** writes rows as JSONL with a fixed modification time, so a rewrite can keep the same identity */
const writeRows = (path: string, rows: ReadonlyArray<unknown>) => {
  Fs.writeFileSync(path, rows.map((r) => JSON.stringify(r)).join("\n") + "\n")
  Fs.utimesSync(path, 1_700_000_000, 1_700_000_000)
  return path
}

const envOf = (source: Env.Source<Problem>, problem: Schema.Codec<Problem, any> = Problem, heldOut = 0.2) =>
  Env.make({ name: "kept", problem, source, prompt: (p) => p.question, reward: Reward.make("one", () => 1), eval: { heldOut } })

/** the first train and eval problems of a seed, and whether the index was read from the cache */
const draws = (env: Env.AnyEnv) => {
  const logs: Array<string> = []
  const logger = Logger.make(({ message }) => void logs.push(Array.isArray(message) ? message.join(" ") : String(message)))
  return Effect.gen(function*() {
    const one = (split: Env.Split) => Effect.forEach([0, 1, 2, 500, 7_999], (index) => Env.problemAt(env, { seed: 5, index, split }).pipe(Effect.map((t) => t.problem)))
    return { train: yield* one("train"), eval: yield* one("eval") }
  }).pipe(
    Effect.provide(Layer.mergeAll(
      ConfigProvider.layer(ConfigProvider.fromUnknown({ GYRE_CACHE: cache })),
      Logger.layer([logger]),
      Layer.succeed(References.MinimumLogLevel, "All"),
    )),
    Effect.map((drawn) => ({ drawn, fromCache: logs.some((l) => l.includes("was read from")) })),
  )
}

describe("the kept row index", () => {
  it.effect("a new env over the same file draws the same problems from the kept index; a file rewritten in place is scanned again", () =>
    Effect.gen(function*() {
      const path = writeRows(Path.join(tmp, "rows.jsonl"), items)
      const expected = (yield* draws(envOf(Env.rows(items)))).drawn
      const first = yield* draws(envOf(Env.jsonl(path)))
      assert.deepStrictEqual(first, { drawn: expected, fromCache: false })
      assert.strictEqual(kept().length, 1)
      assert.deepStrictEqual(yield* draws(envOf(Env.jsonl(path))), { drawn: expected, fromCache: true })

      // the same size, time and inode, other rows: the rows checked against the index differ
      const reversed = [...items].reverse()
      writeRows(path, reversed)
      const rewritten = yield* draws(envOf(Env.jsonl(path)))
      assert.deepStrictEqual(rewritten, { drawn: (yield* draws(envOf(Env.rows(reversed)))).drawn, fromCache: false })
      // the same key: the index was replaced, not added beside
      assert.strictEqual(kept().length, 1)
      assert.isTrue((yield* draws(envOf(Env.jsonl(path)))).fromCache)
    }))

  it.effect("a damaged index is scanned past and written again; another Schema keeps its own", () =>
    Effect.gen(function*() {
      const path = writeRows(Path.join(tmp, "damaged.jsonl"), items)
      const { drawn } = yield* draws(envOf(Env.jsonl(path)))
      const before = kept().length
      const file = newest()
      const size = Fs.statSync(file).size
      Fs.truncateSync(file, size - 100)
      assert.deepStrictEqual(yield* draws(envOf(Env.jsonl(path))), { drawn, fromCache: false })
      assert.strictEqual(Fs.statSync(file).size, size)

      const Other = Schema.Struct({ question: Schema.String, answer: Schema.Number })
      assert.isFalse((yield* draws(envOf(Env.jsonl(path), Other))).fromCache)
      assert.strictEqual(kept().length, before + 1)
      assert.isTrue((yield* draws(envOf(Env.jsonl(path), Other))).fromCache)
    }))

  it.effect("an index kept with nothing held out is used as such, and is kept again with hashes once rows are held out", () =>
    Effect.gen(function*() {
      const path = writeRows(Path.join(tmp, "all.jsonl"), items)
      const all = (yield* draws(envOf(Env.rows(items), Problem, 0))).drawn
      assert.deepStrictEqual(yield* draws(envOf(Env.jsonl(path), Problem, 0)), { drawn: all, fromCache: false })
      assert.deepStrictEqual(yield* draws(envOf(Env.jsonl(path), Problem, 0)), { drawn: all, fromCache: true })
      // no split hashes were kept: held-out splits need a pass, whose index then serves both
      const split = (yield* draws(envOf(Env.rows(items)))).drawn
      assert.deepStrictEqual(yield* draws(envOf(Env.jsonl(path))), { drawn: split, fromCache: false })
      assert.deepStrictEqual(yield* draws(envOf(Env.jsonl(path), Problem, 0)), { drawn: all, fromCache: true })
      assert.deepStrictEqual(yield* draws(envOf(Env.jsonl(path), Problem, 0.5)), { drawn: (yield* draws(envOf(Env.rows(items), Problem, 0.5))).drawn, fromCache: true })
    }))

  it.effect("a big Parquet or CSV file keeps its spool of rows beside the index; without it the file is read again", () =>
    Effect.gen(function*() {
      const expected = (yield* draws(envOf(Env.rows(items)))).drawn
      const parquet = Path.join(tmp, "rows.parquet")
      Fs.writeFileSync(parquet, writeParquet([{ name: "question", type: "string" }, { name: "answer", type: "int64" }], items, { rowGroupSize: 1000, codec: "UNCOMPRESSED" }))
      const csv = Path.join(tmp, "rows.csv")
      Fs.writeFileSync(csv, ["question,answer", ...items.map((r) => `${r.question},${r.answer}`)].join("\n") + "\n")
      const CsvProblem = Schema.Struct({ question: Schema.String, answer: Schema.NumberFromString })
      for (const make of [() => envOf(Env.parquet(parquet)), () => envOf(Env.csv(csv), CsvProblem)]) {
        const spools = () => folderFiles().filter((f) => f.endsWith(".rows"))
        const before = new Set(spools())
        assert.deepStrictEqual(yield* draws(make()), { drawn: expected, fromCache: false })
        const mine = spools().filter((f) => !before.has(f))
        assert.strictEqual(mine.length, 1)
        assert.deepStrictEqual(yield* draws(make()), { drawn: expected, fromCache: true })
        Fs.rmSync(mine[0]!)
        assert.deepStrictEqual(yield* draws(make()), { drawn: expected, fromCache: false })
        assert.deepStrictEqual(yield* draws(make()), { drawn: expected, fromCache: true })
      }
    }))

  it.effect("a small file keeps nothing: it is scanned each time", () =>
    Effect.gen(function*() {
      const count = kept().length
      const path = writeRows(Path.join(tmp, "small.jsonl"), items.slice(0, 100))
      yield* draws(envOf(Env.jsonl(path)))
      assert.isFalse((yield* draws(envOf(Env.jsonl(path)))).fromCache)
      assert.strictEqual(kept().length, count)
    }))

  it.effect("the folder keeps the 32 most recently used indexes, and removes what a stopped write left", () =>
    Effect.gen(function*() {
      const folder = Path.join(tmp, "evict", "index")
      for (let i = 0; i < 40; i++) {
        yield* IndexCache.write({ file: Path.join(folder, `${i}.bin`), beside: Path.join(folder, `${i}.rows`), key: `k${i}` }, { rows: 1, hashes: new Int32Array([i]) }, (beside) => {
          Fs.writeFileSync(beside, "a table's own file")
          return []
        })
        Fs.utimesSync(Path.join(folder, `${i}.bin`), 1_700_000_000 + i, 1_700_000_000 + i)
      }
      const left = (ext: string) => Fs.readdirSync(folder).filter((f) => f.endsWith(ext)).map((f) => Number(f.replace(ext, ""))).sort((a, b) => a - b)
      // each write past 32 put out the oldest (the new one is the newest until its time is set back), with its table's file
      assert.deepStrictEqual(left(".bin"), Array.from({ length: 32 }, (_, i) => i + 8))
      assert.deepStrictEqual(left(".rows"), left(".bin"))
      const back = yield* IndexCache.read({ file: Path.join(folder, "39.bin"), beside: Path.join(folder, "39.rows"), key: "k39" })
      assert.deepStrictEqual(back && [back.rows, [...back.hashes]], [1, [39]])
      assert.isUndefined(yield* IndexCache.read({ file: Path.join(folder, "39.bin"), beside: Path.join(folder, "39.rows"), key: "another key" }))
      // what a write that stopped left: a day old is removed, a fresh one may be another process's
      Fs.writeFileSync(Path.join(folder, "old.bin.1.part"), "")
      Fs.utimesSync(Path.join(folder, "old.bin.1.part"), 1_700_000_000, 1_700_000_000)
      Fs.writeFileSync(Path.join(folder, "new.bin.1.part"), "")
      yield* IndexCache.write({ file: Path.join(folder, "40.bin"), beside: Path.join(folder, "40.rows"), key: "k40" }, { rows: 1, hashes: new Int32Array([40]) }, () => [])
      assert.deepStrictEqual(Fs.readdirSync(folder).filter((f) => f.endsWith(".part")), ["new.bin.1.part"])
    }))
})

/**
 * `Env.huggingface` against a fake of the Hub's dataset routes on loopback (test/env/FakeHub.ts):
 * it lists a split's Parquet files, downloads them once into the cache with progress
 * lines, draws what `Env.rows` draws from the same rows, reads only the cache offline
 * (else the env's fixture), sends HF_TOKEN to a gated dataset without ever logging it,
 * reads a pinned revision through the tree route, and says what to do when a repo,
 * config or split is missing.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { ConfigProvider, Effect, Layer, Logger, References, Schema } from "effect"
import { Env, Reward } from "gyre"
import { type FakeDataset, type FakeHub, startFakeHub } from "./FakeHub.ts"
import { writeParquet } from "./ParquetWriter.ts"

const Problem = Schema.Struct({ question: Schema.String, answer: Schema.Number })
type Problem = typeof Problem.Type
const rowsOf = (from: number, n: number): Array<Problem> => Array.from({ length: n }, (_, i) => ({ question: `q${from + i}`, answer: (from + i) * 7 }))
const parquetOf = (rows: ReadonlyArray<Problem>) =>
  writeParquet([{ name: "question", type: "string" }, { name: "answer", type: "int64" }], rows, { rowGroupSize: 20, codec: "SNAPPY" })

const shards = [rowsOf(0, 50), rowsOf(50, 40)]
const all = shards.flat()
const TOKEN = "hf_secret_token_123"
let hub: FakeHub
let datasets: Record<string, FakeDataset>
const tmp = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-hub-"))
beforeAll(async () => {
  const converted = { "main/train/0000.parquet": parquetOf(shards[0]!), "main/train/0001.parquet": parquetOf(shards[1]!), "main/test/0000.parquet": parquetOf(rowsOf(500, 10)) }
  hub = await startFakeHub(datasets = {
    "openai/gsm8k": { files: { "refs/convert/parquet": converted, "abc123": { "main/train/0000.parquet": parquetOf(rowsOf(900, 12)) } } },
    "someone/gated": { token: TOKEN, files: { "refs/convert/parquet": { "default/train/0000.parquet": parquetOf(rowsOf(0, 30)) } } },
  })
})
afterAll(async () => {
  await hub.close()
  Fs.rmSync(tmp, { recursive: true, force: true })
})

const envOf = (source: Env.Source<Problem>) =>
  Env.make({ name: "hub", problem: Problem, source, prompt: (p) => p.question, reward: Reward.make("one", () => 1), eval: { heldOut: 0.2 } })

/** runs with the Hub settings given (as environment variables would give them) and collects the log lines */
const withHub = <A, E>(settings: Record<string, string>, effect: Effect.Effect<A, E>) => {
  const logs: Array<string> = []
  const logger = Logger.make(({ message }) => void logs.push(Array.isArray(message) ? message.join(" ") : String(message)))
  return effect.pipe(
    Effect.provide(Layer.mergeAll(
      ConfigProvider.layer(ConfigProvider.fromUnknown({ HF_ENDPOINT: hub.endpoint, ...settings })),
      Logger.layer([logger]),
      Layer.succeed(References.MinimumLogLevel, "All"),
    )),
    Effect.map((a) => ({ a, logs })),
  )
}
const first = (env: Env.AnyEnv, n = 30) =>
  Effect.forEach(Array.from({ length: n }, (_, index) => index), (index) => Env.problemAt(env, { seed: 4, index, split: "train" }).pipe(Effect.map((t) => t.problem)))
const fileRequests = () => hub.requests.filter((r) => r.method === "GET" && r.path.includes("/resolve/")).length

describe("Env.huggingface", () => {
  const cache = Path.join(tmp, "cache")

  it.effect("downloads a split's Parquet shards once, with progress, and draws what Env.rows draws", () =>
    Effect.gen(function*() {
      const expected = yield* first(envOf(Env.rows(all)))
      const { a: drawn, logs } = yield* withHub({ GYRE_CACHE: cache }, first(envOf(Env.huggingface("openai/gsm8k", { config: "main" }))))
      assert.deepStrictEqual(drawn, expected)
      assert.strictEqual(fileRequests(), 2)
      assert.isTrue(logs.some((l) => /downloading openai\/gsm8k main\/train file 1 of 2/.test(l)), logs.join("\n"))
      assert.isTrue(logs.some((l) => /MB of .* MB \(100%\)/.test(l)), logs.join("\n"))
      const folder = Path.join(cache, "hub", "datasets", "openai", "gsm8k", "main", "main", "train")
      assert.sameMembers(Fs.readdirSync(folder), ["0000.parquet", "0001.parquet", "manifest.json"])
      // a new env (a new run) lists the split again but downloads nothing
      const again = yield* withHub({ GYRE_CACHE: cache }, first(envOf(Env.huggingface("openai/gsm8k", { config: "main" }))))
      assert.deepStrictEqual(again.a, expected)
      assert.strictEqual(fileRequests(), 2)
      // a new conversion (same URLs, new content): the changed file is downloaded again, the other kept
      const files = datasets["openai/gsm8k"]!.files["refs/convert/parquet"]!
      const original = files["main/train/0001.parquet"]!
      files["main/train/0001.parquet"] = parquetOf(rowsOf(50, 41))
      const updated = yield* withHub({ GYRE_CACHE: cache }, first(envOf(Env.huggingface("openai/gsm8k", { config: "main" }))))
      files["main/train/0001.parquet"] = original
      assert.strictEqual(fileRequests(), 3)
      assert.deepStrictEqual(updated.a, yield* first(envOf(Env.rows([...shards[0]!, ...rowsOf(50, 41)]))))
      yield* withHub({ GYRE_CACHE: cache }, first(envOf(Env.huggingface("openai/gsm8k", { config: "main" }))))
    }))

  it.effect("offline: reads the cache without a request; else the fixture; else says what is missing", () =>
    Effect.gen(function*() {
      const expected = yield* first(envOf(Env.rows(all)))
      yield* withHub({ GYRE_CACHE: cache }, first(envOf(Env.huggingface("openai/gsm8k", { config: "main" }))))
      const before = hub.requests.length
      const cached = yield* withHub({ GYRE_CACHE: cache, HF_HUB_OFFLINE: "1" }, first(envOf(Env.huggingface("openai/gsm8k", { config: "main" }))))
      assert.deepStrictEqual(cached.a, expected)
      assert.strictEqual(hub.requests.length, before)

      const fixture = Path.join(tmp, "fixture.jsonl")
      Fs.writeFileSync(fixture, rowsOf(0, 20).map((r) => JSON.stringify(r)).join("\n"))
      const fromFixture = yield* withHub({ GYRE_CACHE: Path.join(tmp, "empty"), HF_HUB_OFFLINE: "1" }, first(envOf(Env.huggingface("openai/gsm8k", { config: "main", fixture })), 5))
      assert.deepStrictEqual(fromFixture.a, yield* first(envOf(Env.rows(rowsOf(0, 20))), 5))
      assert.strictEqual(hub.requests.length, before)

      const missing = yield* Effect.flip(withHub({ GYRE_CACHE: Path.join(tmp, "empty"), HF_HUB_OFFLINE: "true" }, first(envOf(Env.huggingface("openai/gsm8k", { config: "main", split: "test" })))))
      assert.strictEqual(missing.reason, "SourceUnavailable")
      assert.include(missing.message, "openai/gsm8k (config main, split test, revision main) is not in the cache")
      assert.include(missing.message, "HF_HUB_OFFLINE")
      assert.include(missing.message, "fixture")
    }))

  it.effect("a gated dataset: without HF_TOKEN an error that names it; with it the rows, and the token in no log line", () =>
    Effect.gen(function*() {
      const denied = yield* Effect.flip(withHub({ GYRE_CACHE: cache }, first(envOf(Env.huggingface("someone/gated")))))
      assert.match(denied.message, /HTTP 401: someone\/gated is private or gated; .*set HF_TOKEN/)
      const { a, logs } = yield* withHub({ GYRE_CACHE: cache, HF_TOKEN: TOKEN }, first(envOf(Env.huggingface("someone/gated")), 5))
      assert.strictEqual(a.length, 5)
      assert.isTrue(hub.requests.some((r) => r.authorization === `Bearer ${TOKEN}`))
      assert.isFalse(logs.some((l) => l.includes(TOKEN)))
    }))

  it.effect("a pinned revision is read through the tree route at that revision", () =>
    Effect.gen(function*() {
      const { a } = yield* withHub({ GYRE_CACHE: cache }, first(envOf(Env.huggingface("openai/gsm8k", { config: "main", revision: "abc123" })), 12))
      assert.deepStrictEqual(a, yield* first(envOf(Env.rows(rowsOf(900, 12))), 12))
      assert.isTrue(hub.requests.some((r) => r.path === "/api/datasets/openai/gsm8k/tree/abc123/main/train"))
    }))

  it.effect("without GYRE_CACHE the cache is HF_HOME/gyre", () =>
    Effect.gen(function*() {
      const home = Path.join(tmp, "hf-home")
      yield* withHub({ HF_HOME: home }, first(envOf(Env.huggingface("openai/gsm8k", { config: "main", split: "test" })), 2))
      assert.isTrue(Fs.existsSync(Path.join(home, "gyre", "hub", "datasets", "openai", "gsm8k", "main", "main", "test", "manifest.json")))
    }))

  it.effect("Env.parquet and Env.csv read an http(s) URL too", () =>
    Effect.gen(function*() {
      const url = `${hub.endpoint}/datasets/openai/gsm8k/resolve/${encodeURIComponent("refs/convert/parquet")}/main/train/0000.parquet`
      assert.deepStrictEqual(yield* first(envOf(Env.parquet(url)), 10), yield* first(envOf(Env.rows(shards[0]!)), 10))
      datasets["openai/gsm8k"]!.files["csv"] = { "rows.csv": Buffer.from(["question,answer", ...shards[1]!.map((r) => `${r.question},${r.answer}`)].join("\n")) }
      const Csv = Schema.Struct({ question: Schema.String, answer: Schema.FiniteFromString })
      const csvEnv = Env.make({ name: "hub", problem: Csv, source: Env.csv<typeof Csv.Type>(`${hub.endpoint}/datasets/openai/gsm8k/resolve/csv/rows.csv`), prompt: (p) => p.question, reward: Reward.make("one", () => 1), eval: { heldOut: 0.2 } })
      assert.deepStrictEqual(yield* first(csvEnv, 10), yield* first(envOf(Env.rows(shards[1]!)), 10))
      const missing = yield* Effect.flip(first(envOf(Env.csv(`${hub.endpoint}/datasets/openai/gsm8k/resolve/csv/none.csv`))))
      assert.include(missing.message, "none.csv: could not download (HTTP 404)")
    }))

  it.effect("a missing config or split: NotFound, with the configs and splits the dataset has", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(withHub({ GYRE_CACHE: cache }, first(envOf(Env.huggingface("openai/gsm8k", { config: "main", split: "validation" })))))
      assert.strictEqual(error.reason, "NotFound")
      assert.include(error.message, 'split "validation"')
      assert.include(error.message, "it has: main (train, test)")
      const repo = yield* Effect.flip(withHub({ GYRE_CACHE: cache }, first(envOf(Env.huggingface("nobody/nothing")))))
      assert.strictEqual(repo.reason, "NotFound")
      assert.include(repo.message, "check the repo name")
      const bad = yield* Effect.flip(withHub({ GYRE_CACHE: cache }, first(envOf(Env.huggingface("not a repo")))))
      assert.include(bad.message, 'give the dataset as "owner/name"')
    }))
})

import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect, Logger, Schema } from "effect"
import * as fc from "fast-check"
import { Env, Reward } from "gyre"

const Problem = Schema.Struct({ a: Schema.Int, b: Schema.Int })
type Problem = typeof Problem.Type
const sum = Reward.make<Problem>("correct", (r) => (r.completion.trim() === String(r.problem.a + r.problem.b) ? 1 : 0))

const seededEnv = (name: string, options: { readonly heldOut?: number; readonly max?: number } = {}) =>
  Env.make({
    name,
    problem: Problem,
    source: Env.seeded(({ random, difficulty }) => ({ a: random.int(0, (options.max ?? 10 ** difficulty) - 1), b: random.int(0, (options.max ?? 10 ** difficulty) - 1) })),
    prompt: ({ a, b }) => `${a}+${b}=`,
    reward: sum,
    eval: { heldOut: options.heldOut ?? 0.2, size: 20 },
  })

const key = (p: unknown) => JSON.stringify(p)
const tasks = (env: Env.AnyEnv, seed: number, split: Env.Split, n: number) =>
  Effect.forEach(Array.from({ length: n }, (_, index) => index), (index) => Env.problemAt(env, { seed, index, split }))

const tmp = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-env-test-"))
afterAll(() => Fs.rmSync(tmp, { recursive: true, force: true }))
const writeJsonl = (name: string, lines: ReadonlyArray<string>) => {
  const path = Path.join(tmp, name)
  Fs.writeFileSync(path, lines.join("\n"))
  return path
}

describe("seeded envs", () => {
  const env = seededEnv("adder", { max: 1000 })

  it("problem i of seed s is always the same problem, with a stable key", () =>
    fc.assert(fc.asyncProperty(fc.nat(10_000), fc.nat(1000), fc.constantFrom<Env.Split>("train", "eval"), async (seed, index, split) => {
      const a = await Effect.runPromise(Env.problemAt(env, { seed, index, split }))
      const b = await Effect.runPromise(Env.problemAt(seededEnv("adder", { max: 1000 }), { seed, index, split }))
      assert.deepStrictEqual(a, b)
      assert.strictEqual(a.key, `adder/${split}/${seed}/${index}`)
    }), { numRuns: 50 }))

  it.effect("different seeds give different problem sequences", () =>
    Effect.gen(function* () {
      const a = yield* tasks(env, 1, "train", 20)
      const b = yield* tasks(env, 2, "train", 20)
      assert.notDeepEqual(a.map((t) => t.problem), b.map((t) => t.problem))
    }))

  it.effect("train and eval problems never overlap", () =>
    Effect.gen(function* () {
      const small = seededEnv("small", { max: 10, heldOut: 0.3 })
      const train = new Set((yield* tasks(small, 7, "train", 300)).map((t) => key(t.problem)))
      const evals = new Set((yield* tasks(small, 7, "eval", 100)).map((t) => key(t.problem)))
      assert.isAbove(train.size, 40)
      assert.isAbove(evals.size, 10)
      for (const p of evals) assert.isFalse(train.has(p), `${p} is in both splits`)
    }))

  it.effect("the eval set is the same in every call with the same seed", () =>
    Effect.gen(function* () {
      const first = yield* Env.evalSet(env, { seed: 3 })
      const second = yield* Env.evalSet(seededEnv("adder", { max: 1000 }), { seed: 3 })
      assert.strictEqual(first.length, 20)
      assert.deepStrictEqual(first, second)
      assert.notDeepEqual((yield* Env.evalSet(env, { seed: 4 })).map((t) => t.problem), first.map((t) => t.problem))
    }))

  it.effect("a large eval split gives as many distinct problems as asked for", () =>
    Effect.gen(function* () {
      // 1,000,000 problems, 20% held out: 150 distinct ones are easy to find
      const set = yield* Env.evalSet(seededEnv("wide", { max: 1000 }), { seed: 1, size: 150 })
      assert.strictEqual(set.length, 150)
      assert.strictEqual(new Set(set.map((t) => key(t.problem))).size, 150)
    }))

  it.effect("the eval set is capped at the eval split's size, and says so", () =>
    Effect.gen(function* () {
      // 10 x 10 problems; the hash puts a fixed subset of them in the eval split
      const small = seededEnv("capped", { max: 10, heldOut: 0.3 })
      const space = Array.from({ length: 100 }, (_, i) => ({ a: Math.floor(i / 10), b: i % 10 }))
      const evalSplit = new Set(space.filter((p) => Env.splitOf(small, p) === "eval").map(key))
      assert.isAbove(evalSplit.size, 10)
      const logs: Array<string> = []
      const logger = Logger.make(({ message }) => logs.push(String(Array.isArray(message) ? message.join(" ") : message)))
      const info = yield* Env.evalSetInfo(small, { seed: 2, size: 300 }).pipe(Effect.provide(Logger.layer([logger])))
      assert.strictEqual(info.tasks.length, evalSplit.size)
      assert.isTrue(info.exhausted)
      assert.strictEqual(info.requested, 300)
      assert.sameMembers(info.tasks.map((t) => key(t.problem)), [...evalSplit])
      assert.isTrue(logs.some((l) => l.includes(`${evalSplit.size} distinct problems`) && l.includes("300")), logs.join("\n"))
      // asking for fewer than the split holds gives exactly that many, with no log line
      const fewer = yield* Env.evalSetInfo(small, { seed: 2, size: 5 })
      assert.strictEqual(fewer.tasks.length, 5)
      assert.isFalse(fewer.exhausted)
    }))

  it("eval sets are deterministic for a seed and never hold a train problem", () =>
    fc.assert(fc.asyncProperty(fc.nat(1000), fc.integer({ min: 1, max: 40 }), async (seed, size) => {
      const make = () => seededEnv("prop", { max: 12, heldOut: 0.25 })
      const a = await Effect.runPromise(Env.evalSet(make(), { seed, size }))
      const b = await Effect.runPromise(Env.evalSet(make(), { seed, size }))
      assert.deepStrictEqual(a, b)
      assert.strictEqual(new Set(a.map((t) => key(t.problem))).size, a.length)
      const env = make()
      const train = await Effect.runPromise(tasks(env, seed, "train", 200))
      const trainKeys = new Set(train.map((t) => key(t.problem)))
      for (const t of a) {
        assert.strictEqual(Env.splitOf(env, t.problem), "eval")
        assert.isFalse(trainKeys.has(key(t.problem)), `${key(t.problem)} is in both splits`)
      }
    }), { numRuns: 15 }))

  it.effect("a generator that throws or returns a bad problem fails with the key", () =>
    Effect.gen(function* () {
      const throwing = Env.make({ name: "throws", problem: Problem, source: Env.seeded(() => { throw new Error("no dice") }), prompt: () => "", reward: sum })
      const e1 = yield* Effect.flip(Env.problemAt(throwing, { seed: 1, index: 2, split: "train" }))
      assert.strictEqual(e1.reason, "GeneratorFailed")
      assert.match(e1.message, /throws\/train\/1\/2[\s\S]*no dice/)
      // picking from nothing is the generator's failure, named, not an undefined problem field
      const empty = Env.make({ name: "empty", problem: Problem, source: Env.seeded(({ random }) => ({ a: random.pick<number>([]), b: 2 })), prompt: () => "", reward: sum })
      const e0 = yield* Effect.flip(Env.problemAt(empty, { seed: 1, index: 0, split: "train" }))
      assert.strictEqual(e0.reason, "GeneratorFailed")
      assert.match(e0.message, /random\.pick was given no items/)
      const bad = Env.make({ name: "bad", problem: Problem, source: Env.seeded(() => ({ a: 1.5, b: 2 })), prompt: () => "", reward: sum })
      const e2 = yield* Effect.flip(Env.problemAt(bad, { seed: 1, index: 0, split: "train" }))
      assert.strictEqual(e2.reason, "GeneratorFailed")
      assert.match(e2.message, /does not match the Schema \(bad\/train\/1\/0\)/)
      // the offending value, not only the field
      assert.include(e2.message, "a: ")
      assert.include(e2.message, "got 1.5")
      const long = Env.make({ name: "long", problem: Problem, source: Env.seeded(() => ({ a: "x".repeat(500), b: 2 }) as unknown as Problem), prompt: () => "", reward: sum })
      const e3 = yield* Effect.flip(Env.problemAt(long, { seed: 1, index: 0, split: "train" }))
      assert.include(e3.message, `got "${"x".repeat(20)}`)
      assert.isBelow(e3.message.length, 300, e3.message)
    }))

  it.effect("a problem space too small for a split is reported, not looped on", () =>
    Effect.gen(function* () {
      const tiny = Env.make({ name: "tiny", problem: Problem, source: Env.seeded(() => ({ a: 1, b: 1 })), prompt: () => "", reward: sum, eval: { heldOut: 0.5 } })
      const train = yield* Effect.exit(Env.problemAt(tiny, { seed: 0, index: 0, split: "train" }))
      const evals = yield* Effect.exit(Env.problemAt(tiny, { seed: 0, index: 0, split: "eval" }))
      const failed = [train, evals].filter((e) => e._tag === "Failure")
      assert.strictEqual(failed.length, 1)
      assert.match(String(failed[0]!.cause), /ProblemSpaceTooSmall|no (train|eval) problem found/)
    }))
})

describe("row envs", () => {
  const rowsEnv = (name: string, source: Env.Source<Problem>, heldOut = 0.25) =>
    Env.make({ name, problem: Problem, source, prompt: ({ a, b }) => `${a}+${b}=`, reward: sum, eval: { heldOut } })
  const rows = Array.from({ length: 40 }, (_, i) => ({ a: i, b: i + 1 }))

  it.effect("each epoch walks every row of the split once, in a seeded order", () =>
    Effect.gen(function* () {
      const env = rowsEnv("rows", Env.rows(rows))
      const train = yield* tasks(env, 5, "train", 80)
      const evals = yield* tasks(env, 5, "eval", 40)
      const trainKeys = new Set(train.map((t) => key(t.problem)))
      const evalKeys = new Set(evals.map((t) => key(t.problem)))
      assert.strictEqual(trainKeys.size + evalKeys.size, 40)
      for (const k of evalKeys) assert.isFalse(trainKeys.has(k))
      const n = trainKeys.size
      assert.strictEqual(new Set(train.slice(0, n).map((t) => key(t.problem))).size, n)
      assert.strictEqual(new Set(train.slice(n, 2 * n).map((t) => key(t.problem))).size, n)
      assert.deepStrictEqual(yield* tasks(env, 5, "train", 10), train.slice(0, 10))
    }))

  it.effect("the eval set of rows is the split's rows, each once, in a seeded order", () =>
    Effect.gen(function* () {
      // duplicated rows count once
      const env = rowsEnv("rowsEval", Env.rows([...rows, ...rows.slice(0, 10)]), 0.25)
      const evalSplit = new Set(rows.filter((p) => Env.splitOf(env, p) === "eval").map(key))
      const all = yield* Env.evalSetInfo(env, { seed: 5, size: 1000 })
      assert.strictEqual(all.tasks.length, evalSplit.size)
      assert.isTrue(all.exhausted)
      assert.sameMembers(all.tasks.map((t) => key(t.problem)), [...evalSplit])
      const some = yield* Env.evalSet(env, { seed: 5, size: 3 })
      assert.strictEqual(some.length, 3)
      assert.deepStrictEqual(some, yield* Env.evalSet(rowsEnv("rowsEval", Env.rows([...rows, ...rows.slice(0, 10)]), 0.25), { seed: 5, size: 3 }))
      const train = new Set((yield* tasks(env, 5, "train", 60)).map((t) => key(t.problem)))
      for (const t of all.tasks) assert.isFalse(train.has(key(t.problem)))
    }))

  it.effect("decodes JSONL rows and skips blank lines", () =>
    Effect.gen(function* () {
      const path = writeJsonl("good.jsonl", [...rows.slice(0, 10).map((r) => JSON.stringify(r)), "", "  "])
      const env = rowsEnv("jsonl", Env.jsonl(path), 0)
      const all = yield* tasks(env, 1, "train", 10)
      assert.strictEqual(new Set(all.map((t) => key(t.problem))).size, 10)
    }))

  it.effect("names the file and the line of a row that does not decode, counting blank lines", () =>
    Effect.gen(function* () {
      const path = writeJsonl("bad-row.jsonl", [JSON.stringify({ a: 1, b: 2 }), "", JSON.stringify({ a: 3, b: 4 }), "", JSON.stringify({ a: "x", b: 6 })])
      const error = yield* Effect.flip(tasks(rowsEnv("badrow", Env.jsonl(path), 0), 1, "train", 1))
      assert.strictEqual(error.reason, "InvalidRow")
      assert.include(error.message, `${path}:5: a: `)
      assert.include(error.message, 'got "x"')
    }))

  it.effect("names the file and the line of invalid JSON", () =>
    Effect.gen(function* () {
      const path = writeJsonl("bad-json.jsonl", [JSON.stringify({ a: 1, b: 2 }), "", "{\"a\": 1,"])
      const error = yield* Effect.flip(tasks(rowsEnv("badjson", Env.jsonl(path), 0), 1, "train", 1))
      assert.strictEqual(error.reason, "InvalidRow")
      assert.include(error.message, `${path}:3: not valid JSON`)
    }))

  it.effect("names the index of a bad in-memory row, and rejects an empty source", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(tasks(rowsEnv("badmem", Env.rows([{ a: 1, b: 2 }, { a: 1 }]), 0), 1, "train", 1))
      assert.include(error.message, "rows[1]")
      const empty = yield* Effect.flip(tasks(rowsEnv("empty", Env.jsonl(writeJsonl("empty.jsonl", ["", ""])), 0), 1, "train", 1))
      assert.match(empty.message, /has no rows/)
    }))
})

describe("mixtures", () => {
  const a = seededEnv("a")
  const b = seededEnv("b")

  it.effect("pick envs in proportion to their weights", () =>
    Effect.gen(function* () {
      const mix = Env.mixture("mix", [[a, 3], [b, 1]])
      const picks = yield* Effect.forEach(Array.from({ length: 2000 }, (_, index) => index), (index) =>
        Env.taskAt(mix, { seed: 11, index, split: "train" }).pipe(Effect.map((t) => t.env)))
      const share = picks.filter((e) => e === "a").length / picks.length
      assert.closeTo(share, 0.75, 0.04)
      const again = yield* Env.taskAt(mix, { seed: 11, index: 17, split: "train" })
      assert.strictEqual(again.env, picks[17])
      assert.strictEqual(again.envDef.name, again.env)
    }))

  it("rejects bad mixtures with a clear message", () => {
    assert.throws(() => Env.mixture("m", []), /Env\.mixture\("m"\): give at least one env/)
    assert.throws(() => Env.mixture("m", [[a, 0]]), /weight of a must be > 0/)
    assert.throws(() => Env.mixture("m", [[a, 1], [seededEnv("a"), 1]]), /env names must be distinct/)
  })
})

describe("Env.make", () => {
  const base = { name: "ok", problem: Problem, source: Env.seeded(() => ({ a: 1, b: 2 })), prompt: () => "p", reward: sum }
  type Spec = Env.EnvSpec<Problem>

  it("rejects bad definitions with a message naming the env and the field", () => {
    const bad = (patch: Record<string, unknown>) => () => Env.make({ ...base, ...patch } as unknown as Spec)
    assert.throws(bad({ name: "has space" }), /Env\.make\("has space"\): name must be letters/)
    assert.throws(bad({ problem: { a: 1 } }), /Env\.make\("ok"\): problem must be a Schema/)
    assert.throws(bad({ source: [{ a: 1, b: 2 }] }), /source must be Env\.seeded/)
    assert.throws(bad({ prompt: "What?" }), /prompt must be a function/)
    assert.throws(bad({ reward: () => 1 }), /reward must be a Reward/)
    assert.throws(bad({ eval: { heldOut: 1 } }), /eval\.heldOut must be in \[0, 1\)/)
  })

  it("accepts a good one", () => assert.isTrue(Env.isEnv(Env.make(base))))
})

/**
 * The code sandbox's limits and costs, measured side by side in one run:
 *   1. the cost of one more test: evaluations of a small program with 1 test and with 21
 *      tests (each test runs in a fresh QuickJS runtime and context), per extra test;
 *   2. verdicts with the machine loaded: programs just within and just beyond a work
 *      budget, run on a quiet machine and again with a spinning thread per core beside
 *      the sandbox; prints how many verdicts and work counts agree, and how much slower
 *      the loaded runs were on the wall clock (what a wall-clock limit would have seen);
 *   3. interrupt checks per second of wall time for a tight loop (the budget's scale).
 *
 * Run: npx tsx bench/sandbox.ts
 */
import { availableParallelism } from "node:os"
import { Worker } from "node:worker_threads"
import { Effect, Layer } from "effect"
import { Sandbox } from "gyre/rewards"

const SMALL = `(x => { let s = 0; for (let i = 0; i < 10; i++) s += i; return 3 * x + 1 + s - 45 }\n)`
const calls = (n: number) => Array.from({ length: n }, (_, i) => [i])
const loop = (n: number) => `(x=>{let s=0;for(let i=0;i<${n};i++)s+=i;return s})`
const median = (xs: ReadonlyArray<number>) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!

/** Milliseconds per evaluation of SMALL with `n` tests, over `reps` evaluations. */
const perEvaluation = (n: number, reps: number) =>
  Effect.gen(function* () {
    const sandbox = yield* Sandbox
    const started = performance.now()
    for (let r = 0; r < reps; r++) yield* sandbox.run({ source: SMALL, calls: calls(n) })
    return (performance.now() - started) / reps
  })

const costPerTest = Effect.gen(function* () {
  yield* perEvaluation(5, 50) // start the worker, warm QuickJS up
  const one: Array<number> = [], many: Array<number> = []
  for (let round = 0; round < 10; round++) {
    one.push(yield* perEvaluation(1, 30))
    many.push(yield* perEvaluation(21, 30))
  }
  return { one: median(one), many: median(many), perTest: (median(many) - median(one)) / 20 }
})

/** Each program's verdict ("ok" or its reason), work and wall time, once. */
const verdicts = (sources: ReadonlyArray<string>, work: number) =>
  Effect.forEach(sources, (source) =>
    Effect.gen(function* () {
      const sandbox = yield* Sandbox
      const started = performance.now()
      const verdict = yield* sandbox.run({ source, calls: [[0]], limits: { work } }).pipe(
        Effect.map((e) => ({ verdict: "ok", work: e.work })),
        Effect.catchTag("ProgramError", (e) => Effect.succeed({ verdict: e.reason, work: -1 })),
      )
      return { ...verdict, millis: performance.now() - started }
    }))

const underLoad = Effect.gen(function* () {
  const budget = 200
  // about 5,000 iterations per interrupt check: from 70% to 130% of the budget
  const sources = [0.7, 0.8, 0.9, 0.95, 1.05, 1.1, 1.2, 1.3].map((f) => loop(Math.round(f * budget * 5_000)))
  const quiet = yield* verdicts(sources, budget)
  const spinners = Array.from({ length: availableParallelism() }, () => new Worker("for (;;) {}", { eval: true }))
  const loaded = yield* verdicts(sources, budget).pipe(Effect.ensuring(Effect.promise(() => Promise.all(spinners.map((w) => w.terminate())))))
  const same = quiet.filter((q, i) => q.verdict === loaded[i]!.verdict && q.work === loaded[i]!.work).length
  const slowdown = median(quiet.map((q, i) => loaded[i]!.millis / q.millis))
  return { programs: sources.length, same, slowdown, spinners: spinners.length, quiet: quiet.map((q) => q.verdict).join(" ") }
})

const checksPerSecond = Effect.gen(function* () {
  const sandbox = yield* Sandbox
  const rates: Array<number> = []
  for (let i = 0; i < 5; i++) {
    const e = yield* sandbox.run({ source: loop(5_000_000), calls: [[0]], limits: { work: 10_000 } })
    rates.push(e.work / (e.millis / 1000))
  }
  return median(rates)
})

const program = Effect.gen(function* () {
  const cost = yield* costPerTest
  const load = yield* underLoad
  const rate = yield* checksPerSecond
  yield* Effect.log(
    `fresh context per test: ${cost.one.toFixed(2)} ms per evaluation with 1 test, ${cost.many.toFixed(2)} ms with 21 tests: ` +
      `${cost.perTest.toFixed(3)} ms per extra test`,
  )
  yield* Effect.log(
    `work budget 200 with ${load.spinners} spinning threads beside the sandbox: ${load.same}/${load.programs} programs got the same verdict and work ` +
      `(quiet verdicts: ${load.quiet}); the loaded runs took ${load.slowdown.toFixed(2)}x the wall time`,
  )
  yield* Effect.log(`a tight loop makes ${rate.toFixed(0)} interrupt checks per second of wall time in its worker`)
}).pipe(Effect.provide(Layer.fresh(Sandbox.layer({ concurrency: 1 }))))

Effect.runPromise(program).then(() => process.exit(0), (e) => {
  process.stderr.write(`${e}\n`)
  process.exit(1)
})

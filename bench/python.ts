/**
 * The embedded Python sandbox's costs, measured in one run:
 *   1. cold start: the first evaluation of a fresh sandbox (a worker loads Pyodide);
 *   2. warm evaluations per second of one worker (one core) for a typical program with
 *      5 function tests (each test loads the program afresh; the state is reset between
 *      evaluations), and of a pool of `defaultConcurrency()` workers;
 *   3. the cost of one stdin/stdout case;
 *   4. the work budget's scale: jumps and calls counted per second of a tight loop.
 *
 * Run: npx tsx bench/python.ts
 */
import { availableParallelism } from "node:os"
import { Effect, Layer } from "effect"
import { python, PythonSandbox } from "gyre/rewards"

const TYPICAL = [
  "def solve(nums, k):",
  "    seen = {}",
  "    for i, x in enumerate(nums):",
  "        if k - x in seen:",
  "            return [seen[k - x], i]",
  "        seen[x] = i",
  "    return []",
].join("\n")
const CALLS = { entry: "solve", args: [[[2, 7, 11, 15], 9], [[3, 2, 4], 6], [[3, 3], 6], [[1, 2, 3, 4, 5, 6], 11], [[5], 5]] }
const median = (xs: ReadonlyArray<number>) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!

const coldStart = Effect.gen(function* () {
  const sandbox = yield* PythonSandbox
  const started = performance.now()
  yield* sandbox.run({ source: TYPICAL, calls: CALLS })
  return performance.now() - started
})

/** Evaluations per second over `n` evaluations, `parallel` at a time. */
const rate = (n: number, parallel: number) =>
  Effect.gen(function* () {
    const sandbox = yield* PythonSandbox
    const started = performance.now()
    yield* Effect.forEach(Array.from({ length: n }), () => sandbox.run({ source: TYPICAL, calls: CALLS }), { concurrency: parallel, discard: true })
    return n / ((performance.now() - started) / 1000)
  })

const stdioCost = Effect.gen(function* () {
  const sandbox = yield* PythonSandbox
  const source = "a, b = map(int, input().split())\nprint(a + b)"
  const times: Array<number> = []
  for (let i = 0; i < 50; i++) {
    const started = performance.now()
    yield* sandbox.run({ source, stdin: ["2 3\n", "4 5\n", "1 1\n", "0 0\n", "9 9\n"] })
    times.push(performance.now() - started)
  }
  return median(times)
})

const workRate = Effect.gen(function* () {
  const sandbox = yield* PythonSandbox
  const rates: Array<number> = []
  for (let i = 0; i < 3; i++) {
    const e = yield* sandbox.run({ source: "def f(n):\n    s = 0\n    for i in range(n):\n        s += i\n    return s", calls: { entry: "f", args: [[2_000_000]] }, limits: { work: 10_000_000 } })
    rates.push(e.work! / (e.millis / 1000))
  }
  return median(rates)
})

const one = Effect.gen(function* () {
  const cold = yield* coldStart
  yield* rate(100, 1) // warm up
  const rates: Array<number> = []
  for (let i = 0; i < 5; i++) rates.push(yield* rate(200, 1))
  const stdio = yield* stdioCost
  const work = yield* workRate
  return { cold, perCore: median(rates), stdio, work }
}).pipe(Effect.provide(Layer.fresh(PythonSandbox.layer({ concurrency: 1 }))))

const pool = Effect.gen(function* () {
  const workers = python.defaultConcurrency()
  const cold = yield* Effect.forEach(Array.from({ length: workers }), () => coldStart, { concurrency: workers })
  yield* rate(100, workers)
  const rates: Array<number> = []
  for (let i = 0; i < 3; i++) rates.push(yield* rate(400, workers))
  return { workers, cold: Math.max(...cold), rate: median(rates) }
}).pipe(Effect.provide(Layer.fresh(PythonSandbox.layer())))

const program = Effect.gen(function* () {
  const single = yield* one
  const many = yield* pool
  yield* Effect.log(`cold start (a worker loads Pyodide, then the first evaluation): ${(single.cold / 1000).toFixed(1)} s`)
  yield* Effect.log(`warm, one worker: ${single.perCore.toFixed(0)} evaluations per second of a 5-test program (${(1000 / single.perCore).toFixed(1)} ms each)`)
  yield* Effect.log(`warm, a pool of ${many.workers} workers on ${availableParallelism()} cores: ${many.rate.toFixed(0)} evaluations per second (cold start of the pool ${(many.cold / 1000).toFixed(1)} s)`)
  yield* Effect.log(`stdin/stdout: ${single.stdio.toFixed(1)} ms for 5 cases`)
  yield* Effect.log(`work budget: a tight loop counts ${(single.work / 1e6).toFixed(2)} million jumps and calls per second of wall time`)
})

Effect.runPromise(program).then(() => process.exit(0), (e) => {
  process.stderr.write(`${e}\n`)
  process.exit(1)
})

/**
 * Code reward throughput: a 10-line program against 5 tests, evaluated
 *   1. in the QuickJS sandbox (`Sandbox.layer`, one fresh runtime and context per
 *      evaluation, in worker threads), at concurrency 1 and 2;
 *   2. unsandboxed, with `new Function` on the main thread (a fresh function per
 *      evaluation, called once per test), for scale.
 * Prints evaluations per second of each, and the ratio.
 *
 * Run: npx tsx bench/code.ts
 */
import { Effect, Layer } from "effect"
import { runTests, Sandbox } from "gyre/rewards"

const PROGRAM = `(function gcdSteps(n) {
  let a = n, b = 84, steps = 0
  while (b !== 0) {
    const t = a % b
    a = b
    b = t
    steps++
  }
  return [a, steps]
}
)`
const gcd = (a: number, b: number): number => (b === 0 ? a : gcd(b, a % b))
const steps = (a: number, b: number): number => (b === 0 ? 0 : 1 + steps(b, a % b))
const TESTS = [12, 35, 60, 97, 168].map((n) => ({ args: [n], expected: [gcd(n, 84), steps(n, 84)] }))

const sandboxed = (concurrency: number, n: number) =>
  Effect.gen(function* () {
    const once = runTests(PROGRAM, TESTS)
    yield* Effect.all(Array.from({ length: concurrency * 4 }, () => once), { concurrency }) // start the workers
    const started = performance.now()
    const reports = yield* Effect.all(Array.from({ length: n }, () => once), { concurrency })
    const seconds = (performance.now() - started) / 1000
    if (reports.some((r) => r.passed !== TESTS.length)) throw new Error("a sandboxed evaluation failed its tests")
    return n / seconds
  }).pipe(Effect.provide(Layer.fresh(Sandbox.layer({ concurrency }))))

const unsandboxed = (n: number): number => {
  const started = performance.now()
  let passed = 0
  for (let i = 0; i < n; i++) {
    const f = new Function(`return ${PROGRAM}`)() as (n: number) => unknown
    for (const t of TESTS) if (JSON.stringify(f(...(t.args as [number]))) === JSON.stringify(t.expected)) passed++
  }
  if (passed !== n * TESTS.length) throw new Error("an unsandboxed evaluation failed its tests")
  return n / ((performance.now() - started) / 1000)
}

const program = Effect.gen(function* () {
  const one = yield* sandboxed(1, 500)
  const two = yield* sandboxed(2, 1000)
  const plain = unsandboxed(20_000)
  yield* Effect.log(
    `10-line program, 5 tests: sandboxed ${one.toFixed(0)}/s (concurrency 1), ${two.toFixed(0)}/s (concurrency 2); ` +
      `new Function ${plain.toFixed(0)}/s unsandboxed: ${(plain / two).toFixed(0)}x the sandbox at concurrency 2`,
  )
})

Effect.runPromise(program).then(() => process.exit(0), (e) => {
  process.stderr.write(`${e}\n`)
  process.exit(1)
})

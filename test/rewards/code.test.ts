/**
 * Laws of the code reward (gyre/testing), on linear functions f(x) = a*x + b.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Scope } from "effect"
import * as fc from "fast-check"
import { laws, score, transforms } from "gyre/testing"
import { passesTests, Sandbox, sameJson, type TestCase } from "../../rewards/code.ts"
import { make } from "../../rewards/code/Sandbox.ts"

const scope = Scope.makeUnsafe()
const sandbox = await Effect.runPromise(Scope.provide(make({ concurrency: 2 }), scope))
afterAll(() => Effect.runPromise(Scope.close(scope, Exit.void)))
const provide = <A, E>(self: Effect.Effect<A, E, Sandbox>) => Effect.provideService(self, Sandbox, sandbox)

interface Linear {
  readonly a: number
  readonly b: number
}
const problems = fc.record({ a: fc.integer({ min: -20, max: 20 }), b: fc.integer({ min: -20, max: 20 }) })
const points = [-3, 0, 1, 2, 7]
const tests = (p: Linear): ReadonlyArray<TestCase> => points.map((x) => ({ args: [x], expected: p.a * x + p.b }))
const reward = passesTests(tests)
const gold = (p: Linear) => `x=>${p.a}*x+(${p.b})`

/** Programs a policy might write: right, constant, off by a little, or not code at all. */
const programs = (p: Linear) =>
  fc.oneof(
    fc.constant(gold(p)),
    fc.integer({ min: -200, max: 200 }).map((c) => `x=>${c}`),
    fc.tuple(fc.integer({ min: -3, max: 3 }), fc.integer({ min: -3, max: 3 })).map(([da, db]) => `x=>${p.a + da}*x+(${p.b + db})`),
    fc.constantFrom("x=>x", "x=>{while(true){}}", "x=>{throw 1}", "42", "", "x=>", "function(x){return x*x}"),
    fc.string({ maxLength: 12 }),
  )
const numRuns = 25

describe("passesTests", () => {
  it("lies in [0, 1] and is deterministic", () => laws.wellBehaved(reward, { min: 0, max: 1, problems, completions: programs, numRuns, provide }))

  it("scores a right program 1", () => laws.goldScoresMax(reward, { problems, gold, numRuns, provide }))

  it("scores the fraction of tests a program passes", () =>
    laws.agrees(reward, {
      problems,
      completions: (p) =>
        fc.tuple(fc.integer({ min: -3, max: 3 }), fc.integer({ min: -3, max: 3 })).map(([da, db]) => `x=>${p.a + da}*x+(${p.b + db})`),
      expected: (p, c) => {
        const [, a, b] = /x=>(-?\d+)\*x\+\((-?\d+)\)/.exec(c)!.map(Number)
        return points.filter((x) => a! * x + b! === p.a * x + p.b).length / points.length
      },
      numRuns,
      provide,
    }))

  it("ignores whitespace around the program", () =>
    laws.invariant(reward, { problems, completions: programs, transform: transforms.padWhitespace, numRuns, provide }))

  it("scores each rollout alone, whatever the order in its group", () =>
    laws.orderIndependent(reward, { problems, completions: programs, groupSize: 3, numRuns: 10, provide }))

  it("scores a program that fails 0 with the reason, unmasked", async () => {
    const s = await Effect.runPromise(provide(score(reward, { a: 1, b: 0 }, "x=>{while(true){}}")))
    assert.deepStrictEqual([s.value, s.masked], [0, undefined])
    const penalized = passesTests(tests, { penalty: -1 })
    const p = await Effect.runPromise(provide(score(penalized, { a: 1, b: 0 }, "x=>x.y.z")))
    assert.strictEqual(p.value, -1)
  })

  it("refuses an invalid penalty or limit where it is defined", () => {
    assert.throws(() => passesTests(tests, { penalty: Number.NaN }), /penalty must be a finite number/)
    assert.throws(() => passesTests(tests, { limits: { stackKb: 0 } }), /limits.stackKb must be a positive number/)
    assert.throws(() => passesTests(tests, { limits: { work: -1 } }), /limits.work must be a positive integer/)
  })

  it("a problem with no tests is not applicable", async () => {
    const none = passesTests<Linear>(() => [])
    const s = await Effect.runPromise(provide(score(none, { a: 1, b: 0 }, "x=>x")))
    assert.strictEqual(s.value, undefined)
  })

  it("compares results as JSON values", () => {
    assert.isTrue(sameJson({ a: [1, { b: null }], c: "x" }, { c: "x", a: [1, { b: null }] }))
    assert.isFalse(sameJson([1, 2], [2, 1]))
    assert.isFalse(sameJson({ a: 1 }, { a: 1, b: undefined as never }))
    assert.isFalse(sameJson("7", 7))
    assert.isFalse(sameJson(undefined, null))
  })

  it("scores each test in a fresh context: a counter passes only the tests a fresh counter passes", async () => {
    // f(x) = x + 1 at x = 0, 1, 2: a counter returns 1 every time, which only f(0) expects
    const succ = passesTests<null>(() => [0, 1, 2].map((x) => ({ args: [x], expected: x + 1 })))
    const s = await Effect.runPromise(provide(score(succ, null, "(()=>{let n=0;return x=>++n})()")))
    assert.strictEqual(s.value, 1 / 3)
  })

  it("a result JSON has no value for (a BigInt) scores the penalty with its reason", async () => {
    const s = await Effect.runPromise(provide(score(reward, { a: 1, b: 0 }, "x=>BigInt(x)")))
    assert.strictEqual(s.value, 0)
    assert.match(s.notes?.["tests"]?.[0] ?? "", /^ResultNotSerializable: the program test 1: returned a BigInt/)
  })

  it("compares structured results", async () => {
    const sort = passesTests<null>(() => [{ args: [[3, 1, 2]], expected: [1, 2, 3] }, { args: [{ k: "v" }], expected: { k: "v", n: 1 } }])
    const s = await Effect.runPromise(provide(score(sort, null, "v=>Array.isArray(v)?[...v].sort():{...v,n:1}")))
    assert.strictEqual(s.value, 1)
  })
})

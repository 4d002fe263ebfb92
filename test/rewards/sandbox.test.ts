/**
 * Hostile programs in the code sandbox: each is contained (it scores 0 with its reason),
 * nothing reaches the host, and the next evaluation is normal.
 */
import { existsSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Worker } from "node:worker_threads"
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Scope } from "effect"
import { score } from "gyre/testing"
import { functionExpression, passesTests, type ProgramError, runTests, Sandbox, type TestCase } from "../../rewards/code.ts"
import { type Limits, make, run } from "../../rewards/code/Sandbox.ts"

const scope = Scope.makeUnsafe()
const sandbox = await Effect.runPromise(Scope.provide(make({ concurrency: 2 }), scope))
afterAll(() => Effect.runPromise(Scope.close(scope, Exit.void)))

const withSandbox = <A, E>(effect: Effect.Effect<A, E, Sandbox>) => Effect.runPromise(Effect.provideService(effect, Sandbox, sandbox))

// f(x) = 3x + 1
const tests: ReadonlyArray<TestCase> = [{ args: [2], expected: 7 }, { args: [3], expected: 10 }, { args: [0], expected: 1 }, { args: [-4], expected: -11 }]
const reward = passesTests<null>(() => tests)

/** No lone surrogate (String.prototype.isWellFormed, which the es2022 lib does not type). */
const isWellFormed = (s: string) => !/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(s)

const MARKER = "__gyreHostMarker"
;(globalThis as Record<string, unknown>)[MARKER] = "untouched"

/** The host as it should stay: the marker, the prototypes, the process. */
const assertHostIntact = () => {
  assert.strictEqual((globalThis as Record<string, unknown>)[MARKER], "untouched")
  assert.isUndefined((Object.prototype as Record<string, unknown>)["polluted"])
  assert.isUndefined((globalThis as Record<string, unknown>)["hacked"])
  assert.strictEqual(JSON.stringify({ a: [1] }), "{\"a\":[1]}")
  assert.strictEqual(typeof process.pid, "number")
}

/** A normal program, run after a hostile one, scores 1. */
const assertNextIsNormal = async () => {
  const s = await withSandbox(score(reward, null, "x=>3*x+1"))
  assert.strictEqual(s.value, 1)
}

/** Runs a hostile completion: it scores 0, unmasked, and fails with `reason`, a message matching `message`. */
const contained = async (completion: string, reason: ProgramError["reason"], message: RegExp, limits?: Partial<Limits>) => {
  const s = await withSandbox(score(limits === undefined ? reward : passesTests<null>(() => tests, { limits }), null, completion))
  assert.strictEqual(s.value, 0, `${completion} scored ${s.value}`)
  assert.isUndefined(s.masked)
  assert.match(s.notes?.["tests"]?.[0] ?? "", new RegExp(`^${reason}: the program `))
  const failure = await withSandbox(Effect.flip(runTests(functionExpression(completion), tests, limits)))
  assert.strictEqual(failure._tag, "ProgramError")
  if (failure._tag !== "ProgramError") return
  assert.strictEqual(failure.reason, reason, failure.message)
  assert.match(failure.message, message)
  assertHostIntact()
  await assertNextIsNormal()
  return failure
}

describe("the code reward", () => {
  it("scores the fraction of tests passed", async () => {
    const scores = await Promise.all(["x=>3*x+1", "x=>7", "x=>x>0?3*x+1:0", "x=>'7'", "function (x) { return 3 * x + 1 }"].map((c) => withSandbox(score(reward, null, c))))
    assert.deepStrictEqual(scores.map((s) => s.value), [1, 0.25, 0.5, 0, 1])
  })

  it("a completion that is not a function scores 0, and cannot escape its parentheses", async () => {
    await contained("x=>1);globalThis.hacked=1;(0", "NotAFunction", /is not a function/)
    await contained("", "Threw", /SyntaxError/)
  })
})

describe("hostile programs", () => {
  it("this.constructor.constructor('return process')() finds no process", () =>
    contained("x=>this.constructor.constructor('return process')().exit(1)", "Threw", /ReferenceError: 'process' is not defined/))

  it("globalThis holds only the language's built-ins", async () => {
    await contained("x=>globalThis.process.exit(1)", "Threw", /TypeError/)
    const probe = "x=>[typeof process,typeof require,typeof module,typeof fetch,typeof setTimeout,typeof WebAssembly,typeof std,typeof os,typeof Deno].join()"
    const report = await withSandbox(runTests(functionExpression(probe), [{ args: [0], expected: "" }]))
    assert.deepStrictEqual(report.results, [Array(9).fill("undefined").join()])
  })

  it("require is not defined", () => contained("x=>require('fs').writeFileSync('/tmp/x','')", "Threw", /ReferenceError: 'require' is not defined/))

  it("import() never loads a module", async () => {
    const file = join(tmpdir(), `gyre-sandbox-${process.pid}`)
    const program = `(()=>{import('fs').then(m=>m.writeFileSync(${JSON.stringify(file)},'x'));return x=>import('node:fs')})()`
    // the promise import() returns is awaited, and rejects: there is no module loader
    const failure = await withSandbox(Effect.flip(runTests(program, tests)))
    assert.strictEqual(failure._tag === "ProgramError" ? failure.reason : failure._tag, "Threw")
    assert.match(failure.message, /^test 1: returned a promise that rejected: /)
    assert.isFalse(existsSync(file))
    assertHostIntact()
    await assertNextIsNormal()
  })

  it("an infinite loop runs out of its work budget, even one that catches", async () => {
    await contained("x=>{while(true){}}", "Timeout", /work budget of 2000 interrupt checks/)
    await contained("x=>{for(;;){try{for(;;){}}catch(e){}}}", "Timeout", /work budget/, { work: 100 })
  })

  it("a long call inside QuickJS' own code, which the budget does not see, is stopped with its worker at the backstop", () =>
    // indexOf over a sparse array of 2^32-1 slots: one native call that never reaches the interrupt handler
    contained("x=>{const a=[];a.length=2**32-1;return a.indexOf(1)}", "Timeout", /backstop of 1000 ms .* worker was stopped/, { backstop: "1 second" }))

  it("deep recursion overflows the sandbox's stack, not the host's", async () => {
    await contained("function f(x){return f(x+1)+1}", "StackOverflow", /stack/)
    await contained("x=>{const g=n=>[g(n+1)];return g(0)}", "StackOverflow", /stack/)
    // the largest stack limit allowed still ends inside the sandbox
    await contained("function f(x){return f(x+1)+1}", "StackOverflow", /overflowed its stack \(1024 KB\)/, { stackKb: 1024 })
  })

  it("a memory bomb runs out of the sandbox's memory", async () => {
    await contained("x=>'a'.repeat(2**29)", "OutOfMemory", /out of memory \(32 MB\)/)
    await contained("x=>{let a=[];for(;;)a.push([a.length,a.length,{a}])}", "OutOfMemory", /out of memory \(8 MB\)/, { memoryMb: 8 })
    // ArrayBuffers, whose memory QuickJS does not count, cannot be made at all
    await contained("x=>{let a=[];for(;;)a.push(new Uint8Array(1e6))}", "Threw", /ReferenceError: 'Uint8Array' is not defined/)
    await contained("x=>new ArrayBuffer(1e9)", "Threw", /ReferenceError: 'ArrayBuffer' is not defined/)
  })

  it("100 MB of output stops at the output cap", async () => {
    const failure = await contained("x=>{for(let i=0;i<100;i++)print('x'.repeat(1e6))}", "OutputLimit", /printed more than 65536 characters/)
    assert.isAtMost(failure!.output.length, 65_536)
    const lines = await contained("x=>{for(let i=0;i<1e8;i++)console.log('line '+i)}", "OutputLimit", /printed more than 65536 characters/)
    assert.isAtLeast(lines!.output.length, 65_500)
    assert.isAtMost(lines!.output.length, 65_536)
    // a program that catches the cap's error is stopped all the same
    await contained("x=>{for(;;)try{console.log('y')}catch(e){}}", "OutputLimit", /printed more than 65536 characters/)
    // and so is a 10 MB result
    await contained("x=>'x'.repeat(1e7)", "OutputLimit", /returned a result of 10000000 characters/)
  })

  it("Atomics.wait and SharedArrayBuffer are not there", async () => {
    await contained("x=>Atomics.wait(new Int32Array(new SharedArrayBuffer(16)),0,0)", "Threw", /'Atomics' is not defined/)
    await contained("x=>new SharedArrayBuffer(8)", "Threw", /'SharedArrayBuffer' is not defined/)
  })

  it("state does not leak from one evaluation to the next (prototype pollution)", async () => {
    const polluter = "(Object.prototype.polluted=1,Array.prototype.map=()=>[7],JSON.stringify=()=>'7',globalThis.hacked=1,x=>7)"
    const first = await withSandbox(runTests(polluter, tests))
    assert.strictEqual(first.passed, 1) // replacing JSON does not change how results are compared
    const clean = "x=>({}).polluted===undefined&&[1].map(y=>y+1)[0]===2&&JSON.stringify([1])==='[1]'&&typeof hacked==='undefined'?3*x+1:-1"
    const second = await withSandbox(runTests(functionExpression(clean), tests))
    assert.strictEqual(second.passed, 4)
    assertHostIntact()
  })

  it("strange unicode in output, results and errors stays data", async () => {
    const weird = "\\u202e\\ud800\\u0000\\u200b\\ufeff\\u2028\\ud83d\\ude00"
    const failure = await contained(`x=>{print('${weird}');throw new Error('${weird}')}`, "Threw", /threw Error: /)
    assert.isTrue(isWellFormed(failure!.message))
    assert.notMatch(failure!.message, /[\u0000\u200b\u202e\ufeff\u2028]/)
    assert.include(failure!.message, "\\u202e")
    assert.include(failure!.message, "😀")
    assert.isTrue(isWellFormed(failure!.output))
    // a result crosses whole, NUL and lone surrogates included: "a\0b" is not "a"
    const report = await withSandbox(runTests(functionExpression(`x=>x?'${weird}':'a\\u0000b'`), [{ args: [1], expected: "\u202e" }, { args: [0], expected: "a" }]))
    assert.strictEqual(report.passed, 0)
    assert.deepStrictEqual(report.results, ["\u202e\ud800\u0000\u200b\ufeff\u2028\ud83d\ude00", "a\u0000b"])
  })
})

describe("results are read with JSON semantics only", () => {
  const hello: ReadonlyArray<TestCase> = [{ args: [1], expected: "hello" }]

  it("a toJSON that throws is ResultNotSerializable, never read through toString", async () => {
    const completion = "x=>({toJSON(){throw new Error('no JSON')},toString(){return 'hello'}})"
    const s = await withSandbox(score(passesTests<null>(() => hello), null, completion))
    assert.strictEqual(s.value, 0)
    const failure = await withSandbox(Effect.flip(runTests(functionExpression(completion), hello)))
    assert.strictEqual(failure._tag === "ProgramError" ? failure.reason : failure._tag, "ResultNotSerializable")
    assert.include(failure.message, "no JSON")
    assertHostIntact()
    await assertNextIsNormal()
  })

  it("a getter that throws is ResultNotSerializable", () =>
    contained("x=>({get a(){throw new Error('getter')}})", "ResultNotSerializable", /returned a result JSON cannot read \(threw Error: getter\)/))

  it("a Proxy whose trap recurses overflows the stack while it is read: StackOverflow, not an empty string", () =>
    contained("x=>new Proxy({},{get(t,k,r){return r[k]}})", "StackOverflow", /test 1: overflowed its stack/))

  it("an async function is awaited; a promise that never settles or rejects is named", async () => {
    const report = await withSandbox(runTests(functionExpression("async x=>3*x+1"), tests))
    assert.strictEqual(report.passed, tests.length)
    await contained("x=>new Promise(()=>{})", "NeverSettled", /test 1: returned a promise that never settled/)
    await contained("async x=>{throw new Error('boom')}", "Threw", /test 1: returned a promise that rejected: Error: boom/)
  })

  it("jobs queued after the program returns run under its work budget: a job flood runs out of it", () =>
    contained("x=>{const f=()=>Promise.resolve().then(f);f();return 3*x+1}", "Timeout", /ran past its work budget of 20 /, { work: 20 }))

  it("a BigInt or a Symbol is ResultNotSerializable, not a silent undefined", async () => {
    await contained("x=>10n", "ResultNotSerializable", /test 1: returned a BigInt, which has no JSON value/)
    await contained("x=>Symbol('s')", "ResultNotSerializable", /test 1: returned a Symbol, which has no JSON value/)
    await contained("x=>({a:1n})", "ResultNotSerializable", /returned a result JSON cannot read \(threw TypeError/)
    const value = await withSandbox(Effect.flip(run({ source: "10n" })))
    assert.strictEqual(value._tag === "ProgramError" ? value.reason : value._tag, "ResultNotSerializable")
  })
})

describe("the sandbox", () => {
  it("runs programs off the main thread, at most `concurrency` at once", async () => {
    let ticks = 0
    const timer = setInterval(() => ticks++, 20)
    const started = Date.now()
    const busy = { source: "(n=>{let s=0;for(let i=0;i<n;i++)s+=i%7;return s})", calls: [[2e6]] }
    const evaluations = await Promise.all(Array.from({ length: 4 }, () => withSandbox(run(busy))))
    clearInterval(timer)
    const elapsed = Date.now() - started
    // the main thread kept ticking while the programs ran
    assert.isAtLeast(ticks, 3)
    // two at a time: the four evaluations' own times fit twice into the time they all took
    const busyMillis = evaluations.reduce((sum, e) => sum + e.millis, 0)
    assert.isAtMost(busyMillis, 2 * elapsed + 10)
  })

  it("a sandbox that cannot start masks the sample (InfraFault)", async () => {
    const broken = Scope.makeUnsafe()
    const unstartable = await Effect.runPromise(Scope.provide(make({ startTimeout: 1 }), broken))
    const s = await Effect.runPromise(Effect.provideService(score(reward, null, "x=>3*x+1"), Sandbox, unstartable))
    await Effect.runPromise(Scope.close(broken, Exit.void))
    assert.isUndefined(s.value)
    assert.match(s.masked ?? "", /tests: Unavailable: the sandbox did not start within 1ms/)
  })

  it("a program's value can be read without calls", async () => {
    const ev = await withSandbox(run({ source: "print('hi'); [1, 'two', { three: 3 }, null]" }))
    assert.deepStrictEqual(ev.value, [1, "two", { three: 3 }, null])
    assert.strictEqual(ev.output, "hi\n")
  })
})

describe("limits by the program's own work", () => {
  // s = 0 + 1 + ... : about one interrupt check per 5,000 iterations
  const loop = (n: number) => `(x=>{let s=0;for(let i=0;i<${n};i++)s+=i;return s})`
  const within = { source: loop(800_000), calls: [[0]], limits: { work: 200 } }
  const beyond = { source: loop(1_200_000), calls: [[0]], limits: { work: 200 } }

  /** A thread that spins until it is terminated: CPU load beside the sandbox's own workers. */
  const spinner = () => new Worker("for (;;) {}", { eval: true })

  it("the same program gets the same verdict and spends the same work with the machine's cores loaded", async () => {
    const quiet = await withSandbox(run(within))
    const quietBeyond = await withSandbox(Effect.flip(run(beyond)))
    const spinners = [spinner(), spinner()]
    try {
      const loaded = await withSandbox(run(within))
      const loadedBeyond = await withSandbox(Effect.flip(run(beyond)))
      assert.deepStrictEqual(loaded.results, quiet.results)
      assert.strictEqual(loaded.work, quiet.work)
      assert.isAtMost(quiet.work, 200)
      for (const failure of [quietBeyond, loadedBeyond]) {
        assert.strictEqual(failure._tag === "ProgramError" ? failure.reason : failure._tag, "Timeout")
        assert.match(failure.message, /ran past its work budget of 200 interrupt checks/)
      }
    } finally {
      await Promise.all(spinners.map((w) => w.terminate()))
    }
  })

  it("every test is counted against one budget for the whole evaluation", async () => {
    const one = await withSandbox(run({ ...within, calls: [[0]] }))
    const failure = await withSandbox(Effect.flip(run({ ...within, calls: [[0], [0]] })))
    assert.isAbove(one.work, 100) // so two tests need more than the budget of 200
    assert.strictEqual(failure._tag === "ProgramError" ? failure.reason : failure._tag, "Timeout")
    assert.match(failure.message, /^test 2: /)
  })
})

describe("failure reasons come from the engine, not from what a program throws", () => {
  it("a thrown look-alike of QuickJS' own errors is Threw", async () => {
    await contained("x=>{throw {name:'InternalError',message:'interrupted'}}", "Threw", /threw InternalError: interrupted/)
    await contained("x=>{throw new Error('out of memory')}", "Threw", /threw Error: out of memory/)
    await contained("x=>{throw new RangeError('stack overflow')}", "Threw", /threw RangeError: stack overflow/)
    // QuickJS' own InternalError constructor is out of the program's reach
    await contained("x=>{throw new InternalError('out of memory')}", "Threw", /ReferenceError: 'InternalError' is not defined/)
  })

  it("QuickJS' own errors are named by the engine, even when the program catches and rethrows them", async () => {
    await contained("x=>{try{'a'.repeat(2**29)}catch(e){throw e}}", "OutOfMemory", /out of memory \(32 MB\)/)
    await contained("x=>{const f=()=>f();try{f()}catch(e){throw e}}", "StackOverflow", /overflowed its stack/)
  })
})

describe("each test runs in a fresh context", () => {
  it("a counter, a closure over earlier inputs or a global set by one test is not seen by the next", async () => {
    const ones: ReadonlyArray<TestCase> = [{ args: [5], expected: 1 }, { args: [6], expected: 1 }, { args: [7], expected: 1 }]
    const counter = await withSandbox(runTests("(()=>{let n=0;return x=>++n})()", ones))
    assert.strictEqual(counter.passed, 3)
    const seen = await withSandbox(runTests("(()=>{const seen=[];return x=>(seen.push(x),seen.length)})()", ones))
    assert.strictEqual(seen.passed, 3)
    const global = await withSandbox(runTests(functionExpression("x=>(globalThis.calls=(globalThis.calls||0)+1)"), ones))
    assert.strictEqual(global.passed, 3)
  })

  it("the program's top-level code runs once per test, under the one budget", async () => {
    const ev = await withSandbox(run({ source: "print('loaded');(x=>x)", calls: [[1], [2]] }))
    assert.deepStrictEqual(ev.results, [1, 2])
    assert.strictEqual(ev.output, "loaded\nloaded\n")
  })
})

describe("Sandbox.layer", () => {
  it("refuses invalid options where the env is defined", () => {
    assert.throws(() => Sandbox.layer({ concurrency: 0 }), /concurrency must be a positive integer/)
    assert.throws(() => Sandbox.layer({ limits: { memoryMb: -1 } }), /limits.memoryMb must be a positive number/)
    assert.throws(() => Sandbox.layer({ limits: { work: 0 } }), /limits.work must be a positive integer/)
    assert.throws(() => Sandbox.layer({ limits: { work: 1.5 } }), /limits.work must be a positive integer/)
    assert.throws(() => Sandbox.layer({ limits: { backstop: "0 millis" } }), /limits.backstop must be a positive duration/)
    // the wall-clock limit of earlier versions is refused with what to set instead
    assert.throws(() => Sandbox.layer({ limits: { time: "1 second" } as never }), /limits.time .* is no longer read: set limits.work/)
    assert.throws(() => Sandbox.layer({ limits: { stackKb: 2048 } }), /limits.stackKb must be at most 1024/)
  })
})

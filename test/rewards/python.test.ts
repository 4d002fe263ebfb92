/**
 * The Python reward on the embedded sandbox (Pyodide in a worker): scores, the two kinds
 * of tests, program extraction, MBPP assertions, the work budget, fresh state, limits.
 */
import { assert, describe, it } from "@effect/vitest"
import fc from "fast-check"
import { Effect } from "effect"
import { score } from "gyre/testing"
import { normalizeOutput, PythonSandbox, pythonLiteral, pythonProgram, pythonTests, runPythonTests, testOfAssert, type PythonTests } from "../../rewards/python.ts"
import { withSandbox } from "./pythonSandbox.ts"


// f(x) = 3x + 1
const linear: PythonTests = { entry: "f", calls: [{ args: [2], expected: 7 }, { args: [3], expected: 10 }, { args: [0], expected: 1 }, { args: [-4], expected: -11 }] }
const reward = pythonTests<null>(() => linear)
const fence = (code: string) => "Here is my solution:\n```python\n" + code + "\n```\nIt works."

describe("pythonTests", () => {
  it("scores the fraction of function tests passed", async () => {
    const completions = [fence("def f(x):\n    return 3*x+1"), fence("def f(x):\n    return 7"), fence("def f(x):\n    return 3*x+1 if x > 0 else 0"), "def f(x): return str(3*x+1)"]
    const scores = await Promise.all(completions.map((c) => withSandbox(score(reward, null, c))))
    assert.deepStrictEqual(scores.map((s) => s.value), [1, 0.25, 0.5, 0])
  })

  it("stdin/stdout cases compare output up to trailing whitespace", async () => {
    const io: PythonTests = { io: [{ stdin: "2 3\n", stdout: "5\n" }, { stdin: "10 -4\n", stdout: "6" }, { stdin: "2 2\n", stdout: "4" }] }
    const sum = pythonTests<null>(() => io)
    const right = await withSandbox(score(sum, null, fence("a, b = map(int, input().split())\nprint(a + b, '  ')")))
    assert.strictEqual(right.value, 1)
    const wrong = await withSandbox(score(sum, null, fence("a, b = map(int, input().split())\nprint(a * b)")))
    assert.strictEqual(wrong.value, 1 / 3) // only 2*2 = 2+2
    // sys.stdin.buffer and sys.exit(0) after printing work as in CPython
    const buffered = await withSandbox(score(sum, null, fence("import sys\na, b = map(int, sys.stdin.buffer.read().split())\nprint(a + b)\nsys.exit(0)")))
    assert.strictEqual(buffered.value, 1)
  })

  it("a program that fails scores the penalty with its reason noted; a problem without tests is not applicable", async () => {
    const threw = await withSandbox(score(reward, null, fence("def f(x):\n    return 1 / 0")))
    assert.strictEqual(threw.value, 0)
    assert.match(threw.notes?.["tests"]?.[0] ?? "", /^Threw: the program test 1: threw ZeroDivisionError: division by zero/)
    const missing = await withSandbox(score(reward, null, fence("def g(x):\n    return 3*x+1")))
    assert.match(missing.notes?.["tests"]?.[0] ?? "", /^NotAFunction: the program defines no function f/)
    const syntax = await withSandbox(score(reward, null, fence("def f(x) return x")))
    assert.match(syntax.notes?.["tests"]?.[0] ?? "", /^Threw: the program does not compile/)
    const none = await withSandbox(score(pythonTests<null>(() => ({ entry: "f", calls: [] })), null, "def f(): pass"))
    assert.isUndefined(none.value)
  })

  it("results are JSON: tuples are lists, sets are sorted, dict keys are text; other objects have no value", async () => {
    const run = (body: string, expected: unknown) => withSandbox(runPythonTests(`def f():\n    return ${body}`, { entry: "f", calls: [{ args: [], expected: expected as never }] }))
    assert.strictEqual((await run("(1, [2, 'a'])", [1, [2, "a"]])).passed, 1)
    assert.strictEqual((await run("{3, 1, 2}", [1, 2, 3])).passed, 1)
    assert.strictEqual((await run("{1: None, 'b': True}", { "1": null, b: true })).passed, 1)
    assert.strictEqual((await run("2.5", 2.5)).passed, 1)
    const failure = await withSandbox(Effect.flip(runPythonTests("def f():\n    return object()", { entry: "f", calls: [{ args: [], expected: null }] })))
    assert.strictEqual(failure._tag === "PythonProgramError" ? failure.reason : failure._tag, "ResultNotSerializable")
    const nan = await withSandbox(Effect.flip(runPythonTests("def f():\n    return float('nan')", { entry: "f", calls: [{ args: [], expected: null }] })))
    assert.strictEqual(nan._tag === "PythonProgramError" ? nan.reason : nan._tag, "ResultNotSerializable")
  })

  it("a program's __main__ block does not run under function tests", async () => {
    const s = await withSandbox(score(reward, null, fence("def f(x):\n    return 3*x+1\nif __name__ == '__main__':\n    input()")))
    assert.strictEqual(s.value, 1)
  })
})

describe("fresh state", () => {
  it("each test loads the program afresh: a counter or a global does not carry over", async () => {
    const ones: PythonTests = { entry: "f", calls: [{ args: [5], expected: 1 }, { args: [6], expected: 1 }, { args: [7], expected: 1 }] }
    const counter = await withSandbox(runPythonTests("n = 0\ndef f(x):\n    global n\n    n += 1\n    return n", ones))
    assert.strictEqual(counter.passed, 3)
  })

  it("what one evaluation changes in modules, builtins and files does not reach the next", async () => {
    const polluter = "import builtins, math, json\nbuiltins.len = lambda x: 99\nmath.pi = 3\njson.loads = None\nimport sys\nsys.modules['evil'] = 1\nopen('/tmp/left', 'w').write('x')\ndef f(x): return 0"
    await withSandbox(runPythonTests(polluter, linear))
    const probe = "import math, json, sys, os\ndef f():\n    return [len([1]), math.pi > 3.1, json.loads('1'), 'evil' in sys.modules, os.path.exists('/tmp/left')]"
    const report = await withSandbox(runPythonTests(probe, { entry: "f", calls: [{ args: [], expected: [1, true, 1, false, false] }] }))
    assert.deepStrictEqual(report.evaluation.results, [[1, true, 1, false, false]])
  })
})

describe("the work budget", () => {
  const loop = (n: number) => `def f(x):\n    s = 0\n    for i in range(${n}):\n        s += i\n    return s`
  const one: PythonTests = { entry: "f", calls: [{ args: [0], expected: 0 }] }

  it("counts jumps and calls, the same on every run; past it the program is stopped (Timeout)", async () => {
    const first = await withSandbox(runPythonTests(loop(10_000), one, { work: 20_000 }))
    const second = await withSandbox(runPythonTests(loop(10_000), one, { work: 20_000 }))
    assert.strictEqual(first.evaluation.work, second.evaluation.work)
    assert.isAtLeast(first.evaluation.work!, 10_000)
    const failure = await withSandbox(Effect.flip(runPythonTests(loop(30_000), one, { work: 20_000 })))
    assert.strictEqual(failure._tag === "PythonProgramError" ? failure.reason : failure._tag, "Timeout")
    assert.match(failure.message, /ran past its work budget of 20000 jumps and calls/)
  })
})

describe("program extraction and assertions", () => {
  it("takes the last ```python block, else a bare block, else the whole text", () => {
    assert.strictEqual(pythonProgram("a\n```python\nx = 1\n```\nb\n```py\nx = 2\n```"), "x = 2\n")
    assert.strictEqual(pythonProgram("```\nx = 3\n```"), "x = 3\n")
    assert.strictEqual(pythonProgram("x = 4"), "x = 4")
    assert.strictEqual(pythonProgram("```python\nx = 1\n```\n```python\nx = 5"), "x = 5") // cut at the token limit
  })

  it("reads MBPP assertions into tests, and drops the ones it cannot read", () => {
    assert.deepStrictEqual(testOfAssert("assert similar_elements((3, 4, 5, 6),(5, 7, 4, 10)) == (4, 5)"), { entry: "similar_elements", args: [[3, 4, 5, 6], [5, 7, 4, 10]], expected: [4, 5] })
    assert.deepStrictEqual(testOfAssert("assert remove_Occ(\"hello\",\"l\") == \"heo\""), { entry: "remove_Occ", args: ["hello", "l"], expected: "heo" })
    assert.deepStrictEqual(testOfAssert("assert is_not_prime(2) == False"), { entry: "is_not_prime", args: [2], expected: false })
    assert.deepStrictEqual(testOfAssert("assert f({'a': 1}, -2.5) == {1, 3}"), { entry: "f", args: [{ a: 1 }, -2.5], expected: [1, 3] })
    assert.isUndefined(testOfAssert("assert set(f(1)) == set([1])"))
    assert.isUndefined(testOfAssert("assert math.isclose(f(1), 2.0)"))
    assert.strictEqual(pythonLiteral("'it\\'s'"), "it's")
  })

  it("law: a JSON value written as a Python literal (tuples for some arrays) reads back as itself", () => {
    const pyRepr = (v: unknown, tuple: boolean): string => {
      if (v === null) return "None"
      if (v === true) return "True"
      if (v === false) return "False"
      if (typeof v === "number") return String(v)
      if (typeof v === "string") return JSON.stringify(v)
      if (Array.isArray(v)) return tuple ? `(${v.map((x) => pyRepr(x, !tuple)).join(", ")}${v.length === 1 ? "," : ""})` : `[${v.map((x) => pyRepr(x, !tuple)).join(", ")}]`
      return `{${Object.entries(v as object).map(([k, x]) => `${JSON.stringify(k)}: ${pyRepr(x, tuple)}`).join(", ")}}`
    }
    const json = fc.letrec((tie) => ({
      value: fc.oneof({ depthSize: "small" }, fc.constant(null), fc.boolean(), fc.integer({ min: -1e9, max: 1e9 }), fc.double({ noNaN: true, noDefaultInfinity: true }).filter((x) => !Object.is(x, -0) && !(Number.isInteger(x) && !Number.isSafeInteger(x))), fc.string(), fc.array(tie("value"), { maxLength: 4 }), fc.dictionary(fc.string(), tie("value"), { maxKeys: 3 })),
    })).value
    fc.assert(fc.property(json, fc.boolean(), (v, tuple) => {
      assert.deepStrictEqual(pythonLiteral(pyRepr(v, tuple)), v as never)
      assert.deepStrictEqual(testOfAssert(`assert f(${pyRepr(v, tuple)}, 1) == ${pyRepr(v, !tuple)}`), { entry: "f", args: [v as never, 1], expected: v as never })
    }), { numRuns: 300 })
  })

  it("normalizes output: trailing spaces and blank lines", () => {
    assert.strictEqual(normalizeOutput("a  \r\nb\n\n"), "a\nb")
  })
})

describe("PythonSandbox.layer", () => {
  it("refuses invalid options where the env is defined", () => {
    assert.throws(() => PythonSandbox.layer({ concurrency: 0 }), /concurrency must be a positive integer/)
    assert.throws(() => PythonSandbox.layer({ limits: { work: 0 } }), /limits.work must be a positive integer/)
    assert.throws(() => PythonSandbox.layer({ limits: { memoryMb: 4096 } }), /limits.memoryMb must be at most 2048/)
    assert.throws(() => pythonTests(() => linear, { limits: { backstop: "0 millis" } }), /limits.backstop must be a positive duration/)
    assert.throws(() => pythonTests(() => linear, { penalty: Number.NaN }), /penalty must be a finite number/)
  })
})

/**
 * Hostile Python programs in the embedded sandbox: each is contained (it scores 0 with its
 * reason), nothing reaches the host (no file written, no process started, no connection
 * made), and the next evaluation is normal.
 */
import { createServer } from "node:net"
import { existsSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { score } from "gyre/testing"
import { type PythonLimits, type PythonProgramError, pythonTests, runPythonTests, type PythonTests } from "../../rewards/python.ts"
import { withSandbox } from "./pythonSandbox.ts"


// f(x) = 3x + 1
const tests: PythonTests = { entry: "f", calls: [{ args: [2], expected: 7 }, { args: [3], expected: 10 }, { args: [0], expected: 1 }, { args: [-4], expected: -11 }] }
const reward = pythonTests<null>(() => tests)
const GOOD = "def f(x):\n    return 3*x+1\n"

/** A host path a program may try to write: it must never appear. */
const HOST_FILE = join(tmpdir(), `gyre-python-hostile-${process.pid}`)
afterAll(() => rmSync(HOST_FILE, { force: true }))

const assertHostIntact = () => {
  assert.isFalse(existsSync(HOST_FILE), `${HOST_FILE} was written`)
  assert.strictEqual(typeof process.pid, "number")
}

/** A normal program, run after a hostile one, scores 1. */
const assertNextIsNormal = async () => {
  const s = await withSandbox(score(reward, null, GOOD))
  assert.strictEqual(s.value, 1)
}

/** Runs a hostile program: it scores 0, unmasked, and its note names `reason` and a message matching `message`. */
const contained = async (program: string, reason: PythonProgramError["reason"], message: RegExp, limits?: Partial<PythonLimits>) => {
  const s = await withSandbox(score(pythonTests<null>(() => tests, limits === undefined ? {} : { limits }), null, program))
  assert.strictEqual(s.value, 0, `${program} scored ${s.value}`)
  assert.isUndefined(s.masked)
  const note = s.notes?.["tests"]?.[0] ?? ""
  assert.match(note, new RegExp(`^${reason}: the program `))
  assert.match(note, message)
  assertHostIntact()
  await assertNextIsNormal()
}

describe("endless work", () => {
  it("an endless loop runs out of its work budget, even one that catches every exception", async () => {
    await contained("def f(x):\n    while True:\n        pass", "Timeout", /work budget of 200000 jumps and calls/, { work: 200_000 })
    const catcher = "def f(x):\n    while True:\n        try:\n            while True:\n                pass\n        except BaseException:\n            pass"
    await contained(catcher, "Timeout", /work budget/, { work: 200_000 })
  })

  it("recursion to the limit that catches everything and recurses again runs out of its budget: each exception counts 100", () =>
    contained("def g():\n    try:\n        g()\n    except BaseException:\n        g()\ndef f(x):\n    g()", "Timeout", /work budget of 200000 jumps and calls \(an exception counts 100\)/, { work: 200_000 }))

  it("a long call inside C code, which the budget does not see, is stopped with its worker at the backstop", () =>
    contained("def f(x):\n    return len(str(7 ** 10 ** 8))", "Timeout", /backstop of 1000 ms .* worker was stopped/, { backstop: "1 second" }))
})

describe("memory and stack", () => {
  it("a memory bomb runs out of the sandbox's memory", async () => {
    await contained("def f(x):\n    a = []\n    while True:\n        a.append(' ' * 10**6)", "OutOfMemory", /ran out of memory \(32 MB\)/, { memoryMb: 32 })
    await contained("x = bytearray(600 * 2**20)\ndef f(x): return 0", "OutOfMemory", /ran out of memory \(64 MB\)/, { memoryMb: 64 })
    // files live in memory too, and count against the same limit
    await contained("def f(x):\n    with open('/tmp/big', 'wb') as o:\n        for _ in range(100):\n            o.write(b'0' * 2**20)", "OutOfMemory", /ran out of memory \(32 MB\)/, { memoryMb: 32 })
  })

  it("deep recursion overflows the stack, even past a raised recursion limit", async () => {
    await contained("def f(x):\n    return f(x) + 1", "StackOverflow", /overflowed its stack/)
    await contained("import sys\nsys.setrecursionlimit(10**6)\ndef f(x):\n    return f(x) + 1", "StackOverflow", /overflowed/)
  })
})

describe("the host is out of reach", () => {
  it("no process can be started: os.system and its kin are gone, subprocess fails", async () => {
    await contained(`import os\nos.system('touch ${HOST_FILE}')\n${GOOD}`, "Threw", /AttributeError: module 'os' has no attribute 'system'/)
    await contained(`import subprocess\nsubprocess.run(['touch', '${HOST_FILE}'])\n${GOOD}`, "Threw", /OSError: .*does not support processes/)
    await contained(`import os\nos.posix_spawn('/bin/touch', ['touch', '${HOST_FILE}'], {})\n${GOOD}`, "Threw", /AttributeError/)
    await contained(`import os\nos._exit(0)\n${GOOD}`, "Threw", /AttributeError: module 'os' has no attribute '_exit'/)
  })

  it("ctypes is refused, and libc's system() reached around the refusal starts nothing", async () => {
    await contained(`import ctypes\n${GOOD}`, "Threw", /ImportError: import of ctypes is not allowed/)
    const around = `import sys\nsys.meta_path.pop(0)\nimport ctypes\nctypes.CDLL(None).system(b'touch ${HOST_FILE}')\n${GOOD}`
    const s = await withSandbox(score(reward, null, around))
    assert.strictEqual(s.value, 0)
    assertHostIntact()
    await assertNextIsNormal()
  })

  it("host files are neither read nor written: the file system is the sandbox's own", async () => {
    await contained(`open('/etc/passwd').read()\n${GOOD}`, "Threw", /FileNotFoundError/)
    await contained(`open('${HOST_FILE}', 'w').write('x')\nopen('/lib/evil.py', 'w').write('x')\n${GOOD}`, "Threw", /Read-only file system: '\/lib\/evil.py'/)
    const listing = await withSandbox(runPythonTests("import os\ndef f():\n    return sorted(os.listdir('/'))", { entry: "f", calls: [{ args: [], expected: null }] }))
    assert.notInclude(listing.evaluation.results[0] as Array<string>, "work")
    assert.notInclude(listing.evaluation.results[0] as Array<string>, "etc")
  })

  it("no connection leaves the sandbox", async () => {
    let connections = 0
    const server = createServer((socket) => (connections++, socket.destroy()))
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
    const port = (server.address() as { port: number }).port
    try {
      await contained(`import socket\nsocket.create_connection(('127.0.0.1', ${port}), timeout=2)\n${GOOD}`, "Threw", /OSError|ConnectionError|TimeoutError/)
      await contained(`import urllib.request\nurllib.request.urlopen('http://127.0.0.1:${port}/')\n${GOOD}`, "Threw", /Error/)
      assert.strictEqual(connections, 0)
    } finally {
      server.close()
    }
  })

  it("the bridges to JavaScript are refused, and JavaScript reached around the refusal can run no text", async () => {
    await contained(`import js\n${GOOD}`, "Threw", /ImportError: import of js is not allowed/)
    await contained(`import pyodide\n${GOOD}`, "Threw", /ImportError: import of pyodide is not allowed/)
    const runJs = `import sys\nsys.meta_path.pop(0)\nfrom pyodide.code import run_js\nrun_js("require('fs').writeFileSync('${HOST_FILE}', 'x')")\n${GOOD}`
    assert.strictEqual((await withSandbox(score(reward, null, runJs))).value, 0)
    const toJs = `import sys\nsys.meta_path.pop(0)\nfrom pyodide.ffi import to_js\na = to_js([1])\na.constructor.constructor("process.mainModule.require('fs').writeFileSync('${HOST_FILE}', 'x')")()\n${GOOD}`
    assert.strictEqual((await withSandbox(score(reward, null, toJs))).value, 0)
    assertHostIntact()
    await assertNextIsNormal()
  })
})

describe("output", () => {
  it("a flood of output stops at the output cap, even when the program catches the error or prints from C", async () => {
    await contained("def f(x):\n    while True:\n        print('x' * 1000)", "OutputLimit", /printed more than 65536 characters/)
    const flood = await withSandbox(Effect.flip(runPythonTests("def f(x):\n    while True:\n        print('x' * 1000)", tests)))
    assert.isAtMost(flood._tag === "PythonProgramError" ? flood.output.length : -1, 65_536)
    assert.isAtLeast(flood._tag === "PythonProgramError" ? flood.output.length : -1, 64_000)
    await contained("def f(x):\n    while True:\n        try:\n            print('y')\n        except BaseException:\n            pass", "OutputLimit", /printed more than 65536/)
    await contained("def f(x):\n    list(map(print, range(10**9)))", "OutputLimit", /printed more than 65536/)
    await contained("import sys\ndef f(x):\n    while True:\n        sys.stderr.write('e' * 1000)", "OutputLimit", /printed more than 65536/)
    // what a flood left in a stream's buffer does not reach the next program's output
    const next = await withSandbox(runPythonTests("print('clean')\n" + GOOD, tests))
    assert.strictEqual(next.evaluation.output, "clean\n".repeat(4))
  })
})

describe("tampering with the harness", () => {
  it("sys.exit(0) before the tests run is no pass", async () => {
    await contained(`import sys\nsys.exit(0)\n${GOOD}`, "Exited", /exited \(sys.exit\) before its tests were done/)
    await contained("def f(x):\n    raise SystemExit(0)", "Exited", /test 1: exited/)
  })

  it("an object whose __eq__ is always true has no JSON value", () =>
    contained("class Any:\n    def __eq__(self, other): return True\n    def __hash__(self): return 0\ndef f(x):\n    return Any()", "ResultNotSerializable", /returned a Any, which has no JSON value/))

  it("subclasses of int, str or list that claim equality are no pass", () =>
    contained("class I(int):\n    def __eq__(self, o): return True\ndef f(x):\n    return I(0)", "ResultNotSerializable", /returned a I/))

  it("redefining print, the comparison or builtins changes nothing but the program's own answers", async () => {
    const tamper = [
      "import builtins, json, operator",
      "builtins.print = lambda *a, **k: None",
      "builtins.enumerate = lambda xs: [(0, xs[0])]",
      "builtins.isinstance = lambda a, b: True",
      "builtins.str = lambda x='': '7'",
      "builtins.ValueError = builtins.SyntaxError = builtins.BaseException = builtins.set = None",
      "json.dumps = lambda *a, **k: '7'",
      "operator.eq = lambda a, b: True",
      "def f(x):\n    return 7",
    ].join("\n")
    const s = await withSandbox(score(reward, null, tamper))
    // only f(2) = 7: every test ran, each compared on the host
    assert.strictEqual(s.value, 0.25, `scored ${JSON.stringify(s)}`)
    assertHostIntact()
    await assertNextIsNormal()
  })

  it("a program cannot switch off the work budget", async () => {
    await contained("import sys\ndef f(x):\n    sys.monitoring.set_events(5, 0)\n    while True:\n        pass", "Threw", /AttributeError: module 'sys' has no attribute 'monitoring'/)
    await contained("import sys\nsys.settrace(None)\nsys.setprofile(None)\ndef f(x):\n    while True:\n        pass", "Timeout", /work budget/, { work: 100_000 })
  })
})

/**
 * The Python reward on the E2B backend: the real `e2b` SDK against a fake E2B on loopback
 * (E2bFake.ts, written from E2B's API references; its sandboxes run commands with this
 * machine's bash and python3). Programs score as on the other backends; an outage (refused,
 * 5xx, 429, no answer, a sandbox's proxy failing) masks the sample after retries and never
 * scores it 0; every sandbox is killed at the end of its evaluation.
 */
import { readFileSync } from "node:fs"
import { createServer } from "node:net"
import { afterAll, afterEach, assert, describe, it } from "@effect/vitest"
import { ConfigProvider, Effect, Exit, Fiber, Layer, Scope } from "effect"
import { score } from "gyre/testing"
import { PythonSandbox, pythonTests, type PythonTests } from "../../../rewards/python.ts"
import { type E2bOptions, makeE2b } from "../../../rewards/python/E2b.ts"
import { e2bPeerRange } from "../../../rewards/python/E2bSdk.ts"
import { startE2bFake } from "./E2bFake.ts"

const fake = await startE2bFake()
afterAll(() => fake.close())
afterEach(() => {
  fake.mode = "normal"
  fake.failFirst = 0
})

const linear: PythonTests = { entry: "f", calls: [{ args: [2], expected: 7 }, { args: [3], expected: 10 }, { args: [0], expected: 1 }, { args: [-4], expected: -11 }] }
const reward = pythonTests<null>(() => linear, { backoff: { base: "10 millis", max: "20 millis" } })
const good = "def f(x):\n    return 3*x+1"
const e2b = (options: E2bOptions = {}): E2bOptions => ({ apiKey: fake.apiKey, apiUrl: fake.apiUrl, sandboxUrl: fake.sandboxUrl, ...options })
const service = (options: E2bOptions = {}) => PythonSandbox.layer({ backend: { e2b: e2b(options) } })
const onService = <A, E>(effect: Effect.Effect<A, E, PythonSandbox>, layer = service()) => Effect.runPromise(Effect.provide(effect, layer))
const note = (s: { notes?: Record<string, ReadonlyArray<string>> }) => s.notes?.["tests"]?.[0] ?? ""

/** A closed port: nothing listens there, connections are refused. */
const closedPort = async () => {
  const s = createServer()
  await new Promise<void>((resolve) => s.listen(0, "127.0.0.1", resolve))
  const port = (s.address() as { port: number }).port
  await new Promise<void>((resolve) => s.close(() => resolve()))
  return port
}

describe("E2B backend", () => {
  it("scores function tests as the other backends do, through one sandbox per program, each killed", async () => {
    const before = fake.creates.length
    const programs = [good, "def f(x):\n    return 7", "```python\ndef f(x):\n    return 3*x+1 if x > 0 else 0\n```"]
    const scores = await Promise.all(programs.map((c) => onService(score(reward, null, c))))
    assert.deepStrictEqual(scores.map((s) => s.value), [1, 0.25, 0.5])
    const created = fake.creates.slice(before)
    assert.strictEqual(created.length, 3)
    assert.strictEqual(created[0]!["templateID"], "base")
    assert.strictEqual(created[0]!["allow_internet_access"], false)
    // the sandbox's life covers the run and the waits: E2B ends it if gyre cannot
    assert.isTrue(Number.isInteger(created[0]!["timeout"]) && (created[0]!["timeout"] as number) >= 12)
    assert.deepStrictEqual(fake.live(), [])
    assert.include(fake.commands.at(-1)!, "timeout -k 1 10s python3 harness.py")
    assert.include(fake.commands.at(-1)!, "ulimit -d 131072")
    // expected values never leave the host
    const harness = fake.files.get("/tmp/gyre/harness.py")!
    assert.include(harness, "def f(x):")
    assert.notInclude(harness, "-11")
  })

  it("runs each stdin case as its own command, the input in a file", async () => {
    const io = pythonTests<null>(() => ({ io: [{ stdin: "2 3\n", stdout: "5" }, { stdin: "4 4\n", stdout: "8" }, { stdin: "1 1\n", stdout: "3" }] }))
    const before = fake.commands.length
    const s = await onService(score(io, null, "a, b = map(int, input().split())\nprint(a + b)"))
    assert.closeTo(s.value!, 2 / 3, 1e-9)
    assert.deepStrictEqual(fake.commands.slice(before).filter((c) => c.includes("main.py")).map((c) => c.split("< ")[1]), ["stdin0.txt", "stdin1.txt", "stdin2.txt"])
    assert.strictEqual(fake.files.get("/tmp/gyre/stdin1.txt"), "4 4\n")
    assert.deepStrictEqual(fake.live(), [])
  })

  it("a program's own failure scores 0 with its reason", async () => {
    const threw = await onService(score(reward, null, "def f(x):\n    return 1 / 0"))
    assert.strictEqual(threw.value, 0)
    assert.match(note(threw), /^Threw: the program test 1: threw ZeroDivisionError/)
    const exited = await onService(score(reward, null, "import sys\nsys.exit(0)\ndef f(x):\n    return 3*x+1"))
    assert.strictEqual(exited.value, 0)
    assert.match(note(exited), /^Exited: /)
    const fooled = await onService(score(reward, null, "class A:\n    def __eq__(s, o): return True\ndef f(x):\n    return A()"))
    assert.match(note(fooled), /^ResultNotSerializable: /)
    const io = pythonTests<null>(() => ({ io: [{ stdin: "", stdout: "1" }] }))
    const crashed = await onService(score(io, null, "raise ValueError('no')"))
    assert.strictEqual(crashed.value, 0)
    assert.match(note(crashed), /^Threw: the program case 1: exited with status 1: .*ValueError: no/)
  })

  it("the time limit, memory and output are kept in the sandbox", async () => {
    const looped = await onService(score(reward, null, "def f(x):\n    while True:\n        pass"), service({ limits: { serviceTimeout: 1 } }))
    assert.strictEqual(looped.value, 0)
    assert.match(note(looped), /^Timeout: the program ran past the service's time limit of 1 s/)
    const hungry = await onService(score(reward, null, "def f(x):\n    return len(bytearray(512 * 1024 * 1024))"))
    assert.strictEqual(hungry.value, 0)
    assert.match(note(hungry), /^OutOfMemory: /)
    const io = pythonTests<null>(() => ({ io: [{ stdin: "", stdout: "1" }] }))
    const hungryMain = await onService(score(io, null, "x = bytearray(512 * 1024 * 1024)"))
    assert.match(note(hungryMain), /^OutOfMemory: the program case 1: ran out of memory \(128 MB\)/)
    const flood = await onService(score(io, null, "while True:\n    print('x' * 1000)"), service({ limits: { outputChars: 10_000 } }))
    assert.strictEqual(flood.value, 0)
    assert.match(note(flood), /^OutputLimit: the program case 1: printed more than 10000 characters/)
    const floodCalls = await onService(score(reward, null, "def f(x):\n    while True:\n        print('x' * 1000)"), service({ limits: { outputChars: 10_000, resultChars: 100 } }))
    assert.match(note(floodCalls), /^OutputLimit: the program printed more than 10000 characters/)
    assert.deepStrictEqual(fake.live(), [])
  })
})

describe("an E2B outage masks the sample, after retries", () => {
  it("connection refused", async () => {
    const s = await onService(score(reward, null, good), service({ apiUrl: `http://127.0.0.1:${await closedPort()}` }))
    assert.isUndefined(s.value)
    assert.match(s.masked ?? "", /Unavailable: E2B could not create a sandbox/)
  })

  it("5xx and 429 from the control plane, retried then masked", async () => {
    fake.mode = "create503"
    const before = fake.creates.length
    const s503 = await onService(score(reward, null, good))
    assert.isUndefined(s503.value)
    assert.match(s503.masked ?? "", /could not create a sandbox: ServiceBusyError/)
    assert.strictEqual(fake.creates.length - before, 3) // the first try and 2 retries
    fake.mode = "create429"
    const s429 = await onService(score(reward, null, good))
    assert.isUndefined(s429.value)
    assert.match(s429.masked ?? "", /RateLimitError/)
  })

  it("no answer in time: a create that hangs, a command that never starts", async () => {
    fake.mode = "createHang"
    const hung = await onService(score(reward, null, good), service({ requestSlackSeconds: 0.3 }))
    assert.isUndefined(hung.value)
    assert.match(hung.masked ?? "", /could not create a sandbox/)
    fake.mode = "startHang"
    const stuck = await onService(score(reward, null, good), service({ requestSlackSeconds: 0.3 }))
    assert.isUndefined(stuck.value)
    assert.match(stuck.masked ?? "", /Unavailable: E2B /)
    assert.deepStrictEqual(fake.live(), [])
  })

  it("a sandbox's proxy that fails (502) masks, and the sandbox is still killed", async () => {
    fake.mode = "envd502"
    const killed = fake.killed.length
    const s = await onService(score(reward, null, good))
    assert.isUndefined(s.value)
    assert.match(s.masked ?? "", /Unavailable: E2B could not check the sandbox's template: /)
    assert.strictEqual(fake.killed.length - killed, 3)
    assert.deepStrictEqual(fake.live(), [])
  })

  it("a transient outage is retried and the sample scored", async () => {
    fake.failFirst = 1
    const s = await onService(score(reward, null, good))
    assert.strictEqual(s.value, 1)
  })

  it("a template without python3 (or timeout) masks, naming what it lacks, and never scores", async () => {
    const s = await onService(score(reward, null, good), service({ python: "python9" }))
    assert.isUndefined(s.value)
    assert.match(s.masked ?? "", /Protocol: E2B template "base" has no python9: pythonTests needs bash, python9 and coreutils' timeout/)
    assert.deepStrictEqual(fake.live(), [])
  })

  it("a wrong API key masks, never scores", async () => {
    const s = await onService(score(reward, null, good), service({ apiKey: "e2b_wrong" }))
    assert.isUndefined(s.value)
    assert.match(s.masked ?? "", /AuthenticationError/)
  })
})

describe("sandbox lifecycle", () => {
  it("at most `concurrency` sandboxes live at once", async () => {
    fake.maxLive = 0
    const slow = "import time\ntime.sleep(0.3)\ndef f(x):\n    return 3*x+1"
    const layer = service({ concurrency: 2 })
    const scores = await onService(Effect.all([0, 1, 2, 3, 4].map(() => score(reward, null, slow)), { concurrency: "unbounded" }), layer)
    assert.deepStrictEqual(scores.map((s) => s.value), [1, 1, 1, 1, 1])
    assert.strictEqual(fake.maxLive, 2)
  })

  it("an interrupted evaluation, and a closed layer, kill their sandboxes", async () => {
    const scope = Scope.makeUnsafe()
    const sandbox = await Effect.runPromise(Scope.provide(makeE2b(e2b()), scope))
    // each waits until its program runs in its sandbox
    const running = async (commands: number) => {
      while (fake.commands.length === commands) await new Promise((r) => setTimeout(r, 20))
      assert.strictEqual(fake.live().length, 1)
    }
    const sleeper = { source: "import time\ntime.sleep(60)", stdin: [""] }
    const first = fake.commands.length
    const fiber = Effect.runFork(sandbox.run(sleeper))
    await running(first)
    await Effect.runPromise(Fiber.interrupt(fiber))
    assert.deepStrictEqual(fake.live(), [])
    const next = fake.commands.length
    const second = Effect.runFork(sandbox.run(sleeper))
    await running(next)
    await Effect.runPromise(Scope.close(scope, Exit.void))
    await Effect.runPromise(Fiber.interrupt(second))
    assert.deepStrictEqual(fake.live(), [])
  })
})

describe("configuration", () => {
  it("GYRE_PYTHON_BACKEND=e2b with E2B_API_KEY (and the SDK's URL settings) choose E2B", async () => {
    const before = fake.creates.length
    const config = ConfigProvider.layer(ConfigProvider.fromUnknown({ GYRE_PYTHON_BACKEND: "e2b", E2B_API_KEY: fake.apiKey, E2B_API_URL: fake.apiUrl, E2B_SANDBOX_URL: fake.sandboxUrl }))
    const s = await onService(score(reward, null, good), PythonSandbox.layer().pipe(Layer.provide(config)))
    assert.strictEqual(s.value, 1)
    assert.strictEqual(fake.creates.length - before, 1)
  })

  it("no API key is refused, naming the setting", async () => {
    const config = ConfigProvider.layer(ConfigProvider.fromUnknown({}))
    const exit = await Effect.runPromiseExit(Effect.provide(Effect.void, PythonSandbox.layer({ backend: { e2b: {} } }).pipe(Layer.provide(config))))
    assert.isTrue(Exit.isFailure(exit))
    assert.match(String(Exit.isFailure(exit) ? exit.cause : ""), /needs an API key: .* E2B_API_KEY/)
  })

  it("a project without the e2b package gets the install command", async () => {
    // what Node throws for an import of a package that is not installed
    const notInstalled = () => Promise.reject(Object.assign(new Error("Cannot find package 'e2b' imported from /project/node_modules/gyre/dist/rewards/python/E2bSdk.js"), { code: "ERR_MODULE_NOT_FOUND" }))
    const exit = await Effect.runPromiseExit(Effect.scoped(makeE2b(e2b(), notInstalled)))
    assert.isTrue(Exit.isFailure(exit))
    assert.include(String(Exit.isFailure(exit) ? exit.cause : ""), `needs the "e2b" package, an optional peer of gyre: npm install "e2b@${e2bPeerRange}"`)
    const pkg = JSON.parse(readFileSync(new URL("../../../package.json", import.meta.url), "utf8")) as { peerDependencies: Record<string, string>; peerDependenciesMeta: Record<string, { optional?: boolean }> }
    assert.strictEqual(pkg.peerDependencies["e2b"], e2bPeerRange)
    assert.isTrue(pkg.peerDependenciesMeta["e2b"]?.optional)
  })

  it("invalid options throw where the env is defined", () => {
    assert.throws(() => PythonSandbox.layer({ backend: { e2b: e2b({ concurrency: 0 }) } }), /concurrency must be a positive integer/)
    assert.throws(() => PythonSandbox.layer({ backend: { e2b: e2b({ python: "python3; rm -rf /" }) } }), /e2b.python must be a command name/)
  })
})

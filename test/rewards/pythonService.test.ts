/**
 * The Python reward on the Sandbox Fusion backend, against a fake server written from
 * Sandbox Fusion's API reference (test/fakes/SandboxFusionFake.ts), which runs the code in
 * the embedded sandbox. Programs score as on the embedded backend; a service outage
 * (refused, 5xx, no answer, the service's own error) masks the sample after retries and
 * never scores it 0.
 */
import { createServer } from "node:net"
import { afterAll, assert, describe, it } from "@effect/vitest"
import { ConfigProvider, Effect, Exit, Layer } from "effect"
import { score } from "gyre/testing"
import { PythonSandbox, pythonTests, type PythonTests } from "../../rewards/python.ts"
import { sandbox } from "./pythonSandbox.ts"
import { startSandboxFusionFake } from "../fakes/SandboxFusionFake.ts"

const fake = await startSandboxFusionFake(sandbox)
afterAll(() => fake.close())

const linear: PythonTests = { entry: "f", calls: [{ args: [2], expected: 7 }, { args: [3], expected: 10 }, { args: [0], expected: 1 }, { args: [-4], expected: -11 }] }
const reward = pythonTests<null>(() => linear, { backoff: { base: "10 millis", max: "20 millis" } })
const service = (options: { url?: string; slack?: number; serviceTimeout?: number } = {}) =>
  PythonSandbox.layer({
    backend: { sandboxFusion: { url: options.url ?? fake.url, requestSlackSeconds: options.slack ?? 30, ...(options.serviceTimeout === undefined ? {} : { limits: { serviceTimeout: options.serviceTimeout } }) } },
  })
const onService = <A, E>(effect: Effect.Effect<A, E, PythonSandbox>, layer = service()) => Effect.runPromise(Effect.provide(effect, layer))

/** A closed port: nothing listens there, connections are refused. */
const closedPort = async () => {
  const s = createServer()
  await new Promise<void>((resolve) => s.listen(0, "127.0.0.1", resolve))
  const port = (s.address() as { port: number }).port
  await new Promise<void>((resolve) => s.close(() => resolve()))
  return port
}

describe("Sandbox Fusion backend", () => {
  it("scores function tests as the embedded backend does, sending the documented request", async () => {
    fake.requests.length = 0
    const programs = ["def f(x):\n    return 3*x+1", "def f(x):\n    return 7", "```python\ndef f(x):\n    return 3*x+1 if x > 0 else 0\n```"]
    const scores = await Promise.all(programs.map((c) => onService(score(reward, null, c))))
    assert.deepStrictEqual(scores.map((s) => s.value), [1, 0.25, 0.5])
    const request = fake.requests[0]!
    assert.strictEqual(request["language"], "python")
    assert.strictEqual(request["run_timeout"], 10)
    assert.strictEqual(request["memory_limit_MB"], 128)
    // expected values never leave the host
    assert.notInclude(request["code"] as string, "-11")
  })

  it("runs each stdin case as its own request", async () => {
    fake.requests.length = 0
    const io = pythonTests<null>(() => ({ io: [{ stdin: "2 3\n", stdout: "5" }, { stdin: "4 4\n", stdout: "8" }] }))
    const s = await onService(score(io, null, "a, b = map(int, input().split())\nprint(a + b)"))
    assert.strictEqual(s.value, 1)
    assert.deepStrictEqual(fake.requests.map((r) => r["stdin"]), ["2 3\n", "4 4\n"])
  })

  it("a program's own failure scores 0 with its reason: an exception, sys.exit before the tests, the time limit", async () => {
    const threw = await onService(score(reward, null, "def f(x):\n    return 1 / 0"))
    assert.strictEqual(threw.value, 0)
    assert.match(threw.notes?.["tests"]?.[0] ?? "", /^Threw: the program test 1: threw ZeroDivisionError/)
    const exited = await onService(score(reward, null, "import sys\nsys.exit(0)\ndef f(x):\n    return 3*x+1"))
    assert.strictEqual(exited.value, 0)
    assert.match(exited.notes?.["tests"]?.[0] ?? "", /^Exited: /)
    const looped = await onService(score(reward, null, "def f(x):\n    while True:\n        pass"))
    assert.strictEqual(looped.value, 0)
    assert.match(looped.notes?.["tests"]?.[0] ?? "", /^Timeout: the program ran past the service's time limit of 10 s/)
    const fooled = await onService(score(reward, null, "class A:\n    def __eq__(s, o): return True\ndef f(x):\n    return A()"))
    assert.match(fooled.notes?.["tests"]?.[0] ?? "", /^ResultNotSerializable: /)
  })
})

describe("a service outage masks the sample, after retries", () => {
  it("connection refused", async () => {
    const s = await onService(score(reward, null, "def f(x):\n    return 3*x+1"), service({ url: `http://127.0.0.1:${await closedPort()}` }))
    assert.isUndefined(s.value)
    assert.match(s.masked ?? "", /Unavailable: Sandbox Fusion at .* could not be reached/)
  })

  it("5xx, the service's own error, and no answer in time", async () => {
    fake.requests.length = 0
    fake.mode = "error5xx"
    const s503 = await onService(score(reward, null, "def f(x):\n    return 3*x+1"))
    assert.isUndefined(s503.value)
    assert.match(s503.masked ?? "", /answered HTTP 503/)
    assert.strictEqual(fake.requests.length, 3) // the first try and 2 retries
    fake.mode = "sandboxError"
    const own = await onService(score(reward, null, "def f(x):\n    return 3*x+1"))
    assert.match(own.masked ?? "", /reported its own error: container failed/)
    fake.mode = "hang"
    const hung = await onService(score(reward, null, "def f(x):\n    return 3*x+1"), service({ slack: 0.1, serviceTimeout: 0.2 }))
    assert.match(hung.masked ?? "", /did not answer within 300 ms/)
    fake.mode = "normal"
  })

  it("a transient outage is retried and the sample scored", async () => {
    fake.failFirst = 1
    const s = await onService(score(reward, null, "def f(x):\n    return 3*x+1"))
    assert.strictEqual(s.value, 1)
  })
})

describe("configuration", () => {
  it("GYRE_PYTHON_BACKEND and SANDBOX_FUSION_URL choose the service", async () => {
    fake.requests.length = 0
    const config = ConfigProvider.layer(ConfigProvider.fromUnknown({ GYRE_PYTHON_BACKEND: "sandbox-fusion", SANDBOX_FUSION_URL: `${fake.url}/run_code` }))
    const s = await onService(score(reward, null, "def f(x):\n    return 3*x+1"), PythonSandbox.layer().pipe(Layer.provide(config)))
    assert.strictEqual(s.value, 1)
    assert.strictEqual(fake.requests.length, 1)
  })

  it("a service without a URL is refused, naming the setting", async () => {
    const config = ConfigProvider.layer(ConfigProvider.fromUnknown({}))
    const exit = await Effect.runPromiseExit(Effect.provide(Effect.void, PythonSandbox.layer({ backend: { sandboxFusion: {} } }).pipe(Layer.provide(config))))
    assert.isTrue(Exit.isFailure(exit))
    assert.match(String(Exit.isFailure(exit) ? exit.cause : ""), /needs a server URL: .* SANDBOX_FUSION_URL/)
  })
})

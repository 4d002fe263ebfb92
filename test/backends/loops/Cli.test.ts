/**
 * The real CLI against the fake control plane, with gyre's Loops data-plane server of the
 * base model as the data plane: `gyre run math --backend loops` trains 3 steps over the
 * Loops protocol (and says so), and the fake's log
 * shows exactly one deactivation of the run and no request after it; the same after
 * Ctrl-C, after a failure, and when the run never becomes ready. `gyre loops
 * runs|deactivate|checkpoints` and `gyre export bt://...` work against the fake. The
 * API key is never printed.
 */
import { spawn } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { Effect, Exit, Layer, References, Scope } from "effect"
import * as LoopsServer from "../../../src/backends/loops/server/Server.ts"
import * as RunRecord from "../../../src/backends/loops/RunRecord.ts"
import { defaultModelDir } from "../../../src/Paths.ts"
import * as Serve from "../../../src/backends/local/Serve.ts"
import { MAIN } from "../../cli/Processes.ts"
import { exited, rows } from "../../cli/Processes.ts"
import { type Fake, type FakeOptions, startFake } from "./FakeControlPlane.ts"

const ROOT = Path.resolve(import.meta.dirname, "../../..")
const KEY = "bt-cli-secret-key-0123456789"
const MODEL = `local:${defaultModelDir}`

let dataPlane: { url: string; close: () => Promise<void> }
const fakes: Array<Fake> = []

beforeAll(async () => {
  const stateDir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-loops-cli-dp-"))
  const scope = Effect.runSync(Scope.make())
  const server = await Effect.runPromise(
    Effect.gen(function* () {
      const backend = yield* Serve.embedded({ modelDir: defaultModelDir, seed: 0, stateDir })
      return yield* LoopsServer.make({ trainer: backend.trainer, sampler: backend.sampler, modelName: backend.modelName, pollWait: "2 seconds" })
    }).pipe(Scope.provide(scope), Effect.provide(Layer.succeed(References.MinimumLogLevel, "Warn"))),
  )
  dataPlane = { url: server.url, close: () => Effect.runPromise(Scope.close(scope, Exit.void)) }
})
afterAll(async () => {
  for (const f of fakes) await f.close()
  await dataPlane.close()
})

const fake = async (options: Partial<FakeOptions> = {}) => {
  const f = await startFake({ apiKey: KEY, dataPlane: dataPlane.url, models: [MODEL, "Qwen/Qwen3-8B"], ...options })
  fakes.push(f)
  return f
}

/** `gyre <args>` as a process of its own (its own process group, for Ctrl-C), with the key in its environment. */
const gyre = (args: ReadonlyArray<string>, env: Record<string, string> = {}) => {
  const child = spawn(process.execPath, [MAIN, ...args], {
    cwd: ROOT,
    stdio: ["ignore", "pipe", "pipe"],
    detached: true,
    env: { ...process.env, BASETEN_API_KEY: KEY, ...env },
  })
  let output = ""
  child.stdout!.on("data", (d) => (output += d))
  child.stderr!.on("data", (d) => (output += d))
  return { child, output: () => output, done: async () => ({ code: await exited(child), output }) }
}

const out = () => Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-loops-cli-"))
const runArgs = (f: Fake, dir: string, steps: number, extra: ReadonlyArray<string> = []) => [
  "run", "math", "--backend", "loops", "--model", MODEL, "--lora-rank", "4", "--loops-url", f.url,
  "--steps", String(steps), "--groups", "2", "--group-size", "2", "--eval-every", "0", "--log-rollouts-every", "0",
  "--name", "m", "--out", dir, ...extra,
]

/** The fake's one run: deactivated exactly once, and no request of it after that. */
const assertDeactivatedOnce = (f: Fake, output: string) => {
  assert.strictEqual(f.runs.size, 1, output)
  const [run] = [...f.runs.values()]
  assert.strictEqual(f.deactivations(run!.id), 1, output)
  const entries = f.entriesOf(run!.id)
  const at = entries.findIndex((e) => e.path.endsWith("/deactivate"))
  assert.strictEqual(at, entries.length - 1, `requests after the deactivation: ${entries.slice(at + 1).map((e) => `${e.method} ${e.path}`).join(", ")}`)
  assert.notInclude(output, KEY)
  return run!
}

describe("gyre run --backend loops (real CLI)", () => {
  it("trains 3 steps on the run and deactivates it once", async () => {
    const f = await fake({ readyAfterPolls: 2 })
    const dir = out()
    const r = await gyre(runArgs(f, dir, 3)).done()
    assert.strictEqual(r.code, 0, r.output)
    const run = assertDeactivatedOnce(f, r.output)
    assert.deepStrictEqual(rows(Path.join(dir, "m", "metrics.jsonl")).map((m) => m["step"]).filter((s) => Number(s) > 0), [1, 2, 3])
    assert.include(r.output, `loops: created run ${run.id}`)
    assert.include(r.output, `loops: deactivated run ${run.id}`)
    assert.isTrue(f.entriesOf(run.id).some((e) => e.kind === "sampler" && e.path.endsWith("/v1/completions")), "sampled on the run's sampler")
    assert.include(r.output, `training on run ${run.id} over the Loops data plane (submit + operations)`)
    assert.strictEqual((await Effect.runPromise(RunRecord.read(Path.join(dir, "m"))))?.runs[0]?.dataPlane, "loops")
    assert.deepStrictEqual(RunRecord.live(await Effect.runPromise(RunRecord.read(Path.join(dir, "m")))), [])
  })

  it("Ctrl-C mid-run deactivates the run", async () => {
    const f = await fake()
    const dir = out()
    const p = gyre(runArgs(f, dir, 500))
    const metrics = Path.join(dir, "m", "metrics.jsonl")
    while (rows(metrics).filter((m) => Number(m["step"]) > 0).length < 1 && p.child.exitCode === null) await new Promise((r) => setTimeout(r, 50))
    assert.isNull(p.child.exitCode, p.output())
    process.kill(-p.child.pid!, "SIGINT")
    const r = await p.done()
    assert.strictEqual(r.code, 130, r.output)
    assertDeactivatedOnce(f, r.output)
  })

  it("a failure mid-run deactivates the run and exits 1", async () => {
    const f = await fake({
      fault: ({ kind, n, path }) => (kind === "trainer" && path.endsWith("/forward_backward") && n === 2 ? { status: 400, body: { detail: "injected trainer failure" } } : undefined),
    })
    const r = await gyre(runArgs(f, out(), 5)).done()
    assert.strictEqual(r.code, 1, r.output)
    assert.include(r.output, "injected trainer failure")
    assertDeactivatedOnce(f, r.output)
  })

  it("a run that never becomes ready times out naming the run and its state, and is deactivated", async () => {
    const f = await fake({ neverReady: true })
    const r = await gyre(runArgs(f, out(), 3, ["--loops-ready-timeout", "1"])).done()
    assert.strictEqual(r.code, 1, r.output)
    const run = assertDeactivatedOnce(f, r.output)
    assert.match(r.output, new RegExp(`error: Loops run ${run.id} was not ready after 1s \\(last state: run ACTIVE, trainer DEPLOYING, sampler LOADING_MODEL\\)`))
  })
})

describe("gyre loops (real CLI)", () => {
  it("runs, deactivate, checkpoints, and export of a bt:// checkpoint", async () => {
    const f = await fake()
    f.addRun("runA", "Qwen/Qwen3-8B")
    f.addRun("runB", "Qwen/Qwen3-8B", false)
    const { uri } = f.addCheckpoint({ runId: "runA", name: "step-3", target: "sampler", files: [{ name: "adapter_config.json", bytes: new TextEncoder().encode('{"r":16}') }] })

    const dest = out()
    // independent commands run side by side; deactivation last
    const sessionB = f.runs.get("runB")!.sessionId
    const [runs, all, checkpoints, exported, wrong, ofSession] = await Promise.all([
      gyre(["loops", "runs", "--loops-url", f.url]).done(),
      gyre(["loops", "runs", "--all"], { LOOPS_API_URL: f.url }).done(),
      gyre(["loops", "checkpoints", "runA", "--loops-url", f.url]).done(),
      gyre(["export", uri, "--out", dest], { LOOPS_API_URL: f.url }).done(),
      gyre(["loops", "runs", "--loops-url", f.url], { BASETEN_API_KEY: "bt-wrong-key-0000000000" }).done(),
      gyre(["loops", "runs", "--all", "--session", sessionB, "--loops-url", f.url]).done(),
    ])
    assert.include(ofSession.output, "runB", ofSession.output)
    assert.notInclude(ofSession.output, "runA")
    assert.strictEqual(runs.code, 0, runs.output)
    assert.match(runs.output, /RUN ID\s+NAME\s+BASE MODEL\s+STATUS/)
    assert.match(runs.output, /runA\s+Qwen\/Qwen3-8B\s+Qwen\/Qwen3-8B\s+ACTIVE/)
    assert.notInclude(runs.output, "runB")
    assert.include(runs.output, "1 live run (any status but INACTIVE): each bills until deactivated")
    assert.include(all.output, "runB")
    assert.strictEqual(checkpoints.code, 0, checkpoints.output)
    assert.include(checkpoints.output, uri)
    assert.strictEqual(exported.code, 0, exported.output)
    assert.strictEqual(Fs.readFileSync(Path.join(dest, "adapter_config.json"), "utf8"), '{"r":16}')
    assert.strictEqual(wrong.code, 1, wrong.output)
    assert.include(wrong.output, "HTTP 401")
    assert.notInclude(wrong.output, "bt-wrong-key-0000000000")

    const off = await gyre(["loops", "deactivate", "runA", "--loops-url", f.url]).done()
    assert.strictEqual(off.code, 0, off.output)
    assert.include(off.output, "deactivated run runA")
    assert.strictEqual(f.deactivations("runA"), 1)
    assert.include((await gyre(["loops", "runs", "--loops-url", f.url]).done()).output, "no live Loops runs")
    for (const r of [runs, all, checkpoints, exported, off]) assert.notInclude(r.output, KEY)
  })
})

/**
 * A created Loops run never stays billing: whatever goes wrong after `POST
 * /v1/loops/runs` (a 503 after the run was made, an answer gyre does not understand, a
 * status the reference does not list, a run that reports FAILED, a crash while decoding
 * or polling), the run is recorded in `loops.json` and deactivated, and the fake's books
 * show no run left ACTIVE; a deactivation that fails for good fails the command, naming
 * the run. Statuses the reference does not list and `null` URLs while a run comes up are
 * "not ready yet", not errors.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Layer, Redacted } from "effect"
import * as Retry from "../../../src/backends/http/client/Retry.ts"
import { ControlPlane } from "../../../src/backends/loops/ControlPlane.ts"
import { LoopsError } from "../../../src/backends/loops/Errors.ts"
import * as Provision from "../../../src/backends/loops/Provision.ts"
import * as RunRecord from "../../../src/backends/loops/RunRecord.ts"
import * as UnreleasedRuns from "../../../src/backends/loops/UnreleasedRuns.ts"
import { capture } from "./DataPlane.ts"
import { type Fake, type FakeOptions, startFake } from "./FakeControlPlane.ts"

const KEY = "bt-secret-key-0123456789"
const MODEL = "Qwen/Qwen3-8B"

const fakeWith = (options: Partial<FakeOptions> = {}) =>
  Effect.acquireRelease(Effect.promise(() => startFake({ apiKey: KEY, models: [MODEL], ...options })), (fake) => Effect.promise(() => fake.close()))

const runDir = () => Path.join(Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-loops-life-")), "r")

const controlPlane = (fake: Fake) => ControlPlane.layer({ url: fake.url, apiKey: Redacted.make(KEY), retry: Retry.fast })

/** Provisions a run on `cp` and releases it at once; the exit of the provisioning (logs kept in `logs`). */
const provision = (dir: string, cp: Layer.Layer<ControlPlane, unknown>, options: Partial<Provision.Options> = {}, logs = capture()) =>
  Effect.exit(
    Effect.scoped(Provision.acquire({ baseModel: MODEL, runDir: dir, resume: false, pollInterval: "10 millis", readyTimeout: "5 seconds", ...options })).pipe(
      Effect.provide(cp),
      Effect.provide(logs.layer),
    ),
  )

/** The fake holds runs and none of them is still ACTIVE; the folder's record agrees. */
const assertNothingBilling = (fake: Fake, dir: string) =>
  Effect.gen(function* () {
    assert.isAtLeast(fake.runs.size, 1, "a run was created")
    assert.deepStrictEqual(fake.activeRuns(), [], "no run left ACTIVE")
    for (const r of fake.runs.values()) assert.strictEqual(r.deactivations, 1, `run ${r.id} deactivated once`)
    const record = yield* RunRecord.read(dir)
    assert.deepStrictEqual(record?.runs.map((r) => r.id), [...fake.runs.keys()], "every run recorded")
    assert.deepStrictEqual(RunRecord.live(record), [], "recorded as deactivated")
  })

describe("Loops lifecycle: a created run never stays billing", () => {
  it.live("a run that answers DEPLOYING and null URLs while it comes up is waited for; the unknown status is logged once", () =>
    Effect.gen(function* () {
      const fake = yield* fakeWith({
        readyAfterPolls: 4,
        shapeRun: (json, _r, ready) => (ready ? json : { ...json, status: { name: "DEPLOYING" }, base_url: null, sampler: { ...(json["sampler"] as object), base_url: null } }),
      })
      const dir = runDir()
      const logs = capture()
      const exit = yield* Effect.exit(
        Effect.scoped(Effect.gen(function* () {
          const run = yield* Provision.acquire({ baseModel: MODEL, runDir: dir, resume: false, pollInterval: "10 millis" })
          assert.match(run.trainerUrl, /\/dp\/.+\/trainer$/)
          assert.match(run.samplerUrl, /\/dp\/.+\/sampler$/)
        })).pipe(Effect.provide(controlPlane(fake)), Effect.provide(logs.layer)),
      )
      assert.isTrue(Exit.isSuccess(exit), String(exit))
      const unknown = logs.lines.filter((l) => l.includes("reports run status DEPLOYING"))
      assert.strictEqual(unknown.length, 1, logs.lines.join("\n"))
      assert.isTrue(logs.lines.some((l) => l.includes("trainer URL not assigned yet")), logs.lines.join("\n"))
      yield* assertNothingBilling(fake, dir)
    }).pipe(Effect.scoped))

  it.live("a status the reference does not list, forever, ends at the ready timeout with the run deactivated", () =>
    Effect.gen(function* () {
      const fake = yield* fakeWith({ shapeRun: (json) => ({ ...json, status: { name: "WARMING_POOL" } }) })
      const dir = runDir()
      const logs = capture()
      const exit = yield* provision(dir, controlPlane(fake), { readyTimeout: "300 millis" }, logs)
      assert.isTrue(Exit.isFailure(exit))
      assert.match(String(exit), /was not ready after .*last state: run WARMING_POOL/)
      assert.strictEqual(logs.lines.filter((l) => l.includes("reports run status WARMING_POOL")).length, 1)
      yield* assertNothingBilling(fake, dir)
    }).pipe(Effect.scoped))

  it.live("a run that reports FAILED while provisioning fails at once, naming the status and the control plane's message, and is deactivated", () =>
    Effect.gen(function* () {
      const fake = yield* fakeWith({ neverReady: true, shapeRun: (json, r) => (r.polls >= 2 ? { ...json, status: { name: "FAILED", message: "no H100 capacity in the region" } } : json) })
      const dir = runDir()
      const logs = capture()
      const exit = yield* provision(dir, controlPlane(fake), { readyTimeout: "10 minutes" }, logs)
      const [run] = [...fake.runs.keys()]
      assert.isTrue(Exit.isFailure(exit))
      assert.include(String(exit), `Loops run ${run} failed while provisioning (run FAILED (no H100 capacity in the region)`)
      assert.isFalse(logs.lines.some((l) => l.includes("does not list")), "FAILED is known to be an end, not an unknown status")
      yield* assertNothingBilling(fake, dir)
    }).pipe(Effect.scoped))

  it.live("a create that makes the run but answers 503 finds that run in the session instead of creating again, records it and deactivates it", () =>
    Effect.gen(function* () {
      const fake = yield* fakeWith({ fault: ({ method, n, path }) => (method === "POST" && path === "/v1/loops/runs" && n === 1 ? { status: 503, handled: true, body: { detail: "shutting down" } } : undefined) })
      const dir = runDir()
      const exit = yield* provision(dir, controlPlane(fake))
      assert.isTrue(Exit.isSuccess(exit), String(exit))
      assert.strictEqual(fake.log.filter((e) => e.method === "POST" && e.path === "/v1/loops/runs").length, 1, "never created again")
      assert.strictEqual(fake.runs.size, 1)
      yield* assertNothingBilling(fake, dir)
    }).pipe(Effect.scoped))

  it.live("a create answered 503 whose run then fails to start is deactivated", () =>
    Effect.gen(function* () {
      const fake = yield* fakeWith({
        neverReady: true,
        shapeRun: (json, r) => (r.polls >= 1 ? { ...json, status: { name: "FAILED" } } : json),
        fault: ({ method, n, path }) => (method === "POST" && path === "/v1/loops/runs" && n === 1 ? { status: 503, handled: true } : undefined),
      })
      const dir = runDir()
      const exit = yield* provision(dir, controlPlane(fake), { readyTimeout: "10 minutes" })
      assert.include(String(exit), "failed while provisioning (run FAILED")
      yield* assertNothingBilling(fake, dir)
    }).pipe(Effect.scoped))

  it.live("a create that keeps failing after it may have made a run names the session and the commands that list and stop its runs", () =>
    Effect.gen(function* () {
      const fake = yield* fakeWith({
        fault: ({ method, path }) =>
          method === "POST" && path === "/v1/loops/runs" ? { status: 502, body: { detail: "bad gateway" } } : method === "GET" && path === "/v1/loops/runs" ? { status: 403, body: { detail: "no" } } : undefined,
      })
      const cp = ControlPlane.layer({ url: fake.url, apiKey: Redacted.make(KEY), retry: Retry.policy({ maxElapsed: "50 millis" }, Retry.fast) })
      const exit = yield* provision(runDir(), cp)
      assert.include(String(exit), "HTTP 502")
      assert.match(String(exit), new RegExp(`gyre loops runs --session ses\\w+ --loops-url ${fake.url}`))
      assert.include(String(exit), "may bill")
    }).pipe(Effect.scoped))

  it.live("a create answer that does not match the reference, with a readable id, is recorded and deactivated", () =>
    Effect.gen(function* () {
      const fake = yield* fakeWith({ shapeCreated: (json) => ({ run: { ...(json.run as object), base_url: 42, created_at: { when: "now" } } }) })
      const dir = runDir()
      const exit = yield* provision(dir, controlPlane(fake))
      const text = String(exit)
      assert.isTrue(Exit.isFailure(exit))
      assert.include(text, "POST /v1/loops/runs")
      assert.include(text, "run.base_url")
      yield* assertNothingBilling(fake, dir)
    }).pipe(Effect.scoped))

  it.live("a create answer with no run id: the session's run is found, recorded and deactivated", () =>
    Effect.gen(function* () {
      const fake = yield* fakeWith({ shapeCreated: () => ({ accepted: true }) })
      const dir = runDir()
      const exit = yield* provision(dir, controlPlane(fake))
      const [run] = [...fake.runs.keys()]
      assert.isTrue(Exit.isFailure(exit))
      assert.include(String(exit), `answered with no run id`)
      assert.include(String(exit), `the run it created is ${run}`)
      yield* assertNothingBilling(fake, dir)
    }).pipe(Effect.scoped))

  it.live("a create answer with no run id and no way to list the session's runs names the session and the command that lists them", () =>
    Effect.gen(function* () {
      const fake = yield* fakeWith({
        shapeCreated: () => "created",
        fault: ({ method, path }) => (method === "GET" && path === "/v1/loops/runs" ? { status: 403, body: { detail: "listing is not allowed" } } : undefined),
      })
      const exit = yield* provision(runDir(), controlPlane(fake))
      const session = [...fake.runs.values()][0]!.sessionId
      assert.include(String(exit), `gyre loops runs --session ${session} --loops-url ${fake.url}`)
      assert.include(String(exit), "may bill")
    }).pipe(Effect.scoped))

  it.live("a deactivation that fails for good (500 after its retries) fails the command with the run and its stop command last, after any failure of its own", () =>
    Effect.gen(function* () {
      const fake = yield* fakeWith({ fault: ({ path }) => (path.endsWith("/deactivate") ? { status: 500, body: { detail: "internal error" } } : undefined) })
      const cp = ControlPlane.layer({ url: fake.url, apiKey: Redacted.make(KEY), retry: Retry.policy({ maxElapsed: "50 millis" }, Retry.fast) })
      const options = { baseModel: MODEL, resume: false, pollInterval: "10 millis" } as const
      const lastLine = (exit: Exit.Exit<unknown, unknown>) => (Exit.isFailure(exit) ? String(exit.cause).split("\n") : [])
      const ok = yield* Effect.exit(UnreleasedRuns.guard(Effect.scoped(Provision.acquire({ ...options, runDir: runDir() }))).pipe(Effect.provide(cp), Effect.provide(capture().layer)))
      const first = [...fake.runs.keys()][0]!
      assert.isTrue(Exit.isFailure(ok))
      assert.match(lastLine(ok).at(-1)!, new RegExp(`Loops run ${first} could not be deactivated \\(.*HTTP 500: internal error\\): it may still be billing\\. Stop it with: gyre loops deactivate ${first} --loops-url`))
      const broke = Effect.flatMap(Provision.acquire({ ...options, runDir: runDir() }), () => Effect.fail(new LoopsError({ reason: "Failed", route: "train", message: "training broke" })))
      const failed = yield* Effect.exit(UnreleasedRuns.guard(Effect.scoped(broke)).pipe(Effect.provide(cp), Effect.provide(capture().layer)))
      const second = [...fake.runs.keys()][1]!
      const lines = lastLine(failed)
      assert.include(lines.at(-2)!, "training broke")
      assert.include(lines.at(-1)!, `gyre loops deactivate ${second}`)
      assert.deepStrictEqual(fake.activeRuns(), [first, second], "both runs are still up, and said so")
    }).pipe(Effect.scoped))

  const crashes: ReadonlyArray<readonly [string, (cp: typeof ControlPlane.Service) => typeof ControlPlane.Service]> = [
    ["decoding the create answer crashes", (cp) => ({ ...cp, createRun: (r) => Effect.map(cp.createRun(r), (c) => ({ ...c, run: Effect.die(new Error("decoder crashed")) })) })],
    ["polling the run crashes", (cp) => ({ ...cp, getRun: () => Effect.die(new Error("poll crashed")) })],
    ["polling the trainer deployment fails", (cp) => ({ ...cp, getDeployment: () => Effect.fail(new LoopsError({ reason: "InvalidInput", route: "GET /v1/loops/deployments/{deployment_id}", message: "refused" })) })],
  ]
  for (const [what, wrap] of crashes) {
    it.live(`a run is deactivated when ${what}`, () =>
      Effect.gen(function* () {
        const fake = yield* fakeWith({ readyAfterPolls: 2 })
        const dir = runDir()
        const wrapped = Layer.effect(ControlPlane, Effect.map(Effect.service(ControlPlane), wrap)).pipe(Layer.provide(controlPlane(fake)))
        const exit = yield* provision(dir, wrapped)
        assert.isTrue(Exit.isFailure(exit), what)
        yield* assertNothingBilling(fake, dir)
      }).pipe(Effect.scoped))
  }
})

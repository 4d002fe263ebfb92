/**
 * The Loops control plane service against the strict fake: every route round-trips
 * through its Schemas, the fake refuses what the reference does not document, a wrong
 * or missing key fails without printing the key, transient failures are retried, a
 * create whose answer was lost does not make a second run, an answer that does not
 * match the reference names the route and the field, and a checkpoint downloads page by
 * page through presigned URLs that never see the key.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { ConfigProvider, Effect, Redacted } from "effect"
import * as Retry from "../../../src/backends/http/client/Retry.ts"
import * as Checkpoints from "../../../src/backends/loops/Checkpoints.ts"
import { ControlPlane } from "../../../src/backends/loops/ControlPlane.ts"
import * as PlatformHttpClient from "../../../src/platform/HttpClient.ts"
import { capture } from "./DataPlane.ts"
import { type FakeOptions, startFake } from "./FakeControlPlane.ts"

const KEY = "bt-secret-key-0123456789"

const fakeWith = (options: Partial<FakeOptions> = {}) =>
  Effect.acquireRelease(Effect.promise(() => startFake({ apiKey: KEY, ...options })), (fake) => Effect.promise(() => fake.close()))

/** Runs `f` on the control plane service. */
const withCp = <A, E>(f: (cp: typeof ControlPlane.Service) => Effect.Effect<A, E>) =>
  Effect.gen(function* () {
    const cp = yield* ControlPlane
    return yield* f(cp)
  })

const controlPlane = (url: string, key = KEY) => ControlPlane.layer({ url, apiKey: Redacted.make(key), retry: Retry.fast })

/** A safetensors file with the given tensor names (one float each). */
const safetensors = (names: ReadonlyArray<string>) => {
  const header: Record<string, unknown> = { __metadata__: { format: "pt" } }
  names.forEach((n, i) => (header[n] = { dtype: "F32", shape: [1], data_offsets: [4 * i, 4 * i + 4] }))
  const json = Buffer.from(JSON.stringify(header))
  const out = Buffer.alloc(8 + json.length + 4 * names.length)
  out.writeBigUInt64LE(BigInt(json.length), 0)
  json.copy(out, 8)
  return new Uint8Array(out)
}

describe("Loops control plane", () => {
  it.live("every route round-trips through its Schema", () =>
    Effect.gen(function* () {
      const fake = yield* fakeWith({ models: ["Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B"] })
      yield* Effect.gen(function* () {
        const cp = yield* ControlPlane
        assert.deepStrictEqual((yield* cp.capabilities).supported_models.map((m) => m.model_name), ["Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B"])
        const session = yield* cp.createSession
        assert.strictEqual((yield* cp.getSession(session.id)).id, session.id)
        const created = yield* cp.createRun({ session_id: session.id, base_model: "Qwen/Qwen3-0.6B", lora_rank: 16, name: "mine" })
        const run = yield* created.run
        assert.strictEqual(run.id, created.id)
        assert.strictEqual(run.status?.name, "ACTIVE")
        assert.strictEqual(run.name, "mine")
        assert.match(run.sampler?.base_url ?? "", /\/dp\/.+\/sampler$/)
        const got = yield* cp.getRun(run.id)
        assert.strictEqual(got.session_id, session.id)
        assert.strictEqual((yield* cp.getDeployment(got.deployment_id!)).status?.name, "RUNNING")
        assert.deepStrictEqual((yield* cp.listRuns({ base_model: "Qwen/Qwen3-0.6B" })).map((r) => r.id), [run.id])
        assert.deepStrictEqual(yield* cp.listRuns({ base_model: "Qwen/Qwen3-8B" }), [])
        const off = yield* cp.deactivateRun(run.id)
        assert.deepStrictEqual([off.id, off.base_model], [run.id, "Qwen/Qwen3-0.6B"])
        assert.strictEqual((yield* cp.getRun(run.id)).status?.name, "INACTIVE")
        const notFound = yield* Effect.flip(cp.getRun("nope"))
        assert.strictEqual(notFound.reason, "NotFound")
        assert.include(notFound.message, "GET /v1/loops/runs/{run_id}")
      }).pipe(Effect.provide(controlPlane(fake.url)))
      assert.isTrue(fake.log.every((e) => e.status < 500 && e.authorized))
    }).pipe(Effect.scoped))

  it.live("the fake is strict: an unknown or missing field or query parameter is a 400 naming it, no key a 401", () =>
    Effect.gen(function* () {
      const fake = yield* fakeWith()
      const call = (path: string, init: RequestInit = {}) =>
        Effect.promise(async () => {
          const r = await fetch(`${fake.url}${path}`, { ...init, headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json", ...(init.headers ?? {}) } })
          return { status: r.status, body: (await r.json()) as { detail: string } }
        })
      const session = (yield* call("/v1/loops/sessions", { method: "POST" })).body as unknown as { session: { id: string } }
      const unknown = yield* call("/v1/loops/runs", { method: "POST", body: JSON.stringify({ session_id: session.session.id, base_model: "Qwen/Qwen3-8B", gpus: 8 }) })
      assert.deepStrictEqual([unknown.status, unknown.body.detail], [400, "unknown field 'gpus'"])
      const missing = yield* call("/v1/loops/runs", { method: "POST", body: JSON.stringify({ session_id: session.session.id }) })
      assert.deepStrictEqual([missing.status, missing.body.detail], [400, "missing field 'base_model'"])
      const query = yield* call("/v1/loops/runs?status=ACTIVE")
      assert.deepStrictEqual([query.status, query.body.detail], [400, "unknown query parameter 'status'"])
      const filters = yield* call("/v1/loops/checkpoints")
      assert.strictEqual(filters.status, 400)
      const noKey = yield* call("/v1/loops/runs", { headers: { authorization: "" } })
      assert.strictEqual(noKey.status, 401)
      const apiKeyScheme = yield* call("/v1/loops/runs", { headers: { authorization: `Api-Key ${KEY}` } })
      assert.strictEqual(apiKeyScheme.status, 200)
    }).pipe(Effect.scoped))

  it.live("a wrong key is an Auth error that names the route, and no text holds the key", () =>
    Effect.gen(function* () {
      const fake = yield* fakeWith()
      const wrong = "bt-wrong-key-9876543210"
      const logs = capture()
      const e = yield* Effect.flip(withCp((cp) => cp.listRuns()).pipe(Effect.provide(controlPlane(fake.url, wrong)), Effect.provide(logs.layer)))
      assert.strictEqual(e.reason, "Auth")
      assert.include(e.message, "GET /v1/loops/runs")
      assert.include(e.message, "HTTP 401")
      for (const t of [e.message, String(e), ...logs.lines]) assert.notInclude(t, wrong)
    }).pipe(Effect.scoped))

  it.live("no BASETEN_API_KEY is a Config error naming it", () =>
    Effect.gen(function* () {
      const e = yield* Effect.flip(
        withCp((cp) => cp.listRuns()).pipe(
          Effect.provide(ControlPlane.layer({ url: "http://127.0.0.1:9" })),
          Effect.provide(ConfigProvider.layer(ConfigProvider.fromUnknown({}))),
        ),
      )
      assert.strictEqual(e.reason, "Config")
      assert.include(e.message, "BASETEN_API_KEY")
    }))

  it.live("a 503 (server shutting down) and a 429 are retried", () =>
    Effect.gen(function* () {
      const fake = yield* fakeWith({
        fault: ({ kind, method, n, path }) =>
          kind === "control" && method === "GET" && path === "/v1/loops/runs" && n <= 2 ? { status: n === 1 ? 503 : 429, body: { detail: "shutting down" }, headers: { "retry-after": "0" } } : undefined,
      })
      const logs = capture()
      const runs = yield* withCp((cp) => cp.listRuns()).pipe(Effect.provide(controlPlane(fake.url)), Effect.provide(logs.layer))
      assert.deepStrictEqual(runs, [])
      assert.deepStrictEqual(fake.log.map((e) => e.status), [503, 429, 200])
      assert.strictEqual(logs.lines.filter((l) => l.startsWith("WARN") && l.includes("GET /v1/loops/runs")).length, 2)
    }).pipe(Effect.scoped))

  it.live("a create whose answer is lost finds the run it made instead of making a second one", () =>
    Effect.gen(function* () {
      const fake = yield* fakeWith({ fault: ({ method, n, path }) => (method === "POST" && path === "/v1/loops/runs" && n === 1 ? "drop-after" : undefined) })
      const run = yield* Effect.gen(function* () {
        const cp = yield* ControlPlane
        const session = yield* cp.createSession
        return yield* cp.createRun({ session_id: session.id, base_model: "Qwen/Qwen3-8B" })
      }).pipe(Effect.provide(controlPlane(fake.url)))
      assert.strictEqual(fake.runs.size, 1)
      assert.isTrue(fake.runs.has(run.id))
      assert.strictEqual(fake.log.filter((e) => e.method === "POST" && e.path === "/v1/loops/runs").length, 1)
    }).pipe(Effect.scoped))

  it.live("an answer that does not match the reference names the route and the field", () =>
    Effect.gen(function* () {
      const fake = yield* fakeWith({
        fault: ({ method, path }) => (method === "GET" && path.startsWith("/v1/loops/runs/") ? { status: 200, body: { run: { id: "r1", session_id: "s", base_model: "m", base_url: 7, created_at: "t", status: { name: "RUNNING" } } } } : undefined),
      })
      const e = yield* Effect.flip(withCp((cp) => cp.getRun("r1")).pipe(Effect.provide(controlPlane(fake.url))))
      assert.strictEqual(e.reason, "Decode")
      assert.include(e.message, "GET /v1/loops/runs/{run_id}")
      assert.include(e.message, "run.base_url")
    }).pipe(Effect.scoped))

  it.live("a checkpoint downloads page by page through presigned URLs, without the key; a name leaving the folder is refused", () =>
    Effect.gen(function* () {
      const fake = yield* fakeWith({ filesPageSize: 2 })
      fake.addRun("run1", "Qwen/Qwen3-8B")
      const files = [
        { name: "adapter_model.safetensors", bytes: safetensors(["a.lora_A.weight", "a.lora_B.weight"]) },
        { name: "adapter_config.json", bytes: new TextEncoder().encode('{"r":16}') },
        { name: "nested/extra.bin", bytes: new Uint8Array([1, 2, 3]) },
        { name: "rank1.bin", bytes: new Uint8Array([4]), nodeRank: 1 },
      ]
      const { uri } = fake.addCheckpoint({ runId: "run1", name: "step-3", target: "sampler", files })
      const out = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-loops-export-"))
      const got = yield* Checkpoints.download(uri, out).pipe(Effect.provide(controlPlane(fake.url)), Effect.provide(PlatformHttpClient.layer))
      assert.strictEqual(got.tensors, 2)
      assert.deepStrictEqual(got.files.map((f) => Path.relative(out, f)), ["adapter_model.safetensors", "adapter_config.json", "nested/extra.bin", "node-1/rank1.bin"])
      assert.strictEqual(Fs.readFileSync(Path.join(out, "adapter_config.json"), "utf8"), '{"r":16}')
      assert.strictEqual(fake.log.filter((e) => e.path.includes("/files?")).length, 2, "two pages of two")
      const downloads = fake.log.filter((e) => e.kind === "files")
      assert.strictEqual(downloads.length, 4)
      assert.isTrue(downloads.every((e) => !e.authorized && !e.headers.includes(KEY)), "presigned downloads carry no key")

      const bad = fake.addCheckpoint({ runId: "run1", name: "evil", target: "sampler", files: [{ name: "../escape.txt", bytes: new Uint8Array([0]) }] })
      const e = yield* Effect.flip(Checkpoints.download(bad.uri, out).pipe(Effect.provide(controlPlane(fake.url)), Effect.provide(PlatformHttpClient.layer)))
      assert.include(e.message, "outside")
      assert.isFalse(Fs.existsSync(Path.join(out, "..", "escape.txt")))
      const volume = yield* fakeWith({ fault: ({ path }) => (path.endsWith("/files") ? { status: 400, body: { detail: "Checkpoint ck1 has no presigned URLs" } } : undefined) })
      volume.addRun("run1", "Qwen/Qwen3-8B")
      const inVolume = volume.addCheckpoint({ runId: "run1", name: "step-1", target: "sampler", files })
      const noUrls = yield* Effect.flip(Checkpoints.download(inVolume.uri, out).pipe(Effect.provide(controlPlane(volume.url)), Effect.provide(PlatformHttpClient.layer)))
      assert.include(noUrls.message, "stored in a Baseten volume")
      const missing = yield* Effect.flip(Checkpoints.download("bt://loops:run1/weights/nope", out).pipe(Effect.provide(controlPlane(fake.url)), Effect.provide(PlatformHttpClient.layer)))
      assert.strictEqual(missing.reason, "NotFound")
      assert.include(missing.message, "gyre loops checkpoints run1")
    }).pipe(Effect.scoped))
})




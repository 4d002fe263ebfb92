/**
 * The Loops data plane as gyre speaks it (`DataWire.ts`): gyre's Loops data-plane server
 * is strict (a field or route the wire does not have is refused by name), operations run
 * once per idempotency key, gyre's client resubmits an operation the trainer lost, and
 * `--backend loops` trains over it behind the fake control plane, saying which protocol
 * it probed and recording it in `loops.json`; a run the control plane ends mid-training
 * fails at once, naming its status, instead of resubmitting to a trainer that is gone.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { Effect, Layer, Redacted } from "effect"
import * as CharTokenizer from "../../../src/backends/local/CharTokenizer.ts"
import * as Retry from "../../../src/backends/http/client/Retry.ts"
import * as Loops from "../../../src/backends/loops/Backend.ts"
import * as RunRecord from "../../../src/backends/loops/RunRecord.ts"
import * as Runner from "../../../src/Runner.ts"
import { Tokenizer } from "../../../src/services/Tokenizer.ts"
import vowels, { quiet, toySettings } from "../../envs/vowels.ts"
import { capture, RANDOM_MODEL, startLoopsDataPlane } from "./DataPlane.ts"
import { type Fake, type FakeOptions, startFake } from "./FakeControlPlane.ts"

const KEY = "bt-secret-key-0123456789"

let server: Awaited<ReturnType<typeof startLoopsDataPlane>>
beforeAll(async () => {
  server = await startLoopsDataPlane({ pollWait: "300 millis" })
})
afterAll(async () => {
  await server.close()
})

const datum = { model_input: { chunks: [{ type: "encoded_text", tokens: [65, 66] }] }, loss_fn_inputs: { target_tokens: { data: [66, 67], dtype: "int64", shape: [2] } } }

const call = async (method: string, path: string, body?: unknown, headers: Record<string, string> = {}) => {
  const r = await fetch(`${server.url}${path}`, { method, headers: { "content-type": "application/json", ...headers }, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) })
  return { status: r.status, body: (await r.json()) as Record<string, unknown> }
}

/** Polls an operation until it is done. */
const outcome = async (id: string) => {
  for (;;) {
    const r = await call("GET", `/operations/${id}`)
    if (r.status !== 408) return r
  }
}

describe("gyre's Loops data-plane server", () => {
  it("refuses what the wire does not have, by name", async () => {
    const key = { "idempotency-key": "k-strict" }
    const noKey = await call("POST", "/forward", { data: [datum], loss_fn: "cross_entropy" })
    assert.strictEqual(noKey.status, 400)
    assert.include(String(noKey.body["detail"]), "Idempotency-Key")
    const unknown = await call("POST", "/forward", { data: [datum], loss_fn: "cross_entropy", frobnicate: 1 }, key)
    assert.strictEqual(unknown.status, 422)
    assert.include(String(unknown.body["detail"]), "body.frobnicate: unknown field")
    const badLoss = await call("POST", "/forward", { data: [datum], loss_fn: "grpo" }, key)
    assert.strictEqual(badLoss.status, 422)
    assert.include(String(badLoss.body["detail"]), "body.loss_fn")
    assert.strictEqual((await call("GET", "/api/v1/healthz")).status, 404)
    assert.strictEqual((await call("GET", "/forward_backward")).status, 405)
    const echo = await call("POST", "/v1/completions", { model: RANDOM_MODEL, prompt: [65], max_tokens: 2, echo: true })
    assert.strictEqual(echo.status, 422)
    assert.include(String(echo.body["detail"]), "body.echo: unknown field")
    assert.strictEqual((await call("POST", "/v1/completions", { model: "other", prompt: [65], max_tokens: 2 })).status, 404)
    assert.strictEqual((await call("GET", "/operations/nope")).status, 404)
  })

  it("runs an operation once per idempotency key, and answers its result or its error", async () => {
    const body = { data: [datum], loss_fn: "cross_entropy" }
    const a = await call("POST", "/forward", body, { "idempotency-key": "k-once" })
    const b = await call("POST", "/forward", body, { "idempotency-key": "k-once" })
    assert.strictEqual(a.status, 202, JSON.stringify(a.body))
    assert.strictEqual(a.body["operation_id"], b.body["operation_id"])
    const done = await outcome(String(a.body["operation_id"]))
    assert.strictEqual(done.body["status"], "done")
    const result = done.body["result"] as { loss: number; loss_fn_outputs: Array<{ logprobs: { data: Array<number> } }> }
    assert.isAbove(result.loss, 0)
    assert.lengthOf(result.loss_fn_outputs[0]!.logprobs.data, 2)
    const reused = await call("POST", "/forward", { ...body, data: [datum, datum] }, { "idempotency-key": "k-once" })
    assert.strictEqual(reused.status, 409)
    // a token outside the vocabulary is refused at submission, by the Tinker wire's checks, naming it
    const outside = { ...datum, model_input: { chunks: [{ type: "encoded_text", tokens: [65, 9999] }] } }
    const refused = await call("POST", "/forward", { data: [outside], loss_fn: "cross_entropy" }, { "idempotency-key": "k-bad" })
    assert.strictEqual(refused.status, 422)
    assert.match(String(refused.body["detail"]), /^body\.data\[0\]\.model_input.*9999/)
  })
})

const fakeWith = (options: Partial<FakeOptions> = {}) =>
  Effect.acquireRelease(
    Effect.promise(() => startFake({ apiKey: KEY, dataPlane: server.url, models: [RANDOM_MODEL], contextLength: 64, ...options })),
    (fake) => Effect.promise(() => fake.close()),
  )

const runDir = () => Path.join(Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-loops-wire-")), "r")

const train = (fake: Fake, dir: string, steps = 3, options: Partial<Loops.Options> = {}, settings: Partial<Runner.RunSettings> = {}) =>
  Runner.run(toySettings(dir, { steps, groups: 2, groupSize: 4, saveEvery: 2, logRolloutsEvery: 0, ...settings }), vowels, { resume: false }).pipe(
    Effect.provide(
      Layer.fresh(Layer.merge(
        Loops.layer({ baseModel: RANDOM_MODEL, loraRank: 4, runDir: dir, resume: false, url: fake.url, apiKey: Redacted.make(KEY), retry: Retry.fast, pollInterval: "20 millis", ...options }),
        Layer.succeed(Tokenizer, CharTokenizer.make()),
      )),
    ),
    quiet,
  )

describe("--backend loops over the Loops data plane", () => {
  it.live("probes the protocol, trains 3 steps through submit + operations and /v1/completions, records the protocol, deactivates once", () =>
    Effect.gen(function* () {
      const fake = yield* fakeWith()
      const dir = runDir()
      const logs = capture()
      const metrics = yield* train(fake, dir).pipe(Effect.provide(logs.layer))
      assert.deepStrictEqual(metrics.map((m) => m["step"]), [1, 2, 3])
      const [run] = [...fake.runs.values()]
      assert.strictEqual(fake.deactivations(run!.id), 1)
      assert.isTrue(logs.lines.some((l) => l.includes(`training on run ${run!.id} over the Loops data plane`)), logs.lines.join("\n"))
      assert.strictEqual((yield* RunRecord.read(dir))?.runs[0]?.dataPlane, "loops")
      const paths = fake.entriesOf(run!.id).map((e) => `${e.kind} ${e.method} ${e.path.replace(/^\/dp\/[^/]+\/(trainer|sampler)/, "").replace(/\/operations\/.*/, "/operations/{id}")}`)
      for (const p of ["trainer GET /policy_version", "trainer POST /forward_backward", "trainer POST /optim_step", "trainer POST /save_weights_for_sampler", "trainer POST /save_state", "trainer GET /operations/{id}", "sampler GET /v1/models", "sampler POST /v1/completions"]) {
        assert.include(paths, p, `no ${p} in ${[...new Set(paths)].join(", ")}`)
      }
      assert.isFalse(paths.some((p) => p.includes("/api/v1")), "no Tinker route")
      // a step's operations are submitted back to back, before the first is polled (the trainer runs them in submission order)
      const trainer = paths.filter((p) => p.startsWith("trainer ")).join("\n")
      assert.include(trainer, "trainer POST /forward_backward\ntrainer POST /optim_step\ntrainer POST /save_weights_for_sampler", trainer)
      assert.isTrue(fake.log.filter((e) => e.kind === "trainer" || e.kind === "sampler").every((e) => e.headers.includes(`Api-Key ${KEY}`)))
    }).pipe(Effect.scoped))

  it.live("--teacher loops:<run id>: a run left up scores the student's tokens through its sampler's prompt log-probs, and stays up", () =>
    Effect.gen(function* () {
      const fake = yield* fakeWith()
      yield* train(fake, runDir(), 1, { keepRun: true })
      const [teacherRun] = [...fake.runs.values()]
      const given = `loops:${teacherRun!.id}`
      const before = fake.entriesOf(teacherRun!.id).length
      const metrics = yield* train(fake, runDir(), 2, { teacher: given }, { teacher: { given, model: given, served: true, coef: 1 } })
      assert.deepStrictEqual(metrics.map((m) => m["step"]), [1, 2])
      for (const row of metrics) assert.isAbove(row["kl/policy_ref_tokens"]!, 0)
      const scored = fake.entriesOf(teacherRun!.id).slice(before).filter((e) => e.kind === "sampler" && e.method === "POST" && e.path.endsWith("/v1/completions"))
      assert.isAtLeast(scored.length, 2, "the teacher's sampler scored the student's samples")
      assert.strictEqual(fake.deactivations(teacherRun!.id), 0, "the student leaves the teacher's run up")
      const student = [...fake.runs.values()].find((r) => r.id !== teacherRun!.id)!
      assert.strictEqual(fake.deactivations(student.id), 1)

      const wrong = yield* Effect.exit(train(fake, runDir(), 1, { teacher: "tinker://elsewhere/sampler_weights/x" }, { teacher: { given: "x", model: "x", served: true, coef: 1 } }))
      assert.include(String(wrong), "on the Loops data plane a teacher is another Loops run")
      // a teacher run that is not there stops the start before a run is provisioned
      const runs = fake.runs.size
      const gone = yield* Effect.exit(train(fake, runDir(), 1, { teacher: "loops:no-such-run" }, { teacher: { given: "loops:no-such-run", model: "loops:no-such-run", served: true, coef: 1 } }))
      assert.include(String(gone), "--teacher loops:no-such-run")
      assert.strictEqual(fake.runs.size, runs, "no run was provisioned")
    }).pipe(Effect.scoped))

  it.live("a training operation the trainer refuses (its first publication) fails the run after it was created, and the run is deactivated once", () =>
    Effect.gen(function* () {
      const fake = yield* fakeWith({ fault: ({ kind, method, path }) => (kind === "trainer" && method === "POST" && path.endsWith("/save_weights_for_sampler") ? { status: 422, body: { detail: "refused by the test" } } : undefined) })
      const exit = yield* Effect.exit(train(fake, runDir(), 1))
      assert.isTrue(exit._tag === "Failure")
      const [run] = [...fake.runs.values()]
      assert.strictEqual(fake.deactivations(run!.id), 1)
    }).pipe(Effect.scoped))

  it.live("a run the control plane ends mid-training (its trainer answering 404) fails naming its status, and is deactivated once", () =>
    Effect.gen(function* () {
      let ended = false
      const fake = yield* fakeWith({
        shapeRun: (json) => (ended ? { ...json, status: { name: "TERMINATED" } } : json),
        fault: ({ kind, n, path }) => {
          // the run ends as step 2 samples (its first step sampled twice, once per group)
          if (kind === "sampler" && path.endsWith("/v1/completions") && n === 3) ended = true
          return ended && (kind === "trainer" || kind === "sampler") ? { status: 404, body: { detail: "no such deployment" } } : undefined
        },
      })
      const exit = yield* Effect.exit(train(fake, runDir(), 4))
      const [run] = [...fake.runs.values()]
      assert.include(String(exit), `Loops run ${run!.id} is TERMINATED`)
      assert.strictEqual(fake.deactivations(run!.id), 1)
    }).pipe(Effect.scoped))

  it.live("an operation the trainer lost (404 on its poll) is submitted again under the same key and runs once", () =>
    Effect.gen(function* () {
      let polls = 0
      const fake = yield* fakeWith({ fault: ({ kind, path }) => (kind === "trainer" && path.includes("/operations/") && ++polls === 2 ? { status: 404, body: { detail: "evicted" } } : undefined) })
      const before = server.operations()
      const logs = capture()
      const metrics = yield* train(fake, runDir(), 1).pipe(Effect.provide(logs.layer))
      assert.deepStrictEqual(metrics.map((m) => m["step"]), [1])
      assert.isTrue(logs.lines.some((l) => l.includes("submitting it again under the same key")), logs.lines.join("\n"))
      const [run] = [...fake.runs.values()]
      const submissions = fake.entriesOf(run!.id).filter((e) => e.kind === "trainer" && e.method === "POST")
      const keys = new Set(submissions.map((e) => /[0-9a-f]{32}/.exec(e.headers)?.[0]))
      assert.strictEqual(submissions.length, keys.size + 1, "one operation submitted twice")
      assert.strictEqual(server.operations() - before, keys.size, "each key ran once")
    }).pipe(Effect.scoped))
})

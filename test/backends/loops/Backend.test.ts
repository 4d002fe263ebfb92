/**
 * `--backend loops` end to end, in process: the fake control plane provisions a run
 * whose trainer and sampler URLs forward to a gyre `serve`; the runner trains on it;
 * the run is deactivated exactly once with no request after it, whether training ends,
 * fails or is interrupted, and when the run never becomes ready. A run the control
 * plane ends mid-training (its data plane answering 503s or 404s) fails the training at
 * once, naming its status. The API key appears in no log line and no error.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Layer, Redacted } from "effect"
import * as CharTokenizer from "../../../src/backends/local/CharTokenizer.ts"
import * as Retry from "../../../src/backends/http/client/Retry.ts"
import * as Loops from "../../../src/backends/loops/Backend.ts"
import * as RunRecord from "../../../src/backends/loops/RunRecord.ts"
import { backendLayer } from "../../../src/app/Backend.ts"
import * as RunLog from "../../../src/folder/RunLog.ts"
import * as Runner from "../../../src/Runner.ts"
import { Tokenizer } from "../../../src/services/Tokenizer.ts"
import vowels, { quiet, toySettings } from "../../envs/vowels.ts"
import { capture, RANDOM_MODEL } from "./DataPlane.ts"
import { fakeLoops } from "./FakeLoops.ts"
import { type Fake, type FakeRun } from "./FakeControlPlane.ts"

const KEY = "bt-secret-key-0123456789"

const { fakeWith } = fakeLoops(KEY)

const runDir = () => Path.join(Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-loops-")), "r")

const backend = (fake: Fake, dir: string, options: Partial<Loops.Options> = {}) =>
  Layer.merge(
    Loops.layer({
      baseModel: RANDOM_MODEL,
      loraRank: 4,
      runDir: dir,
      resume: false,
      url: fake.url,
      apiKey: Redacted.make(KEY),
      retry: Retry.fast,
      pollInterval: "20 millis",
      ...options,
    }),
    Layer.succeed(Tokenizer, CharTokenizer.make()),
  )

const train = (fake: Fake, dir: string, options: Partial<Loops.Options> = {}, steps = 3) =>
  Runner.run(toySettings(dir, { steps, groups: 2, groupSize: 4, saveEvery: 2, logRolloutsEvery: 0 }), vowels, { resume: options.resume ?? false }).pipe(
    Effect.provide(Layer.fresh(backend(fake, dir, options))),
    quiet,
  )

/** The one run the fake created, deactivated exactly once, and nothing asked of it after that. */
const assertDeactivatedOnce = (fake: Fake) => {
  assert.strictEqual(fake.runs.size, 1, "one run provisioned")
  const [run] = [...fake.runs.values()]
  assert.strictEqual(fake.deactivations(run!.id), 1, "deactivated exactly once")
  const entries = fake.entriesOf(run!.id)
  const at = entries.findIndex((e) => e.path.endsWith("/deactivate"))
  assert.strictEqual(at, entries.length - 1, `no request after the deactivation: ${entries.slice(at + 1).map((e) => `${e.method} ${e.path}`).join(", ")}`)
  assert.isFalse(run!.active)
  return run!
}

const assertNoKey = (texts: ReadonlyArray<string>) => {
  for (const t of texts) assert.notInclude(t, KEY)
}

describe("loops backend", () => {
  it.live("provisions, waits until ready, trains 3 steps on the run's trainer and sampler, and deactivates once", () =>
    Effect.gen(function* () {
      const fake = yield* fakeWith({ readyAfterPolls: 3 })
      const dir = runDir()
      const logs = capture()
      const metrics = yield* train(fake, dir).pipe(Effect.provide(logs.layer))
      assert.deepStrictEqual(metrics.map((m) => m["step"]), [1, 2, 3])
      const run = assertDeactivatedOnce(fake)
      const entries = fake.entriesOf(run.id)
      assert.isTrue(entries.some((e) => e.kind === "trainer" && e.path.endsWith("/forward_backward")), "training went to the trainer URL")
      assert.isTrue(entries.some((e) => e.kind === "sampler" && e.path.endsWith("/asample")), "sampling went to the sampler URL")
      assert.isFalse(entries.some((e) => e.kind === "trainer" && e.path.endsWith("/asample")), "no sampling on the trainer URL")
      const waiting = logs.lines.filter((l) => l.includes(`waiting for run ${run.id}`))
      assert.isAtLeast(waiting.length, 1, logs.lines.join("\n"))
      assert.isTrue(logs.lines.some((l) => l.includes(`run ${run.id} is ready`)))
      const record = yield* RunRecord.read(dir)
      assert.strictEqual(record?.controlPlane, fake.url)
      // the run's trainer speaks Tinker's wire (a gyre serve): probed, said and recorded
      assert.strictEqual(record?.runs[0]?.dataPlane, "tinker")
      assert.isTrue(logs.lines.some((l) => l.includes(`training on run ${run.id} over the Tinker HTTP protocol`)), logs.lines.join("\n"))
      assert.isNotNull(record?.runs[0]?.deactivatedAt)
      assertNoKey(logs.lines)
      // the data plane got the key; the control plane's answers never echo it
      assert.isTrue(fake.log.filter((e) => e.kind === "control").every((e) => e.authorized))
    }).pipe(Effect.scoped))

  it.live("a failure mid-run deactivates the run", () =>
    Effect.gen(function* () {
      const fake = yield* fakeWith({
        fault: ({ kind, n, path }) => (kind === "trainer" && path.endsWith("/forward_backward") && n === 2 ? { status: 400, body: { detail: "injected failure" } } : undefined),
      })
      const dir = runDir()
      const logs = capture()
      const exit = yield* Effect.exit(train(fake, dir).pipe(Effect.provide(logs.layer)))
      assert.isTrue(Exit.isFailure(exit))
      assert.include(String(Exit.isFailure(exit) ? exit.cause : ""), "injected failure")
      assertDeactivatedOnce(fake)
      assertNoKey([...logs.lines, String(exit)])
    }).pipe(Effect.scoped))

  it.live("an interruption mid-run deactivates the run", () =>
    Effect.gen(function* () {
      const fake = yield* fakeWith()
      const dir = runDir()
      const fiber = yield* Effect.forkChild(train(fake, dir, {}, 50))
      const metrics = RunLog.paths(dir).metrics
      while (!Fs.existsSync(metrics) || Fs.readFileSync(metrics, "utf8").split("\n").length < 3) yield* Effect.sleep("20 millis")
      yield* Fiber.interrupt(fiber)
      assertDeactivatedOnce(fake)
    }).pipe(Effect.scoped))

  it.live("a run the control plane ends mid-training, its data plane answering 503, fails at once naming its status and message", () =>
    Effect.gen(function* () {
      let ended = false
      const fake = yield* fakeWith({
        shapeRun: (json) => (ended ? { ...json, status: { name: "TERMINATED", message: "node lost" } } : json),
        fault: ({ kind, n, path }) => {
          // the run ends as step 2 samples (its first step sampled twice, once per group)
          if (kind === "sampler" && path.endsWith("/asample") && n === 3) ended = true
          return ended && (kind === "trainer" || kind === "sampler") ? { status: 503, body: { detail: "no healthy upstream" } } : undefined
        },
      })
      const logs = capture()
      const exit = yield* Effect.exit(train(fake, runDir(), {}, 5).pipe(Effect.provide(logs.layer)))
      const run = assertDeactivatedOnce(fake)
      assert.isTrue(Exit.isFailure(exit))
      assert.include(String(exit), `Loops run ${run.id} is TERMINATED (node lost)`)
      assert.include(String(exit), "--loops-new-run")
      const unanswered = fake.entriesOf(run.id).filter((e) => e.status === 503).length
      assert.isAtLeast(unanswered, 1)
      assert.isBelow(unanswered, 50, "not retried for minutes")
      assertNoKey([...logs.lines, String(exit)])
    }).pipe(Effect.scoped))

  it.live("a run the control plane ends mid-training, its data plane answering a bare 404, fails naming its status", () =>
    Effect.gen(function* () {
      const runs: Array<FakeRun> = []
      const fake = yield* fakeWith({
        shapeRun: (json, r) => (r.active ? json : { ...json, status: { name: "FAILED", message: "trainer crashed: CUDA out of memory" } }),
        fault: ({ kind, n, path }) => {
          if (kind === "sampler" && path.endsWith("/asample") && n === 3) for (const r of runs) r.active = false
          return undefined
        },
      })
      const dir = runDir()
      const exit = yield* Effect.exit(
        Effect.gen(function* () {
          const fiber = yield* Effect.forkChild(train(fake, dir, {}, 5))
          while (fake.runs.size === 0) yield* Effect.sleep("5 millis")
          runs.push(...fake.runs.values())
          return yield* Fiber.join(fiber)
        }),
      )
      const [run] = [...fake.runs.values()]
      assert.isTrue(Exit.isFailure(exit))
      assert.include(String(exit), `Loops run ${run!.id} is FAILED (trainer crashed: CUDA out of memory)`)
      assert.strictEqual(fake.deactivations(run!.id), 1)
    }).pipe(Effect.scoped))

  it.live("a run that never becomes ready fails naming the run and its state, and is deactivated", () =>
    Effect.gen(function* () {
      const fake = yield* fakeWith({ neverReady: true })
      const dir = runDir()
      const logs = capture()
      const exit = yield* Effect.exit(train(fake, dir, { readyTimeout: "300 millis" }).pipe(Effect.provide(logs.layer)))
      const run = assertDeactivatedOnce(fake)
      assert.isTrue(Exit.isFailure(exit))
      const text = String(exit)
      assert.include(text, `Loops run ${run.id} was not ready after`)
      assert.match(text, /last state: run ACTIVE, trainer DEPLOYING, sampler LOADING_MODEL/)
      assert.isFalse(fake.entriesOf(run.id).some((e) => e.kind === "trainer" || e.kind === "sampler"), "no data-plane request")
      assertNoKey([...logs.lines, text])
    }).pipe(Effect.scoped))

  it.live("--keep-run leaves the run up and names it; the next fresh start in the folder is refused; --resume trains on it", () =>
    Effect.gen(function* () {
      const fake = yield* fakeWith()
      const dir = runDir()
      const logs = capture()
      yield* train(fake, dir, { keepRun: true }, 2).pipe(Effect.provide(logs.layer))
      const [run] = [...fake.runs.values()]
      assert.strictEqual(fake.deactivations(run!.id), 0)
      assert.isTrue(logs.lines.some((l) => l.includes(`gyre loops deactivate ${run!.id}`)), logs.lines.join("\n"))
      assert.deepStrictEqual(RunRecord.live(yield* RunRecord.read(dir)).map((r) => r.id), [run!.id])

      const again = yield* Effect.exit(train(fake, dir))
      assert.include(String(again), `records Loops run ${run!.id}`)
      assert.include(String(again), "still ACTIVE and billing")
      assert.strictEqual(fake.runs.size, 1, "no second run")

      const resumed = yield* train(fake, dir, { resume: true }, 3)
      assert.deepStrictEqual(resumed.map((m) => m["step"]), [3])
      assert.strictEqual(fake.runs.size, 1, "the live run was reused")
      assertDeactivatedOnce(fake)
    }).pipe(Effect.scoped))

  it.live("--teacher loops:<run id> of a run that speaks Tinker's protocol is refused, saying to name its sampler path", () =>
    Effect.gen(function* () {
      const fake = yield* fakeWith()
      yield* train(fake, runDir(), { keepRun: true }, 1)
      const [teacherRun] = [...fake.runs.values()]
      const given = `loops:${teacherRun!.id}`
      const exit = yield* Effect.exit(
        Runner.run(toySettings(runDir(), { steps: 1, groups: 2, groupSize: 4, saveEvery: 0, logRolloutsEvery: 0, teacher: { given, model: given, served: true, coef: 1 } }), vowels, { resume: false }).pipe(
          Effect.provide(Layer.fresh(backend(fake, runDir(), { teacher: given }))),
          quiet,
        ),
      )
      assert.include(String(exit), "that run speaks Tinker's protocol")
      assert.include(String(exit), "--teacher <its sampler path>")
      assert.strictEqual(fake.deactivations(teacherRun!.id), 0, "the teacher's run is left up")
      // the student's run, provisioned before the teacher was refused, is deactivated once
      const student = [...fake.runs.values()].find((r) => r.id !== teacherRun!.id)
      assert.isDefined(student)
      assert.strictEqual(fake.deactivations(student!.id), 1)
    }).pipe(Effect.scoped))

  it.live("--resume of a folder whose run is gone says so and how to continue; --loops-new-run provisions a new one", () =>
    Effect.gen(function* () {
      const fake = yield* fakeWith()
      const dir = runDir()
      yield* train(fake, dir, { keepRun: true }, 2)
      const [old] = [...fake.runs.values()]
      old!.active = false
      const gone = yield* Effect.exit(train(fake, dir, { resume: true }, 3))
      const text = String(gone)
      assert.include(text, `Loops run ${old!.id} of ${dir} is gone (INACTIVE)`)
      assert.include(text, "--loops-new-run")
      assert.strictEqual(fake.runs.size, 1)
      const resumed = yield* train(fake, dir, { resume: true, newRun: true }, 3)
      assert.deepStrictEqual(resumed.map((m) => m["step"]), [3])
      assert.strictEqual(fake.runs.size, 2)
      const fresh = [...fake.runs.values()].find((r) => r.id !== old!.id)!
      assert.strictEqual(fake.deactivations(fresh.id), 1)
      assert.deepStrictEqual(RunRecord.live(yield* RunRecord.read(dir)), [])
    }).pipe(Effect.scoped))

  it.live("a start on another backend in a folder whose Loops run was left up warns, naming the run and the command that stops it", () =>
    Effect.gen(function* () {
      const dir = runDir()
      yield* RunRecord.add(dir, "http://loops.example", { id: "left1", sessionId: "s", baseModel: "m", createdAt: "t", deactivatedAt: null })
      const logs = capture()
      yield* Effect.scoped(Layer.build(backendLayer({ backend: "embedded", seed: 0, stateDir: RunLog.paths(dir).state, model: undefined, loraRank: undefined, tokenizer: undefined, workers: false, runDir: dir }))).pipe(
        Effect.provide(logs.layer),
      )
      const line = logs.lines.find((l) => l.includes("left1"))
      assert.isDefined(line, logs.lines.join("\n"))
      assert.include(line!, "it may still be billing")
      assert.include(line!, "gyre loops deactivate left1 --loops-url http://loops.example")
    }))

  it.live("a deactivation that fails is logged as an error with the command to run, and the run stays recorded as live", () =>
    Effect.gen(function* () {
      const fake = yield* fakeWith({ fault: ({ path }) => (path.endsWith("/deactivate") ? { status: 400, body: { detail: "refused" } } : undefined) })
      const dir = runDir()
      const logs = capture()
      yield* train(fake, dir, {}, 1).pipe(Effect.provide(logs.layer))
      const [run] = [...fake.runs.values()]
      assert.isTrue(run!.active)
      const line = logs.lines.find((l) => l.startsWith("ERROR") && l.includes(`could not deactivate run ${run!.id}`))
      assert.isDefined(line, logs.lines.join("\n"))
      assert.include(line!, `gyre loops deactivate ${run!.id} --loops-url ${fake.url}`)
      assert.deepStrictEqual(RunRecord.live(yield* RunRecord.read(dir)).map((r) => r.id), [run!.id])
      assertNoKey(logs.lines)
    }).pipe(Effect.scoped))
})

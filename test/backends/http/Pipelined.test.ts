/**
 * Pipelined training calls, seen from the server: the client's `submit` queues
 * `optim_step` before `forward_backward` has run, a clock-cycle server (`serve
 * --clock-cycle`) runs a step's calls submitted back to back in one cycle, a sync run
 * uses one cycle per step (with micro-batches too), and a run whose training call keeps
 * failing stops at once when interrupted, keeping its last checkpoint.
 */
import * as Fs from "node:fs"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Layer, Schema, type Scope } from "effect"
import * as Client from "../../../src/backends/http/client/Client.ts"
import type { ClockReport } from "../../../src/backends/http/server/ClockCycle.ts"
import * as Retry from "../../../src/backends/http/client/Retry.ts"
import * as Server from "../../../src/backends/http/server/Server.ts"
import { Local } from "../../../src/backends/local/index.ts"
import { adamParams } from "../../../src/contract/Contract.ts"
import * as D from "../../../src/vocabulary/Datum.ts"
import * as RunLog from "../../../src/folder/RunLog.ts"
import * as Runner from "../../../src/Runner.ts"
import { Sampler } from "../../../src/services/Sampler.ts"
import { Tokenizer } from "../../../src/services/Tokenizer.ts"
import { submitter, Trainer } from "../../../src/services/Trainer.ts"
import vowels, { quiet, TINY, toySettings } from "../../envs/vowels.ts"
import { makeToy } from "./ToyBackend.ts"

const datum = D.rl({ prompt: [1, 2, 3], completion: [4, 5], samplerLogprobs: [-1, -1], advantage: 1 })

/** The clock's counts, read over HTTP as any client would. */
const clockOf = (url: string) =>
  Effect.promise(async () => (await (await fetch(`${url}/api/v1/clock`)).json()) as ClockReport)

/** Waits until the clock has just started a new cycle, so the next calls have a whole cycle to arrive in. */
const cycleStart = (url: string) =>
  Effect.gen(function* () {
    const first = (yield* clockOf(url)).cycles
    while ((yield* clockOf(url)).cycles === first) yield* Effect.sleep("5 millis")
  })

/** The one model's busy cycles and operations. */
const modelCycles = (report: ClockReport) => {
  const models = Object.values(report.models)
  assert.strictEqual(models.length, 1)
  return models[0]!
}

describe("pipelined training calls", () => {
  it.live("optim_step is received before its forward_backward has finished, and runs after it", () =>
    Effect.gen(function* () {
      const toy = makeToy()
      const release = yield* Deferred.make<void>()
      const events: Array<string> = []
      // test double: the toy trainer, its forward_backward held until released, every call logged
      const held = {
        ...toy.trainer,
        forwardBackward: (...args: Parameters<typeof toy.trainer.forwardBackward>) =>
          Effect.sync(() => events.push("forward_backward started")).pipe(
            Effect.andThen(Deferred.await(release)),
            Effect.andThen(toy.trainer.forwardBackward(...args)),
            Effect.tap(() => Effect.sync(() => events.push("forward_backward finished"))),
          ),
        optimStep: (...args: Parameters<typeof toy.trainer.optimStep>) =>
          Effect.sync(() => events.push("optim_step started")).pipe(Effect.andThen(toy.trainer.optimStep(...args))),
      }
      const server = yield* Server.make({}).pipe(Effect.provideService(Trainer, held), Effect.provideService(Sampler, toy.sampler))
      yield* Effect.gen(function* () {
        const submit = submitter(yield* Trainer)
        const backward = yield* submit.forwardBackward([datum], "importance_sampling")
        const step = yield* submit.optimStep(adamParams({ learningRate: 0.1 }))
        // both submissions were answered: the server holds both calls while forward_backward has not finished
        assert.strictEqual(server.stats.executed["ForwardBackward"], undefined)
        assert.strictEqual(server.stats.executed["OptimStep"], undefined)
        assert.isAtLeast(server.stats.pending, 2)
        yield* Deferred.succeed(release, undefined)
        const out = yield* backward
        const optim = yield* step
        assert.strictEqual(out.lossFnOutputs.length, 1)
        assert.strictEqual(optim.version, 1)
        assert.deepStrictEqual(events, ["forward_backward started", "forward_backward finished", "optim_step started"])
      }).pipe(Effect.provide(Client.layer({ baseUrl: server.url, retry: Retry.fast })))
    }).pipe(Effect.scoped))

  it.live("a clock-cycle server runs calls submitted back to back in one cycle, and calls awaited one by one in one cycle each", () =>
    Effect.gen(function* () {
      const toy = makeToy()
      // a cycle of a second: three submissions on loopback take milliseconds, even on a loaded machine
      const server = yield* Server.make({ simulate: { cycleMillis: 1000 } }).pipe(Effect.provideService(Trainer, toy.trainer), Effect.provideService(Sampler, toy.sampler))
      yield* Effect.gen(function* () {
        const trainer = yield* Trainer
        const submit = submitter(trainer)
        yield* cycleStart(server.url)
        const calls = [
          yield* submit.forwardBackward([datum], "importance_sampling"),
          yield* submit.optimStep(adamParams({ learningRate: 0.1 })),
          yield* submit.saveWeightsForSampler("step-1"),
        ]
        for (const call of calls) yield* call
        assert.deepStrictEqual(modelCycles(yield* clockOf(server.url)), { busy_cycles: 1, operations: 3 })
        yield* trainer.forwardBackward([datum], "importance_sampling")
        yield* trainer.optimStep(adamParams({ learningRate: 0.1 }))
        yield* trainer.saveWeightsForSampler("step-2")
        assert.deepStrictEqual(modelCycles(yield* clockOf(server.url)), { busy_cycles: 4, operations: 6 })
        const report = yield* clockOf(server.url)
        assert.isAtLeast(report.cycles, 4)
        assert.strictEqual(report.cycle_ms, 1000)
      }).pipe(Effect.provide(Client.layer({ baseUrl: server.url, retry: Retry.fast })))
    }).pipe(Effect.scoped))

  it.live("the clock route says how to turn the clock on when it is off", () =>
    Effect.gen(function* () {
      const toy = makeToy()
      const server = yield* Server.make({}).pipe(Effect.provideService(Trainer, toy.trainer), Effect.provideService(Sampler, toy.sampler))
      const answer = yield* Effect.promise(() => fetch(`${server.url}/api/v1/clock`).then(async (r) => ({ status: r.status, body: await r.text() })))
      assert.strictEqual(answer.status, 404)
      assert.include(answer.body, "--clock-cycle")
    }).pipe(Effect.scoped))
})

/** The embedded tiny model behind a server (with `simulate`), and the run's services over HTTP to it. */
const overHttp = (stateDir: string, options: Server.Options, proxy?: (upstream: string) => Effect.Effect<string, never, Scope.Scope>) =>
  Effect.gen(function* () {
    const local = yield* Layer.build(Local.layer({ config: TINY, seed: 0, stateDir, lora: { rank: 4, alpha: 8, targets: ["q", "v"] } }))
    const server = yield* Server.make(options).pipe(Effect.provide(local))
    const url = proxy === undefined ? server.url : yield* proxy(server.url)
    const tokenizer = yield* Effect.provide(Effect.gen(function* () {
      return yield* Tokenizer
    }), local)
    return { server, layer: Layer.merge(Client.layer({ baseUrl: url, retry: options.simulate ? Retry.fast : Retry.standard }), Layer.succeed(Tokenizer, tokenizer)) }
  })

describe("runs over a clock-cycle server", () => {
  it.live.each([0, 3])("a sync run (micro-batch %d) trains each step in about one cycle, where awaiting each call takes one per call", (microBatch) =>
    Effect.gen(function* () {
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-cycles-"))
      const { server, layer } = yield* overHttp(RunLog.paths(dir).state, { simulate: { cycleMillis: 400 } })
      const settings = toySettings(dir, { steps: 3, groups: 2, groupSize: 4, microBatch, saveEvery: 0, logRolloutsEvery: 0, hackWatchEvery: 0 })
      const rows = yield* Runner.run(settings, vowels).pipe(Effect.provide(layer), quiet)
      const trained = rows.filter((r) => (r["train/datums"] ?? 0) > 0)
      assert.isAbove(trained.length, 0)
      const model = modelCycles(yield* clockOf(server.url))
      // a trained step's calls: forward_backward (one per chunk), optim_step, save_weights_for_sampler
      const calls = trained.reduce((n, r) => n + (microBatch > 0 ? Math.ceil(r["train/datums"]! / microBatch) : 1) + 2, 0)
      // the run's first publish and last checkpoint, one cycle each
      assert.strictEqual(model.operations, calls + 2)
      // back to back, a step's calls share a cycle; a boundary may fall inside its few milliseconds of
      // submissions (a loaded machine), so at most two per step are allowed. Awaiting each call takes one per call.
      assert.isAtMost(model.busy_cycles, 2 * trained.length + 2, `${JSON.stringify(model)} for ${trained.length} trained steps (${calls} calls)`)
      if (microBatch > 0) assert.isAbove(calls, 3 * trained.length)
    }).pipe(Effect.scoped))
})

/** Test double: a loopback proxy that answers 500 to every `forward_backward` after the first `allow`, and forwards the rest. */
const failingTraining = (allow: number, seen: { failed: number }) => (upstream: string) =>
  Effect.acquireRelease(
    Effect.promise(
      () =>
        new Promise<http.Server>((resolve) => {
          let passed = 0
          const proxy = http.createServer((req, res) => {
            if (req.url?.endsWith("/forward_backward") && passed++ >= allow) {
              seen.failed++
              req.resume()
              res.writeHead(500, { "content-type": "application/json" }).end(JSON.stringify({ detail: "injected failure" }))
              return
            }
            const out = http.request(`${upstream}${req.url}`, { method: req.method, headers: req.headers }, (r) => {
              res.writeHead(r.statusCode ?? 502, r.headers)
              r.pipe(res)
            })
            req.pipe(out)
          })
          proxy.listen(0, "127.0.0.1", () => resolve(proxy))
        }),
    ),
    (proxy) => Effect.promise(() => new Promise<void>((resolve) => proxy.close(() => resolve()))),
  ).pipe(Effect.map((proxy) => `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`))

describe("interrupting a run", () => {
  it.live("while its training call is being retried ends the run at once, with the last checkpoint intact", () =>
    Effect.gen(function* () {
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-interrupt-"))
      const seen = { failed: 0 }
      const { layer } = yield* overHttp(RunLog.paths(dir).state, {}, failingTraining(1, seen))
      // the standard retry policy would retry a 500 for minutes
      const run = yield* Effect.forkChild(Runner.run(toySettings(dir, { steps: 3, saveEvery: 1, logRolloutsEvery: 0, hackWatchEvery: 0 }), vowels).pipe(Effect.provide(layer), quiet))
      while (seen.failed < 2) yield* Effect.sleep("20 millis")
      const exit = yield* Fiber.interrupt(run).pipe(Effect.andThen(Fiber.await(run)))
      assert.isTrue(Exit.isFailure(exit))
      const checkpoints = Fs.readFileSync(Path.join(dir, "checkpoints.jsonl"), "utf8").trim().split("\n").map((l) => Schema.decodeUnknownSync(Schema.Struct({ step: Schema.Int, path: Schema.String }))(JSON.parse(l)))
      assert.deepStrictEqual(checkpoints.map((c) => c.step), [1])
      // the checkpoint's state was saved by the server, under the state folder it was given
      assert.isTrue(Fs.existsSync(Path.join(RunLog.paths(dir).state, "step-1.ckpt")), Fs.readdirSync(RunLog.paths(dir).state).join(", "))
      const metrics = Fs.readFileSync(Path.join(dir, "metrics.jsonl"), "utf8").trim().split("\n")
      assert.strictEqual(metrics.length, 1)
    }).pipe(Effect.scoped))
})

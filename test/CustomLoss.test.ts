/**
 * A custom loss written to equal `importance_sampling` gives the built-in's update: the
 * same gradient norm, the same weights after one optimizer step and the same loss, on the
 * embedded backend in-process and over HTTP against a real server on loopback. Bad
 * gradients fail naming the loss and the datum.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as Client from "../src/backends/http/client/Client.ts"
import * as Retry from "../src/backends/http/client/Retry.ts"
import * as Server from "../src/backends/http/server/Server.ts"
import * as Checkpoint from "../src/backends/local/Checkpoint.ts"
import { Local } from "../src/backends/local/index.ts"
import { Rng } from "../src/backends/local/Rng.ts"
import { adamParams, type Datum, modelInputTokens } from "../src/contract/Contract.ts"
import * as CustomLoss from "../src/vocabulary/CustomLoss.ts"
import { Sampler } from "../src/services/Sampler.ts"
import { Trainer } from "../src/services/Trainer.ts"
import { rlDatum, tinyConfig, tinyLora } from "./backends/local/helpers.ts"

type Backend = "in-process" | "http"

const stateRoot = fs.mkdtempSync(path.join(os.tmpdir(), "gyre-customloss-"))
let runs = 0

const backendLayer = (backend: Backend, stateDir: string): Layer.Layer<Trainer | Sampler, unknown, unknown> => {
  const local = { config: tinyConfig, lora: tinyLora, seed: 5, stateDir }
  if (backend === "in-process") return Local.layer(local)
  return Layer.unwrap(
    Effect.gen(function* () {
      const services = yield* Layer.build(Local.layer(local))
      const server = yield* Server.make({}).pipe(Effect.provide(services))
      return Client.layer({ baseUrl: server.url, retry: Retry.fast })
    }),
  )
}

/** importance_sampling by hand: mean over active positions of -exp(lp - q)·A, and its gradient. */
const handMadeIS = CustomLoss.make("hand-made importance_sampling", (data, logprobs) => {
  let n = 0
  for (const d of data) d.lossFnInputs["advantages"]!.data.forEach((a, t) => (n += t > 0 && a !== 0 ? 1 : 0))
  let loss = 0
  const gradients = data.map((d, i) => {
    const q = d.lossFnInputs["logprobs"]!.data
    const A = d.lossFnInputs["advantages"]!.data
    return logprobs[i]!.map((lp, t) => {
      if (t === 0 || A[t] === 0) return 0
      const rho = Math.exp(lp - q[t]!)
      loss += (-rho * A[t]!) / n
      return (-rho * A[t]!) / n
    })
  })
  return Effect.succeed({ loss, gradients, metrics: { "custom/tokens": n } })
})

const batch = (): Array<Datum> => {
  const rng = new Rng(21)
  return Array.from({ length: 6 }, (_, i) => rlDatum(rng, 2 + (i % 3), 3 + ((i * 5) % 7), { zeroSome: true }))
}

/** One step with the built-in loss or the custom one; the loss, gradient norm and saved weights. */
const step = (backend: Backend, data: ReadonlyArray<Datum>, custom: boolean) => {
  const stateDir = path.join(stateRoot, `run-${runs++}`)
  return Effect.gen(function* () {
    const trainer = yield* Trainer
    const loss = custom
      ? (yield* CustomLoss.forwardBackward(data, handMadeIS)).metrics["loss"]!
      : (yield* trainer.forwardBackward(data, "importance_sampling")).metrics["loss"]!
    const optim = yield* trainer.optimStep(adamParams({ learningRate: 1e-2, gradClipNorm: 0.5 }))
    const saved = yield* trainer.saveState("after")
    const file = fs.existsSync(saved.path) ? saved.path : path.join(stateDir, "after.ckpt")
    const ck = yield* Effect.promise(() => Checkpoint.read(file))
    const params = Object.entries(ck.tensors).filter(([k]) => k.startsWith("param/")).sort(([a], [b]) => a.localeCompare(b))
    return { loss, gradNorm: optim.metrics["grad_norm"]!, params }
  }).pipe(Effect.provide(backendLayer(backend, stateDir) as Layer.Layer<Trainer | Sampler, unknown>), Effect.scoped)
}

const maxDiff = (a: ReadonlyArray<readonly [string, Float32Array]>, b: ReadonlyArray<readonly [string, Float32Array]>) => {
  assert.deepStrictEqual(a.map(([k]) => k), b.map(([k]) => k))
  let m = 0
  a.forEach(([, x], j) => x.forEach((v, i) => (m = Math.max(m, Math.abs(v - b[j]![1][i]!)))))
  return m
}

describe("CustomLoss", () => {
  for (const backend of ["in-process", "http"] as const) {
    it.live(`${backend}: a hand-made importance_sampling gives the built-in's gradient`, () =>
      Effect.gen(function* () {
        const data = batch()
        const builtIn = yield* step(backend, data, false)
        const custom = yield* step(backend, data, true)
        assert.isAbove(builtIn.gradNorm, 0.5, "the clip must be engaged for the test to mean something")
        assert.closeTo(custom.gradNorm, builtIn.gradNorm, 1e-4 * builtIn.gradNorm)
        assert.closeTo(custom.loss, builtIn.loss, 1e-5 * Math.max(1, Math.abs(builtIn.loss)))
        assert.isBelow(maxDiff(custom.params, builtIn.params), 1e-6)
      }))
  }

  it.live("a gradient scaled by 2 doubles the gradient norm (the surrogate is not normalised away)", () =>
    Effect.gen(function* () {
      const data = batch()
      const twice = CustomLoss.make("twice", (d, lps) =>
        handMadeIS.fn(d, lps).pipe(Effect.map((o) => ({ loss: 2 * o.loss, gradients: o.gradients.map((g) => g.map((v) => 2 * v)) }))))
      const norm = (loss: CustomLoss.CustomLoss) =>
        Effect.gen(function* () {
          const trainer = yield* Trainer
          yield* CustomLoss.forwardBackward(data, loss)
          return (yield* trainer.optimStep(adamParams({ learningRate: 0 }))).metrics["grad_norm"]!
        }).pipe(Effect.provide(backendLayer("in-process", path.join(stateRoot, `run-${runs++}`)) as Layer.Layer<Trainer | Sampler, unknown>), Effect.scoped)
      const one = yield* norm(handMadeIS)
      const two = yield* norm(twice)
      assert.closeTo(two, 2 * one, 1e-4 * one)
    }))

  describe("bad gradients fail naming the loss and the datum", () => {
    const run = (loss: CustomLoss.CustomLoss) =>
      CustomLoss.forwardBackward(batch(), loss).pipe(
        Effect.flip,
        Effect.provide(backendLayer("in-process", path.join(stateRoot, `run-${runs++}`)) as Layer.Layer<Trainer | Sampler, unknown>),
        Effect.scoped,
      )
    it.live("wrong length", () =>
      Effect.gen(function* () {
        const e = yield* run(CustomLoss.make("short", (data, lps) => Effect.succeed({ loss: 0, gradients: lps.map((lp, d) => (d === 3 ? lp.slice(1) : lp.map(() => 0))) })))
        assert.strictEqual(e._tag, "CustomLossError")
        assert.match(e.message, /"short".*data\[3\].*length/)
      }))
    it.live("NaN", () =>
      Effect.gen(function* () {
        const e = yield* run(CustomLoss.make("nan", (data, lps) => Effect.succeed({ loss: 0, gradients: lps.map((lp, d) => lp.map((_, t) => (d === 2 && t === 4 ? NaN : 0.1))) })))
        assert.match(e.message, /"nan".*data\[2\].*position 4.*NaN/)
      }))
    it.live("one array too few", () =>
      Effect.gen(function* () {
        const e = yield* run(CustomLoss.make("few", (data, lps) => Effect.succeed({ loss: 0, gradients: lps.slice(1) })))
        assert.match(e.message, /"few".*5 gradient arrays for 6 datums/)
      }))
    it.live("a non-finite loss", () =>
      Effect.gen(function* () {
        const e = yield* run(CustomLoss.make("inf", (data, lps) => Effect.succeed({ loss: Infinity, gradients: lps.map((lp) => lp.map(() => 0)) })))
        assert.match(e.message, /"inf".*loss is Infinity/)
      }))
  })

  it.live("the loss sees one log-prob per position, 0 at position 0, and a user error passes through", () =>
    Effect.gen(function* () {
      const data = batch()
      class Mine {
        readonly _tag = "Mine"
      }
      const e = yield* CustomLoss.forwardBackward(
        data,
        CustomLoss.make("inspect", (d, lps) => {
          lps.forEach((lp, i) => {
            assert.strictEqual(lp.length, modelInputTokens(d[i]!.modelInput).length)
            assert.strictEqual(lp[0], 0)
            assert.isTrue(lp.slice(1).every((v) => v < 0 && Number.isFinite(v)))
          })
          return Effect.fail(new Mine())
        }),
      ).pipe(Effect.flip, Effect.provide(backendLayer("in-process", path.join(stateRoot, `run-${runs++}`)) as Layer.Layer<Trainer | Sampler, unknown>), Effect.scoped)
      assert.instanceOf(e, Mine)
    }))
})

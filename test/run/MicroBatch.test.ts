/**
 * A step's update does not depend on how its Datums are split into forward_backward
 * calls: 1, 2 and 7 chunks give the same weights after optim_step, the same loss and the
 * same gradient norm, on the embedded backend in-process, on worker threads, and over
 * HTTP against a real server on loopback.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as Client from "../../src/backends/http/client/Client.ts"
import * as Retry from "../../src/backends/http/client/Retry.ts"
import * as Server from "../../src/backends/http/server/Server.ts"
import * as Checkpoint from "../../src/backends/local/Checkpoint.ts"
import { Local } from "../../src/backends/local/index.ts"
import { Rng } from "../../src/backends/local/Rng.ts"
import { adamParams, type Datum, type LossFn, type LossFnConfig } from "../../src/contract/Contract.ts"
import { forwardBackwardChunked } from "../../src/loss/MicroBatch.ts"
import { Sampler } from "../../src/services/Sampler.ts"
import { Trainer } from "../../src/services/Trainer.ts"
import { ceDatum, rlDatum, tinyConfig, tinyLora } from "../backends/local/helpers.ts"

type Backend = "in-process" | "workers" | "http"

const stateRoot = fs.mkdtempSync(path.join(os.tmpdir(), "gyre-microbatch-"))
let runs = 0

const backendLayer = (backend: Backend, stateDir: string): Layer.Layer<Trainer | Sampler, unknown, unknown> => {
  const local = { config: tinyConfig, lora: tinyLora, seed: 5, stateDir }
  if (backend === "in-process") return Local.layer(local)
  if (backend === "workers") return Local.layer({ ...local, workers: true, trainerThreads: 2 })
  return Layer.unwrap(
    Effect.gen(function* () {
      const services = yield* Layer.build(Local.layer(local))
      const server = yield* Server.make({}).pipe(Effect.provide(services))
      return Client.layer({ baseUrl: server.url, retry: Retry.fast })
    }),
  )
}

/** One step: chunked forward_backward, an optimizer step with the clip engaged, the saved weights. */
const step = (backend: Backend, data: ReadonlyArray<Datum>, lossFn: LossFn, chunk: number, lossFnConfig?: LossFnConfig) => {
  // a fresh state folder per run, so runs never read each other's files
  const stateDir = path.join(stateRoot, `run-${runs++}`)
  return Effect.gen(function* () {
    const trainer = yield* Trainer
    const out = yield* forwardBackwardChunked(data, lossFn, { chunk, ...(lossFnConfig ? { lossFnConfig } : {}) })
    const optim = yield* trainer.optimStep(adamParams({ learningRate: 1e-2, gradClipNorm: 1 }))
    const saved = yield* trainer.saveState("after")
    const file = fs.existsSync(saved.path) ? saved.path : path.join(stateDir, "after.ckpt")
    const ck = yield* Effect.promise(() => Checkpoint.read(file))
    const params = Object.entries(ck.tensors).filter(([k]) => k.startsWith("param/")).sort(([a], [b]) => a.localeCompare(b))
    return { loss: out.loss, active: out.activeTokens, gradNorm: optim.metrics["grad_norm"]!, params }
  }).pipe(Effect.provide(backendLayer(backend, stateDir) as Layer.Layer<Trainer | Sampler, unknown>), Effect.scoped)
}

const rlBatch = (): Array<Datum> => {
  const rng = new Rng(11)
  return Array.from({ length: 9 }, (_, i) => rlDatum(rng, 2 + (i % 4), 3 + ((i * 5) % 9), { zeroSome: true }))
}
const ceBatch = (): Array<Datum> => {
  const rng = new Rng(12)
  return Array.from({ length: 9 }, (_, i) => ceDatum(rng, 2 + (i % 3), 2 + ((i * 3) % 8), { weights: i % 2 === 0 }))
}

const maxDiff = (a: ReadonlyArray<readonly [string, Float32Array]>, b: ReadonlyArray<readonly [string, Float32Array]>) => {
  assert.deepStrictEqual(a.map(([k]) => k), b.map(([k]) => k))
  let m = 0
  a.forEach(([, x], j) => x.forEach((v, i) => (m = Math.max(m, Math.abs(v - b[j]![1][i]!)))))
  return m
}

const cases: ReadonlyArray<readonly [string, () => Array<Datum>, LossFn, LossFnConfig | undefined]> = [
  ["ppo", rlBatch, "ppo", undefined],
  ["dro", rlBatch, "dro", { beta: 0.3 }],
  ["cross_entropy with and without weights", ceBatch, "cross_entropy", undefined],
]

describe("micro-batches give the update of one call", () => {
  for (const backend of ["in-process", "workers", "http"] as const) {
    for (const [name, batch, lossFn, config] of cases) {
      if (backend !== "in-process" && name !== "ppo") continue
      it.live(`${backend}: ${name}, 1 vs 2 vs 7 chunks`, () =>
        Effect.gen(function* () {
          const data = batch()
          const whole = yield* step(backend, data, lossFn, 0, config)
          assert.isAbove(whole.gradNorm, 1, "the clip must be engaged for the test to mean something")
          for (const chunks of [2, 7]) {
            const split = yield* step(backend, data, lossFn, Math.ceil(data.length / chunks), config)
            assert.strictEqual(split.active, whole.active)
            assert.closeTo(split.loss, whole.loss, 1e-5 * Math.max(1, Math.abs(whole.loss)))
            assert.closeTo(split.gradNorm, whole.gradNorm, 1e-4 * whole.gradNorm)
            assert.isBelow(maxDiff(split.params, whole.params), 1e-6)
          }
        }))
    }
  }
})

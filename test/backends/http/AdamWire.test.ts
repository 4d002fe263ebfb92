/**
 * gyre's AdamParams are camelCase; the wire's `adam_params` are Tinker's snake_case. The
 * client converts on the way out (`Wire.adamParamsToWire`), the server on the way in
 * (`Wire.adamParamsFromWire`): both directions, and both ends over HTTP.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Layer, Result } from "effect"
import { TestClock } from "effect/testing"
import * as fc from "fast-check"
import * as Client from "../../../src/backends/http/client/Client.ts"
import * as Retry from "../../../src/backends/http/client/Retry.ts"
import * as Server from "../../../src/backends/http/server/Server.ts"
import * as Wire from "../../../src/backends/http/wire/Wire.ts"
import { type AdamParams, adamParams } from "../../../src/contract/Contract.ts"
import { Sampler } from "../../../src/services/Sampler.ts"
import { Trainer } from "../../../src/services/Trainer.ts"
import { fakeServer } from "./FakeServer.ts"
import { createModel, session, train } from "./JsonClient.ts"
import { makeToy } from "./ToyBackend.ts"

const WIRE_KEYS = ["beta1", "beta2", "eps", "grad_clip_norm", "learning_rate", "weight_decay"]

const unit = fc.double({ min: 0, max: 1, noNaN: true })
const nonNegative = fc.double({ min: 0, max: 1e6, noNaN: true })
const adam: fc.Arbitrary<AdamParams> = fc.record({
  learningRate: nonNegative,
  beta1: unit,
  beta2: unit,
  eps: fc.double({ min: 1e-300, max: 1, noNaN: true }),
  weightDecay: nonNegative,
  gradClipNorm: nonNegative,
})

const given: AdamParams = { learningRate: 0.25, beta1: 0.8, beta2: 0.99, eps: 1e-6, weightDecay: 0.125, gradClipNorm: 0.5 }
const givenOnWire = { learning_rate: 0.25, beta1: 0.8, beta2: 0.99, eps: 1e-6, weight_decay: 0.125, grad_clip_norm: 0.5 }

describe("AdamParams on the wire", () => {
  it("camelCase -> snake_case JSON -> camelCase is the identity, and the wire has only snake_case keys", () => {
    fc.assert(
      fc.property(adam, (a) => {
        const wire = JSON.parse(JSON.stringify(Wire.adamParamsToWire(a))) as Wire.AdamParams
        assert.deepStrictEqual(Object.keys(wire).sort(), WIRE_KEYS)
        const back = Wire.adamParamsFromWire(wire)
        assert.isTrue(Result.isSuccess(back))
        assert.deepStrictEqual(Result.getOrThrow(back), a)
      }),
      { numRuns: 200, seed: 5 },
    )
  })

  it("absent wire fields take Tinker's defaults; a bad one is named by its wire name", () => {
    assert.deepStrictEqual(Result.getOrThrow(Wire.adamParamsFromWire({ learning_rate: 0.3 })), adamParams({ learningRate: 0.3 }))
    assert.deepStrictEqual(Result.getOrThrow(Wire.adamParamsFromWire({ weight_decay: 0.1, grad_clip_norm: 2 })), adamParams({ weightDecay: 0.1, gradClipNorm: 2 }))
    const bad = Wire.adamParamsFromWire({ grad_clip_norm: -1 })
    assert.isTrue(Result.isFailure(bad))
    assert.include(Result.isFailure(bad) ? bad.failure : "", "adam_params.grad_clip_norm")
    assert.notInclude(Result.isFailure(bad) ? bad.failure : "", "gradClipNorm")
  })

  it.effect("the client sends adam_params in snake_case (scripted fake server)", () =>
    Effect.gen(function* () {
      const fake = fakeServer((path, body) => {
        if (path === "create_model") return { status: 200, body: { request_id: "r-create" } }
        if (path === "optim_step") return { status: 200, body: { request_id: `r-optim-${body.seq_id}` } }
        if (path === "retrieve_future") {
          if (body.request_id === "r-create") return { status: 200, body: { model_id: "s1:train:0" } }
          return { status: 200, body: { metrics: { grad_norm: 1 }, policy_version: 1 } }
        }
        return undefined
      })
      const layer = Client.layerNoDeps({ baseUrl: "http://fake.test", retry: Retry.policy({ jitter: 0 }), apiKey: undefined }).pipe(Layer.provide(fake.layer))
      const fiber = yield* Effect.forkChild(Effect.exit(Effect.flatMap(Trainer, (t) => t.optimStep(given)).pipe(Effect.provide(layer), Effect.scoped)))
      for (let k = 0; k < 20; k++) yield* TestClock.adjust("500 millis")
      const exit = yield* Fiber.join(fiber)
      assert.isTrue(Exit.isSuccess(exit), String(exit))
      const posts = fake.seen.filter((s) => s.path === "optim_step")
      assert.strictEqual(posts.length, 1)
      assert.deepStrictEqual((posts[0]!.body as { adam_params: unknown }).adam_params, givenOnWire)
    }),
  )

  it.live("the server hands the trainer camelCase AdamParams decoded from snake_case adam_params", () =>
    Effect.gen(function* () {
      const toy = makeToy()
      const seen: Array<AdamParams> = []
      /** Test double: the toy trainer, recording the AdamParams of every optimizer step. */
      const recording = Trainer.of({ ...toy.trainer, optimStep: (a: AdamParams) => Effect.sync(() => seen.push(a)).pipe(Effect.andThen(toy.trainer.optimStep(a))) })
      const server = yield* Server.make({}).pipe(Effect.provideService(Trainer, recording), Effect.provideService(Sampler, toy.sampler))
      const base = server.url
      const model = (yield* createModel(base, yield* session(base), "toy-bigram")).body.model_id as string
      const step = yield* train(base, "optim_step", { adam_params: givenOnWire, model_id: model, seq_id: 1 })
      assert.strictEqual(step.status, 200, JSON.stringify(step.body))
      const partial = yield* train(base, "optim_step", { adam_params: { learning_rate: 0.5 }, model_id: model, seq_id: 2 })
      assert.strictEqual(partial.status, 200, JSON.stringify(partial.body))
      assert.deepStrictEqual(seen, [given, adamParams({ learningRate: 0.5 })])
      const refused = yield* train(base, "optim_step", { adam_params: { weight_decay: -1 }, model_id: model, seq_id: 3 })
      assert.strictEqual(refused.status, 400)
      assert.include(refused.body.detail, "adam_params.weight_decay")
      assert.strictEqual(seen.length, 2)
    }),
  )
})

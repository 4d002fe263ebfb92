/**
 * A training call the server refuses for good (a 4xx the client does not retry) consumes
 * its `seq_id`, on the server and in gyre's client, as the official SDK assumes: its
 * `TrainingClient` numbers every call `request_id + 1` whatever became of the previous
 * one (`tinker/lib/public_interfaces/training_client.py`, `_get_request_id` and the
 * `seq_id=request_id + 1` of each call). So the next call never waits for a number that
 * will not come. The servers here wait at most 5 s for a missing turn: a call that
 * stalled would fail with a turn timeout instead of completing.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Layer } from "effect"
import { TestClock } from "effect/testing"
import * as Client from "../../../src/backends/http/client/Client.ts"
import * as Retry from "../../../src/backends/http/client/Retry.ts"
import * as Server from "../../../src/backends/http/server/Server.ts"
import { adamParams, type Datum, float32, int64, modelInputFromTokens } from "../../../src/contract/Contract.ts"
import { Sampler } from "../../../src/services/Sampler.ts"
import { Trainer } from "../../../src/services/Trainer.ts"
import { fakeServer } from "./FakeServer.ts"
import { createModel, post, result, session, train, wireDatum } from "./JsonClient.ts"
import { makeToy } from "./ToyBackend.ts"

const start = Effect.gen(function* () {
  const toy = makeToy()
  const server = yield* Server.make({ sampleGather: 0, vocabSize: toy.vocab, turnTimeout: "5 seconds" }).pipe(
    Effect.provideService(Trainer, toy.trainer),
    Effect.provideService(Sampler, toy.sampler),
  )
  return { toy, base: server.url }
})

const good = wireDatum([1, 2, 3], { logprobs: [-1, -1], advantages: [1, 1] })
/** token 999 is outside the toy's vocabulary: the Datum validator refuses it with 400 */
const outsideVocab = wireDatum([1, 999, 3], { logprobs: [-1, -1], advantages: [1, 1] })
const fb = (model: string, seq: number, datum: unknown) => ({ forward_backward_input: { data: [datum], loss_fn: "importance_sampling" }, model_id: model, seq_id: seq })

describe("a refused training call consumes its seq_id", () => {
  it.live("on the server: the call after a 400 (seq_id + 1) completes, and a refusal ahead of its turn passes when reached", () =>
    Effect.gen(function* () {
      const { base, toy } = yield* start
      const model = (yield* createModel(base, yield* session(base), "toy-bigram")).body.model_id as string
      const refused = yield* post(base, "forward_backward", fb(model, 1, outsideVocab))
      assert.strictEqual(refused.status, 400)
      assert.match(refused.body.detail, /999/)
      const next = yield* train(base, "forward_backward", fb(model, 2, good))
      assert.strictEqual(next.status, 200)
      assert.isUndefined(next.body.error, JSON.stringify(next.body))
      assert.strictEqual(toy.counters.forwardBackward, 1)
      // the refused seq_id is used: sending it again is a reuse
      const reused = yield* post(base, "forward_backward", fb(model, 1, good))
      assert.strictEqual(reused.status, 400)
      assert.match(reused.body.detail, /seq_id 1 was already used/)
      // with nothing in flight, the hint names the first unused id (3), not one past it
      assert.match(reused.body.detail, /next free: 3\)/)
      // seq 4 is refused before seq 3 came; seq 5 waits for 3, then passes 4
      const early = yield* post(base, "save_weights", { model_id: model, seq_id: 4, path: "../escape" })
      assert.strictEqual(early.status, 400)
      const fifth = yield* post(base, "optim_step", { adam_params: { learning_rate: 0.1 }, model_id: model, seq_id: 5 })
      assert.strictEqual(fifth.status, 200)
      const third = yield* train(base, "forward_backward", fb(model, 3, good))
      assert.isUndefined(third.body.error, JSON.stringify(third.body))
      const stepped = yield* result(base, fifth.body.request_id)
      assert.strictEqual(stepped.body.policy_version, 1, JSON.stringify(stepped.body))
      assert.strictEqual(toy.counters.optimSteps, 1)
    }).pipe(Effect.scoped),
  )

  it.live("gyre's client: after a call the server refuses, the next call takes the next seq_id and trains", () =>
    Effect.gen(function* () {
      const { base, toy } = yield* start
      const datum = (tokens: ReadonlyArray<number>): Datum => ({
        modelInput: modelInputFromTokens(tokens),
        lossFnInputs: {
          target_tokens: int64(tokens),
          logprobs: float32(tokens.map((_, i) => (i === 0 ? 0 : -1))),
          advantages: float32(tokens.map((_, i) => (i === 0 ? 0 : 1))),
        },
      })
      yield* Effect.gen(function* () {
        const trainer = yield* Trainer
        const refused = yield* Effect.flip(trainer.forwardBackward([datum([1, 999, 3])], "importance_sampling"))
        assert.strictEqual(refused.reason, "InvalidInput")
        assert.match(refused.message, /HTTP 400/)
        yield* trainer.forwardBackward([datum([1, 2, 3])], "importance_sampling")
        const step = yield* trainer.optimStep(adamParams({ learningRate: 0.1 }))
        assert.strictEqual(step.version, 1)
      }).pipe(Effect.provide(Layer.fresh(Client.layer({ baseUrl: base, retry: Retry.fast }))))
      assert.strictEqual(toy.counters.forwardBackward, 1)
      assert.strictEqual(toy.counters.optimSteps, 1)
    }).pipe(Effect.scoped),
  )

  it.effect("gyre's client numbers as the SDK does: a 400 uses up its seq_id, a retried 429 keeps it (scripted fake server)", () =>
    Effect.gen(function* () {
      const fake = fakeServer((path, body, n) => {
        if (path === "create_model") return { status: 200, body: { request_id: "r-create" } }
        if (path === "optim_step") {
          if (n === 1) return { status: 400, body: { detail: "adam_params: refused" } }
          if (n === 2) return { status: 429, body: { detail: "busy" }, headers: { "retry-after": "1" } }
          return { status: 200, body: { request_id: `r-optim-${body.seq_id}` } }
        }
        if (path === "retrieve_future") {
          if (body.request_id === "r-create") return { status: 200, body: { model_id: "s1:train:0" } }
          return { status: 200, body: { metrics: { grad_norm: 1 }, policy_version: 1 } }
        }
        return undefined
      })
      const layer = Client.layerNoDeps({ baseUrl: "http://fake.test", retry: Retry.policy({ jitter: 0 }), apiKey: undefined }).pipe(Layer.provide(fake.layer))
      const run = Effect.gen(function* () {
        const t = yield* Trainer
        const refused = yield* Effect.flip(t.optimStep(adamParams()))
        assert.match(refused.message, /HTTP 400: adam_params: refused/)
        yield* t.optimStep(adamParams())
        yield* t.optimStep(adamParams())
      }).pipe(Effect.provide(layer), Effect.scoped)
      const fiber = yield* Effect.forkChild(Effect.exit(run))
      for (let k = 0; k < 40; k++) yield* TestClock.adjust("500 millis")
      const exit = yield* Fiber.join(fiber)
      assert.isTrue(Exit.isSuccess(exit), String(exit))
      assert.deepStrictEqual(
        fake.seen.filter((s) => s.path === "optim_step").map((p) => (p.body as { seq_id: number }).seq_id),
        [1, 2, 2, 3],
      )
    }),
  )
})

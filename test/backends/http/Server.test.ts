import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { TestClock } from "effect/testing"
import * as Server from "../../../src/backends/http/server/Server.ts"
import { Sampler } from "../../../src/services/Sampler.ts"
import { Trainer } from "../../../src/services/Trainer.ts"
import { createModel, post, result, session, train, wireDatum } from "./JsonClient.ts"
import { makeToy } from "./ToyBackend.ts"

const asample = (sessionOrBase: { base_model: string }, tokens: Array<number> = [1, 2]) => ({
  prompt: { chunks: [{ type: "encoded_text", tokens }] },
  sampling_params: { max_tokens: 3, temperature: 1, seed: 1 },
  num_samples: 1,
  ...sessionOrBase,
  type: "sample",
})

/** A toy ModelFactory (a test double): each model is a fresh toy of the asked rank; counts what it built and freed. */
const toyFactory = (bytesPerRank = 1000) => {
  const counts = { created: 0, freed: 0 }
  const factory: Server.ModelFactory = {
    defaultRank: 4,
    maxRank: 32,
    bytes: (rank) => rank * bytesPerRank,
    create: ({ rank, seed }) =>
      Effect.acquireRelease(
        Effect.sync(() => {
          counts.created++
          const toy = makeToy({ loraRank: rank, seed: seed + 100 })
          return { trainer: toy.trainer, replicas: [toy.sampler], loraRank: rank }
        }),
        () => Effect.sync(() => counts.freed++),
      ),
  }
  return { factory, counts }
}

const start = (options: Server.Options = {}) =>
  Effect.gen(function* () {
    const toy = makeToy()
    const server = yield* Server.make({ sampleGather: 0, ...options }).pipe(Effect.provideService(Trainer, toy.trainer), Effect.provideService(Sampler, toy.sampler))
    return { toy, server, base: server.url }
  })

describe("pinned samples (TestClock)", () => {
  it.effect("a sample pinned to a version never published fails after the server's ready timeout with reason Timeout, naming both versions", () =>
    Effect.gen(function* () {
      // not the default (1 hour): the server must keep to the timeout it is given
      const { server, base, toy } = yield* start({ readyTimeout: "7 minutes", pollWait: 0 })
      const a = yield* post(base, "asample", asample({ base_model: "toy-bigram" }), { "x-min-policy-version": "5" })
      assert.strictEqual(a.status, 200)
      const id = a.body.request_id as string
      assert.strictEqual((yield* post(base, "retrieve_future", { request_id: id })).body.type, "try_again")
      assert.strictEqual(server.stats.pending, 1)
      yield* TestClock.adjust("6 minutes")
      assert.strictEqual((yield* post(base, "retrieve_future", { request_id: id })).body.type, "try_again")
      yield* TestClock.adjust("1 minute")
      const done = yield* post(base, "retrieve_future", { request_id: id })
      assert.strictEqual(done.body.reason, "Timeout")
      assert.include(done.body.error, "waited 7m")
      assert.include(done.body.error, "policy version 5")
      assert.include(done.body.error, "serves version 0")
      assert.strictEqual(server.stats.pending, 0)
      assert.strictEqual(toy.counters.samples, 0)
    }).pipe(Effect.scoped),
  )

  it.effect("pending futures are bounded: beyond maxPendingFutures a submission gets 429 with a message, and timed-out work frees its place", () =>
    Effect.gen(function* () {
      const { server, base } = yield* start({ readyTimeout: "10 minutes", pollWait: 0, maxPendingFutures: 3 })
      for (let i = 0; i < 3; i++) {
        assert.strictEqual((yield* post(base, "asample", asample({ base_model: "toy-bigram" }), { "x-min-policy-version": "2" })).status, 200)
      }
      const refused = yield* post(base, "asample", asample({ base_model: "toy-bigram" }), { "x-min-policy-version": "2" })
      assert.strictEqual(refused.status, 429)
      assert.match(refused.body.detail, /3 requests are in progress.*maxPendingFutures 3/)
      assert.strictEqual(refused.headers.get("retry-after"), "1")
      assert.strictEqual(server.stats.pending, 3)
      yield* TestClock.adjust("10 minutes")
      assert.strictEqual(server.stats.pending, 0)
      assert.strictEqual((yield* post(base, "asample", asample({ base_model: "toy-bigram" }))).status, 200)
    }).pipe(Effect.scoped),
  )

  it.effect("a pinned sample runs as soon as its version is published", () =>
    Effect.gen(function* () {
      const { base, toy } = yield* start({ readyTimeout: "1 hour", pollWait: 0 })
      const s = yield* session(base)
      const created = yield* post(base, "create_model", { session_id: s, model_seq_id: 0, base_model: "toy-bigram" })
      const model = (yield* post(base, "retrieve_future", { request_id: created.body.request_id })).body.model_id as string
      const a = yield* post(base, "asample", asample({ base_model: "toy-bigram" }), { "x-min-policy-version": "1" })
      const fb = yield* post(base, "forward_backward", {
        forward_backward_input: { data: [wireDatum([1, 2, 3], { logprobs: [-1, -1], advantages: [1, 1] })], loss_fn: "importance_sampling" },
        model_id: model,
        seq_id: 1,
      })
      assert.strictEqual(fb.status, 200)
      yield* post(base, "optim_step", { adam_params: { learning_rate: 0.1 }, model_id: model, seq_id: 2 })
      yield* post(base, "save_weights_for_sampler", { model_id: model, seq_id: 3 })
      yield* TestClock.adjust("1 millis")
      const done = yield* post(base, "retrieve_future", { request_id: a.body.request_id })
      assert.strictEqual(done.body.policy_version, 1)
      assert.strictEqual(toy.counters.samples, 1)
    }).pipe(Effect.scoped),
  )
})

describe("sessions (TestClock)", () => {
  it.effect("a session idle past sessionIdleTimeout expires and frees its models; heartbeats keep one alive", () =>
    Effect.gen(function* () {
      const { factory, counts } = toyFactory()
      const { server, base } = yield* start({ models: factory, sessionIdleTimeout: "5 minutes", pollWait: 0 })
      const idle = yield* session(base)
      const alive = yield* session(base)
      const m1 = yield* post(base, "create_model", { session_id: idle, model_seq_id: 0, base_model: "toy-bigram" })
      const m2 = yield* post(base, "create_model", { session_id: alive, model_seq_id: 0, base_model: "toy-bigram" })
      assert.strictEqual(counts.created, 2)
      for (let i = 0; i < 10; i++) {
        yield* TestClock.adjust("1 minute")
        assert.strictEqual((yield* post(base, "session_heartbeat", { session_id: alive })).status, 200)
      }
      yield* server.expireSessions
      assert.strictEqual(counts.freed, 1)
      assert.strictEqual(server.stats.sessions, 1)
      assert.strictEqual(server.stats.models, 1)
      const gone = yield* post(base, "get_info", { model_id: m1.body.model_id })
      assert.strictEqual(gone.status, 404)
      assert.match(gone.body.detail, /expired/)
      assert.strictEqual((yield* post(base, "session_heartbeat", { session_id: idle })).status, 404)
      assert.strictEqual((yield* post(base, "get_info", { model_id: m2.body.model_id })).status, 200)
      assert.strictEqual(server.stats.memoryUsed, 4000)
    }).pipe(Effect.scoped),
  )
})

describe("several models (toy factory)", () => {
  it.live("each create_model gets its own adapter of the asked rank and its own optimizer; a model beyond the memory budget gets 403", () =>
    Effect.gen(function* () {
      const { factory, counts } = toyFactory(1000)
      const { server, base } = yield* start({ models: factory, memoryBudget: 20_000 })
      const s1 = yield* session(base)
      const s2 = yield* session(base)
      const a = (yield* createModel(base, s1, "toy-bigram", 0, 8)).body.model_id as string
      const b = (yield* createModel(base, s1, "toy-bigram", 1, 2)).body.model_id as string
      const c = (yield* createModel(base, s2, "toy-bigram", 0)).body.model_id as string
      assert.strictEqual(new Set([a, b, c]).size, 3)
      assert.deepStrictEqual(
        yield* Effect.forEach([a, b, c], (id) => Effect.map(post(base, "get_info", { model_id: id }), (r) => r.body.lora_rank)),
        [8, 2, 4],
      )
      // train a only
      const datum = wireDatum([1, 2, 3, 4], { logprobs: [-1, -1, -1], advantages: [1, 1, 1] })
      const forwardOf = (id: string, seq: number) =>
        Effect.map(train(base, "forward", { forward_input: { data: [datum], loss_fn: "importance_sampling" }, model_id: id, seq_id: seq }), (r) => r.body.loss_fn_outputs[0].logprobs.data as Array<number>)
      const beforeB = yield* forwardOf(b, 1)
      yield* train(base, "forward_backward", { forward_backward_input: { data: [datum], loss_fn: "importance_sampling" }, model_id: a, seq_id: 1 })
      const step = yield* train(base, "optim_step", { adam_params: { learning_rate: 0.5 }, model_id: a, seq_id: 2 })
      assert.strictEqual(step.body.policy_version, 1)
      assert.deepStrictEqual(yield* forwardOf(b, 2), beforeB)
      assert.strictEqual((yield* post(base, "get_info", { model_id: b })).body.policy_version, 0)
      assert.strictEqual((yield* post(base, "get_info", { model_id: a })).body.policy_version, 1)
      // 8 + 2 + 4 = 14 of 20 thousand bytes used: rank 8 more does not fit
      const refused = yield* post(base, "create_model", { session_id: s2, model_seq_id: 1, base_model: "toy-bigram", lora_config: { rank: 8 } })
      assert.strictEqual(refused.status, 403)
      assert.match(refused.body.detail, /memory budget/)
      assert.strictEqual(counts.created, 3)
      // unloading one makes room
      assert.strictEqual((yield* result(base, (yield* post(base, "unload_model", { model_id: a })).body.request_id)).status, 200)
      assert.strictEqual(counts.freed, 1)
      assert.strictEqual((yield* createModel(base, s2, "toy-bigram", 1, 8)).status, 200)
      assert.strictEqual(server.stats.memoryUsed, 14_000)
      const tooBig = yield* post(base, "create_model", { session_id: s2, model_seq_id: 9, base_model: "toy-bigram", lora_config: { rank: 64 } })
      assert.strictEqual(tooBig.status, 400)
      assert.match(tooBig.body.detail, /rank 64 exceeds/)
    }).pipe(Effect.scoped),
  )
})

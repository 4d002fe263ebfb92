/**
 * Batched retrieval (`retrieve_futures`, Tinker SDK 0.39): `serve` reports a sampling
 * session's finished sample futures after a cursor (entries the cursor covers are
 * acknowledged), and gyre's client, offered it by `client/config`, waits on one poll per
 * session and fetches each result with one `retrieve_future`, with the same samples as
 * per-future polling. Its poller sends a sample to per-future polling when the batched
 * poll fails or stays silent.
 */
import * as diagnostics from "node:diagnostics_channel"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { TestClock } from "effect/testing"
import * as Client from "../../../src/backends/http/client/Client.ts"
import * as FuturesPoller from "../../../src/backends/http/client/FuturesPoller.ts"
import * as Retry from "../../../src/backends/http/client/Retry.ts"
import * as Server from "../../../src/backends/http/server/Server.ts"
import * as SessionFutures from "../../../src/backends/http/server/SessionFutures.ts"
import { BackendError, modelInputFromTokens } from "../../../src/contract/Contract.ts"
import { Sampler } from "../../../src/services/Sampler.ts"
import { Trainer } from "../../../src/services/Trainer.ts"
import { createModel, post, result, session } from "./JsonClient.ts"
import { makeToy } from "./ToyBackend.ts"

const serve = Effect.gen(function* () {
  const toy = makeToy()
  return yield* Server.make({ sampleGather: 0, vocabSize: toy.vocab }).pipe(Effect.provideService(Trainer, toy.trainer), Effect.provideService(Sampler, toy.sampler))
})

const asample = (base: string, sampler: string, seed: number) =>
  Effect.map(
    post(base, "asample", { sampling_session_id: sampler, seq_id: seed, prompt: { chunks: [{ type: "encoded_text", tokens: [1, 2] }] }, sampling_params: { max_tokens: 3, seed }, num_samples: 1 }),
    (a) => a.body.request_id as string,
  )

/** Requests by path to `port` while `effect` runs (undici's diagnostics channel). */
const counted = <A, E, R>(port: string, effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    const paths: Record<string, number> = {}
    const onRequest = (m: unknown) => {
      const request = (m as { request: { origin: string; path: string } }).request
      if (!String(request.origin).endsWith(`:${port}`)) return
      const path = request.path.replace(/^\/api\/v1\//, "")
      paths[path] = (paths[path] ?? 0) + 1
    }
    diagnostics.subscribe("undici:request:create", onRequest)
    const value = yield* effect.pipe(Effect.ensuring(Effect.sync(() => diagnostics.unsubscribe("undici:request:create", onRequest))))
    return { value, paths }
  })

describe("retrieve_futures", () => {
  it.live("serve reports a session's finished samples after the cursor; the cursor acknowledges them", () =>
    Effect.gen(function* () {
      const { url: base } = yield* serve
      const s = yield* session(base)
      const model = (yield* createModel(base, s, "toy-bigram")).body.model_id as string
      const saving = yield* post(base, "save_weights_for_sampler", { model_id: model, seq_id: 1, sampling_session_seq_id: 0 })
      const saved = yield* result(base, saving.body.request_id as string)
      assert.strictEqual(saved.status, 200, JSON.stringify(saved.body))
      const sampler = saved.body.sampling_session_id as string
      const ids = [yield* asample(base, sampler, 1), yield* asample(base, sampler, 2), yield* asample(base, sampler, 3)]
      const target = { type: "sampling_session", sampling_session_id: sampler, cloned_sampler_id: 0 }
      const heard: Array<string> = []
      let cursor = 0
      while (heard.length < 3) {
        const r = yield* post(base, "retrieve_futures", { target, prev_cursor: cursor, timeout: 5 })
        assert.strictEqual(r.status, 200, JSON.stringify(r.body))
        for (const c of r.body.completions) heard.push(c.request_id)
        assert.isAtLeast(r.body.cursor, cursor)
        cursor = r.body.cursor
      }
      assert.sameMembers(heard, ids)
      // everything up to the cursor was seen: a later poll holds, then answers nothing new
      const none = yield* post(base, "retrieve_futures", { target, prev_cursor: cursor, timeout: 0.05 })
      assert.deepStrictEqual(none.body, { completions: [], cursor })
      const again = yield* post(base, "retrieve_futures", { target, prev_cursor: 0, timeout: 0 })
      assert.deepStrictEqual(again.body.completions, [], "acknowledged completions are gone")
      // the payload is still fetched per future, at once
      const first = yield* post(base, "retrieve_future", { request_id: ids[0] })
      assert.strictEqual(first.body.type, "sample")
      const unknown = yield* post(base, "retrieve_futures", { target: { ...target, sampling_session_id: "nope" } })
      assert.strictEqual(unknown.status, 404)
      assert.include(unknown.body.detail, "target.sampling_session_id")
      const bad = yield* post(base, "retrieve_futures", { target, prev_cursor: -1 })
      assert.strictEqual(bad.status, 400)
    }).pipe(Effect.scoped))

  it.live("the client waits on one poll per session and fetches each sample once, with the same samples as per-future polling", () =>
    Effect.gen(function* () {
      const run = (batchedRetrieval: boolean) =>
        Effect.gen(function* () {
          const server = yield* serve
          const port = new URL(server.url).port
          return yield* counted(
            port,
            Effect.gen(function* () {
              const trainer = yield* Trainer
              const sampler = yield* Sampler
              const { version } = yield* trainer.saveWeightsForSampler("v0")
              return yield* Effect.forEach(
                Array.from({ length: 12 }, (_, i) => i),
                (i) => Effect.map(sampler.sample(modelInputFromTokens([1, 2, 3]), { maxTokens: 4, temperature: 1, seed: i }, { numSamples: 2, minPolicyVersion: version }), (r) => r.sequences),
                { concurrency: "unbounded" },
              )
            }).pipe(Effect.provide(Client.layer({ baseUrl: server.url, retry: Retry.fast, submitWait: 0, batchedRetrieval }))),
          )
        }).pipe(Effect.scoped)
      const batched = yield* run(true)
      const each = yield* run(false)
      assert.deepStrictEqual(batched.value, each.value)
      assert.isAtLeast(batched.paths["retrieve_futures"] ?? 0, 1)
      // one fetch per sample, besides those of create_model and save_weights_for_sampler
      assert.strictEqual(batched.paths["retrieve_future"], 12 + 2, JSON.stringify(batched.paths))
      assert.isUndefined(each.paths["retrieve_futures"])
      assert.isAtLeast(each.paths["retrieve_future"] ?? 0, 12)
    }))

  it.effect("serve keeps the completions of the sessions used last only", () =>
    Effect.gen(function* () {
      const log = SessionFutures.make()
      for (let i = 0; i <= SessionFutures.MAX_SESSIONS; i++) yield* log.record(`s${i}`, `r${i}`)
      assert.deepStrictEqual((yield* log.poll("s0", 0, 0)).completions, [])
      assert.deepStrictEqual((yield* log.poll(`s${SessionFutures.MAX_SESSIONS}`, 0, 0)).completions, [{ state: "finished", request_id: `r${SessionFutures.MAX_SESSIONS}` }])
    }))

  it.effect("the poller hands a sample back to per-future polling when the batched poll fails or stays silent, and keeps completions heard early", () =>
    Effect.gen(function* () {
      const scope = yield* Effect.scope
      const down: FuturesPoller.Poll = () => Effect.fail(new BackendError({ reason: "Transport", operation: "retrieve_futures", message: "down" }))
      const failing = FuturesPoller.make(down, scope, { holdSeconds: 1 })
      // each failed poll sends the samples waiting to their own futures at once
      for (const id of ["r1", "r2", "r3"]) yield* failing.finished("s", id)
      assert.strictEqual(failing.polls(), 3)
      // three in a row: the session's samples no longer wait for the batched poll
      yield* failing.finished("s", "r4")
      assert.strictEqual(failing.polls(), 3)
      // a sample that hears nothing within maxWait polls its own future too
      const silent = FuturesPoller.make(() => Effect.never, scope, { holdSeconds: 1, maxWait: "3 seconds" })
      const fiber = yield* Effect.forkChild(silent.finished("s", "r1"))
      yield* TestClock.adjust("3 seconds")
      yield* Fiber.join(fiber)
      // a completion reported before its sample waits for it
      let calls = 0
      const reports: FuturesPoller.Poll = () =>
        Effect.sync(() => (calls++ === 0 ? { completions: [{ state: "finished", request_id: "a" }, { state: "finished", request_id: "b" }], cursor: 2 } : { completions: [], cursor: 2 }))
      const early = FuturesPoller.make(
        reports,
        scope,
        { holdSeconds: 1 },
      )
      yield* early.finished("s", "a")
      yield* early.finished("s", "b")
      assert.strictEqual(early.polls(), 1)
    }).pipe(Effect.scoped))
})

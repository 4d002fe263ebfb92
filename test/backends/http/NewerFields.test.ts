/**
 * Newer Tinker SDKs (0.26 to 0.39) send fields and call routes `serve` does not
 * implement. None is dropped silently: a newer field that asks for something is a 400
 * naming it and saying why, the same field with a value that asks for nothing passes; a
 * field nobody knows is a 400 naming it; a newer route is a 404 saying what to use.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as NewerFields from "../../../src/backends/http/server/NewerFields.ts"
import * as Server from "../../../src/backends/http/server/Server.ts"
import { Sampler } from "../../../src/services/Sampler.ts"
import { Trainer } from "../../../src/services/Trainer.ts"
import { createModel, post, session } from "./JsonClient.ts"
import { makeToy } from "./ToyBackend.ts"

const start = Effect.gen(function* () {
  const toy = makeToy()
  const server = yield* Server.make({ sampleGather: 0, vocabSize: toy.vocab }).pipe(Effect.provideService(Trainer, toy.trainer), Effect.provideService(Sampler, toy.sampler))
  const base = server.url
  const model = (yield* createModel(base, yield* session(base), "toy-bigram")).body.model_id as string
  return { base, model }
})

/** A valid body of each route that has newer fields. */
const bodies = (sessionId: string, model: string): Record<string, Record<string, unknown>> => ({
  asample: { base_model: "toy-bigram", prompt: { chunks: [{ type: "encoded_text", tokens: [1, 2] }] }, sampling_params: { max_tokens: 2 }, num_samples: 1 },
  create_model: { session_id: sessionId, model_seq_id: 7, base_model: "toy-bigram" },
  save_weights: { model_id: model, seq_id: 1, path: "ckpt" },
  load_weights: { model_id: model, seq_id: 1, path: `tinker://${model}/weights/none` },
})

const ASKS: Record<string, unknown> = {
  topk_sample_logprobs: 5,
  target_prompt_logprobs: [1],
  prompt_logprobs_last_n: 3,
  prompt_alt_tokens_k: 2,
  record_stability_info: true,
  optimizer_config: { type: "dimuon", version: 1 },
  weights_access_token: "token",
}

describe("fields and routes of newer Tinker SDKs", () => {
  for (const [route, fields] of Object.entries(NewerFields.FIELDS)) {
    for (const field of Object.keys(fields)) {
      it.live(`${route}.${field}: refused by name when it asks for something, accepted when it asks for nothing`, () =>
        Effect.gen(function* () {
          const { base, model } = yield* start
          const s = yield* session(base)
          const body = bodies(s, model)[route]!
          const asked = yield* post(base, route, { ...body, [field]: ASKS[field] })
          assert.strictEqual(asked.status, 400, JSON.stringify(asked.body))
          assert.include(asked.body.detail, `${field}: `)
          const off = yield* post(base, route, { ...body, [field]: null })
          assert.notInclude(String(off.body.detail ?? ""), field, JSON.stringify(off.body))
        }).pipe(Effect.scoped))
    }
  }

  it.live("a field no SDK sends is a 400 naming it, on every route that takes a body", () =>
    Effect.gen(function* () {
      const { base, model } = yield* start
      for (const [route, body] of Object.entries(bodies(yield* session(base), model))) {
        const r = yield* post(base, route, { ...body, frobnicate: 1 })
        assert.strictEqual(r.status, 400, route)
        assert.include(r.body.detail, "frobnicate: unknown field", route)
      }
      const fb = yield* post(base, "optim_step", { model_id: model, seq_id: 1, adam_params: { learning_rate: 0.1, momentum: 0.9 } })
      assert.include(fb.body.detail, "adam_params.momentum: unknown field")
    }).pipe(Effect.scoped))

  it.live("newer routes answer 404 saying what to use instead; client/config offers retrieve_futures", () =>
    Effect.gen(function* () {
      const { base } = yield* start
      for (const route of ["cancel_future", "copy_weights", "save_weights_external"]) {
        const r = yield* post(base, route, {})
        assert.strictEqual(r.status, 404, route)
        assert.include(r.body.detail, "not served here", route)
      }
      const config = yield* post(base, "client/config", {})
      assert.strictEqual(config.body.sample_use_retrieve_futures, true)
      assert.strictEqual((yield* post(base, "client/dynamic_config", {})).body.sample_cancel_enabled, false)
    }).pipe(Effect.scoped))

  it.live("sessions/{id}/finish is acknowledged; an asample promise carries one sequence id per sample; optimizer_config adamw passes", () =>
    Effect.gen(function* () {
      const { base, model } = yield* start
      const s = yield* session(base)
      const finished = yield* post(base, `sessions/${s}/finish`, { reason: { type: "success" }, detail: null })
      assert.strictEqual(finished.status, 200, JSON.stringify(finished.body))
      assert.strictEqual((yield* post(base, "sessions/nope/finish", { reason: { type: "success" } })).status, 404)
      const promise = yield* post(base, "asample", { ...bodies(s, model)["asample"], num_samples: 3, topk_sample_logprobs: 0, prompt_alt_tokens_k: 0, record_stability_info: false })
      assert.strictEqual(promise.status, 200, JSON.stringify(promise.body))
      assert.lengthOf(promise.body.sample_sequence_ids, 3)
      const adamw = yield* post(base, "create_model", { ...bodies(s, model)["create_model"], optimizer_config: { type: "adamw" } })
      assert.strictEqual(adamw.status, 200, JSON.stringify(adamw.body))
    }).pipe(Effect.scoped))
})

/**
 * Request bodies on the Tinker wire: one over the server's limit is a 413 naming the
 * limit and the flag that raises it, and while a large valid `forward_backward` is sent
 * slowly (and then checked), `healthz` is still answered.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Server from "../../../src/backends/http/server/Server.ts"
import { Sampler } from "../../../src/services/Sampler.ts"
import { Trainer } from "../../../src/services/Trainer.ts"
import { raceHealth } from "../../platform/SlowBody.ts"
import { createModel, post, session, wireDatum } from "./JsonClient.ts"
import { makeToy } from "./ToyBackend.ts"

const start = (options: Server.Options = {}) =>
  Effect.gen(function* () {
    const toy = makeToy({ maxSequenceLength: 4096 })
    const server = yield* Server.make({ sampleGather: 0, ...options }).pipe(Effect.provideService(Trainer, toy.trainer), Effect.provideService(Sampler, toy.sampler))
    return server.url
  })

describe("request bodies on the Tinker wire", () => {
  it.live("a body over the limit is a 413 naming the limit and serve --max-body-mb", () =>
    Effect.gen(function* () {
      const base = yield* start({ maxBodyBytes: 1000 })
      const refused = yield* post(base, "create_session", { tags: ["x".repeat(2000)], type: "create_session" })
      assert.strictEqual(refused.status, 413)
      assert.match(refused.body.detail, /^the request body has 20\d\d bytes, over this server's limit of 1000 bytes: send less per request, or raise the limit with serve --max-body-mb$/)
      // the server still serves
      assert.strictEqual((yield* post(base, "create_session", { tags: [], type: "create_session" })).status, 200)
    }).pipe(Effect.scoped))

  it.live("while a large forward_backward is sent slowly and checked, healthz is answered first", () =>
    Effect.gen(function* () {
      const base = yield* start()
      const model = yield* createModel(base, yield* session(base), "toy-bigram")
      const full = Array.from({ length: 2000 }, (_, i) => 1 + (i % 20))
      const datum = wireDatum(full, { logprobs: full.slice(1).map(() => -1.25), advantages: full.slice(1).map(() => 0.5) })
      const body = JSON.stringify({ model_id: model.body.model_id, seq_id: 1, forward_backward_input: { data: Array.from({ length: 100 }, () => datum), loss_fn: "importance_sampling" } })
      const race = yield* Effect.promise(() => raceHealth(`${base}/api/v1/forward_backward`, new TextEncoder().encode(body), `${base}/api/v1/healthz`))
      assert.strictEqual(race.big.status, 200, race.big.text)
      assert.include(race.big.text, "request_id")
      assert.deepStrictEqual([race.health.status, race.order], [200, ["health", "big"]])
    }).pipe(Effect.scoped))
})

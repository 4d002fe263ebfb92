/**
 * The server's 400 for a refused datum names it in wire terms: the validator's issue is
 * mapped to wire names by a table and to wire positions by the alignment's shift (gyre
 * position i of a per-token input is wire position i - 1), then rendered. The mapping
 * reads the issue, so a reworded message cannot move the location.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as Client from "../../../src/backends/http/client/Client.ts"
import * as Retry from "../../../src/backends/http/client/Retry.ts"
import { failureOf } from "../../../src/backends/http/client/Transport.ts"
import { type Datum, float32, int64, modelInputFromTokens } from "../../../src/contract/Contract.ts"
import { checkAll } from "../../../src/vocabulary/Datum.ts"
import type { DatumIssue } from "../../../src/contract/DatumIssue.ts"
import * as Server from "../../../src/backends/http/server/Server.ts"
import { wireDetail, wireIssue } from "../../../src/backends/http/server/TrainingRoutes.ts"
import { Sampler } from "../../../src/services/Sampler.ts"
import { Trainer } from "../../../src/services/Trainer.ts"
import { createModel, post, session, wireDatum } from "./JsonClient.ts"
import { makeToy } from "./ToyBackend.ts"

const at = "forward_backward_input"

describe("a datum's issue in wire terms", () => {
  it("a per-token input moves back one position; model_input keeps its positions; names come from the table", () => {
    const advantage: DatumIssue = { datum: 2, field: ["lossFnInputs", "advantages"], position: 4, value: 1e300, expected: { _tag: "Float32" } }
    assert.deepStrictEqual(wireIssue(advantage), { ...advantage, position: 3 })
    assert.strictEqual(wireDetail(advantage, at), "forward_backward_input.data[2].loss_fn_inputs.advantages.data[3] = 1e+300 overflows float32 (|x| must be at most 3.4028e+38)")
    const token: DatumIssue = { datum: 1, field: ["modelInput"], position: 2, value: 120, expected: { _tag: "InVocabulary", vocabSize: 16, ignorable: false } }
    assert.deepStrictEqual(wireIssue(token), token)
    assert.strictEqual(wireDetail(token, "forward_input"), "forward_input.data[1].model_input token 120 at position 2 is outside the vocabulary [0, 16)")
    const missing: DatumIssue = { datum: 0, field: ["lossFnInputs", "logprobs"], expected: { _tag: "Required", lossFn: "ppo", allowed: ["logprobs", "advantages", "target_tokens"] } }
    assert.strictEqual(wireDetail(missing, at), "forward_backward_input.data[0].loss_fn_inputs.logprobs is required by ppo (inputs: logprobs, advantages, target_tokens)")
  })

  it.live("the server's 400 names the datum, the wire field and the wire position", () =>
    Effect.gen(function* () {
      const toy = makeToy({ vocab: 16 })
      const server = yield* Server.make({ vocabSize: 16 }).pipe(Effect.provideService(Trainer, toy.trainer), Effect.provideService(Sampler, toy.sampler))
      const base = server.url
      const model = (yield* createModel(base, yield* session(base), "toy-bigram")).body.model_id as string
      const good = wireDatum([1, 2, 3, 4], { logprobs: [-1, -1, -1], advantages: [1, 1, 1] })
      const refuse = (data: ReadonlyArray<unknown>, seq: number) =>
        post(base, "forward_backward", { forward_backward_input: { data, loss_fn: "ppo" }, model_id: model, seq_id: seq })
      const positive = yield* refuse([good, good, wireDatum([1, 2, 3, 4], { logprobs: [-1, -1, 0.5], advantages: [1, 1, 1] })], 1)
      assert.strictEqual(positive.status, 400)
      assert.strictEqual(positive.body.detail, "forward_backward_input.data[2].loss_fn_inputs.logprobs.data[2] = 0.5; a log-probability must be <= 0")
      // the extension `issue`: the same as data, in gyre's names and positions
      assert.deepStrictEqual(positive.body.issue, { datum: 2, field: ["lossFnInputs", "logprobs"], position: 3, value: 0.5, expected: { _tag: "LogProbability" } })
      const token = yield* refuse([good, wireDatum([1, 2, 12, 13], { logprobs: [-1, -1, -1], advantages: [1, 1, 1] }), wireDatum([1, 2, 30, 4], { logprobs: [-1, -1, -1], advantages: [1, 1, 1] })], 2)
      assert.strictEqual(token.body.detail, "forward_backward_input.data[2].model_input token 30 at position 2 is outside the vocabulary [0, 16)")
      const missing = yield* refuse([good, wireDatum([1, 2, 3, 4], { advantages: [1, 1, 1] })], 3)
      assert.strictEqual(missing.body.detail, "forward_backward_input.data[1].loss_fn_inputs.logprobs is required by ppo (inputs: logprobs, advantages, target_tokens)")
    }).pipe(Effect.scoped))

  it.live("gyre's client gets the refused datum's issue as data, the one its own validator finds", () =>
    Effect.gen(function* () {
      const toy = makeToy({ vocab: 16 })
      const server = yield* Server.make({ vocabSize: 16 }).pipe(Effect.provideService(Trainer, toy.trainer), Effect.provideService(Sampler, toy.sampler))
      const datum = (tokens: ReadonlyArray<number>, logprob = -1): Datum => ({
        modelInput: modelInputFromTokens(tokens),
        lossFnInputs: {
          target_tokens: int64(tokens),
          logprobs: float32(tokens.map((_, i) => (i === 0 ? 0 : i === tokens.length - 1 ? logprob : -1))),
          advantages: float32(tokens.map((_, i) => (i === 0 ? 0 : 1))),
        },
      })
      const batches = [
        [datum([1, 2, 3, 4]), datum([1, 2, 3, 4]), datum([1, 2, 3, 4], 0.5)],
        [datum([1, 2, 3, 4]), datum([1, 2, 30, 4])],
      ]
      yield* Effect.gen(function* () {
        const trainer = yield* Trainer
        for (const data of batches) {
          const refused = yield* Effect.flip(trainer.forwardBackward(data, "ppo"))
          assert.strictEqual(refused.reason, "InvalidInput")
          const local = checkAll(data, "ppo", { vocabSize: 16 })
          assert.isDefined(local)
          assert.deepStrictEqual(refused.issue, local)
        }
      }).pipe(Effect.provide(Layer.fresh(Client.layer({ baseUrl: server.url, retry: Retry.fast }))))
    }).pipe(Effect.scoped))

  it("an issue that does not decode (another server's field, a newer kind) is dropped; the error and its detail stay", () => {
    const issue: DatumIssue = { datum: 1, field: ["modelInput"], position: 2, value: 30, expected: { _tag: "InVocabulary", vocabSize: 16, ignorable: false } }
    const read = (body: unknown) => failureOf(400, {}, JSON.stringify(body), 0, (t) => t)
    assert.deepStrictEqual(read({ detail: "bad token", issue }).issue, issue)
    for (const odd of ["a string", { ...issue, expected: { _tag: "SomethingNew" } }, { datum: "one" }]) {
      const f = read({ detail: "bad token", issue: odd })
      assert.strictEqual(f.message, "bad token")
      assert.isUndefined(f.issue)
    }
  })
})

/**
 * `serve` (the embedded backend behind the server) checked with an independent client
 * of the documented Tinker JSON format: plain fetch, no gyre client code.
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import * as Serve from "../../../src/backends/local/Serve.ts"
import * as Server from "../../../src/backends/http/server/Server.ts"
import { createModel, post, result, session, train, wireDatum } from "./JsonClient.ts"

const config = { vocabSize: 99, contextLength: 32, nLayers: 1, dModel: 16, nHeads: 2, mlpRatio: 2 }
/** The server of `serve --random-init`-like settings, alive for the enclosing scope. */
const serve = Effect.map(
  Layer.build(Serve.layer({ config, lora: { rank: 8, alpha: 16, targets: ["q", "k", "v", "o", "w1", "w2"] }, seed: 3, stateDir: "tmp/conformance-state" })),
  (ctx) => Context.get(ctx, Server.Running),
)

const full = [1, 40, 41, 42, 43, 44]
const forwardOf = (base: string, model: string, seq: number, weights: ReadonlyArray<number>) =>
  Effect.map(
    train(base, "forward", { forward_input: { data: [wireDatum(full, { weights })], loss_fn: "cross_entropy" }, model_id: model, seq_id: seq }),
    (r) => r.body.loss_fn_outputs[0].logprobs.data as Array<number>,
  )

describe("serve conformance (independent JSON client)", () => {
  it.live(
    "create_model with another LoRA rank gets a fresh adapter of that rank; forward reports the log-prob of every target, weight 0 or not",
    () =>
      Effect.gen(function* () {
        const server = yield* serve
        const base = server.url
        const s = yield* session(base)
        const served = yield* createModel(base, s, "local:random", 0)
        const four = yield* createModel(base, s, "local:random", 1, 4)
        assert.strictEqual(four.status, 200, JSON.stringify(four.body))
        assert.strictEqual((yield* post(base, "get_info", { model_id: served.body.model_id })).body.lora_rank, 8)
        assert.strictEqual((yield* post(base, "get_info", { model_id: four.body.model_id })).body.lora_rank, 4)
        const model = four.body.model_id as string
        // the rank-4 adapter trains
        const fb = yield* train(base, "forward_backward", {
          forward_backward_input: { data: [wireDatum(full, { weights: [1, 1, 1, 1, 1] })], loss_fn: "cross_entropy" },
          model_id: model,
          seq_id: 1,
        })
        assert.isAbove(fb.body.metrics["loss:sum"], 0)
        const step = yield* train(base, "optim_step", { adam_params: { learning_rate: 0.01 }, model_id: model, seq_id: 2 })
        assert.strictEqual(step.body.policy_version, 1)
        // weights 0 change nothing in the log-probs reported
        const all = yield* forwardOf(base, model, 3, [1, 1, 1, 1, 1])
        const some = yield* forwardOf(base, model, 4, [1, 0, 1, 0, 0])
        assert.strictEqual(some.length, 5)
        for (const lp of some) assert.isBelow(lp, 0)
        some.forEach((lp, i) => assert.closeTo(lp, all[i]!, 1e-6))
      }).pipe(Effect.scoped),
  )

  it.live(
    "advantages finite as float64 but not as float32 are refused with 400 naming the datum and field, and sampling stays finite",
    () =>
      Effect.gen(function* () {
        const server = yield* serve
        const base = server.url
        const s = yield* session(base)
        const model = (yield* createModel(base, s, "local:random", 0)).body.model_id as string
        const poisoned = (advantage: number) => ({
          forward_backward_input: { data: [wireDatum(full, { logprobs: [-4, -4, -4, -4, -4], advantages: [0, advantage, advantage, advantage, advantage] })], loss_fn: "importance_sampling" },
          model_id: model,
          seq_id: 1,
        })
        const refused = yield* post(base, "forward_backward", poisoned(1e300))
        assert.strictEqual(refused.status, 400)
        assert.match(refused.body.detail, /forward_backward_input\.data\[0\]\.loss_fn_inputs\.advantages\.data\[1\]/)
        assert.match(refused.body.detail, /float32/)
        // the refusal used up seq_id 1 (as the SDK numbers its calls)
        const before = yield* forwardOf(base, model, 2, [1, 1, 1, 1, 1])
        // in range as float32, but the gradient overflows: the call fails, and nothing is applied
        const fb = yield* train(base, "forward_backward", { ...poisoned(3e38), seq_id: 3 })
        const step = yield* train(base, "optim_step", { adam_params: { learning_rate: 0.01 }, model_id: model, seq_id: 4 })
        assert.isTrue(typeof fb.body.error === "string" || typeof step.body.error === "string", `${JSON.stringify(fb.body).slice(0, 300)} / ${JSON.stringify(step.body)}`)
        assert.deepStrictEqual(yield* forwardOf(base, model, 5, [1, 1, 1, 1, 1]), before)
        // a finite gradient whose Adam update overflows: the optimizer step fails (a failed future, not a result), nothing is applied
        const fb2 = yield* train(base, "forward_backward", { ...poisoned(1e30), seq_id: 6 })
        assert.isUndefined(fb2.body.error)
        const step2 = yield* train(base, "optim_step", { adam_params: { learning_rate: 0.01 }, model_id: model, seq_id: 7 })
        assert.isString(step2.body.error)
        assert.match(step2.body.error, /accumulated gradient was dropped/)
        assert.isUndefined(step2.body.policy_version)
        assert.deepStrictEqual(yield* forwardOf(base, model, 8, [1, 1, 1, 1, 1]), before)
        // the refused step took its gradient with it: the next forward_backward + optim_step trains
        const fb3 = yield* train(base, "forward_backward", { ...poisoned(1), seq_id: 9 })
        assert.isUndefined(fb3.body.error)
        const step3 = yield* train(base, "optim_step", { adam_params: { learning_rate: 0.01 }, model_id: model, seq_id: 10 })
        assert.isUndefined(step3.body.error, JSON.stringify(step3.body))
        assert.strictEqual(step3.body.policy_version, 1)
        assert.notDeepEqual(yield* forwardOf(base, model, 11, [1, 1, 1, 1, 1]), before)
        // the model still samples
        const pub = yield* train(base, "save_weights_for_sampler", { model_id: model, seq_id: 12 })
        const sampled = yield* post(base, "asample", {
          prompt: { chunks: [{ type: "encoded_text", tokens: [1, 40] }] },
          sampling_params: { max_tokens: 4, temperature: 1, seed: 2 },
          num_samples: 4,
          sampling_session_id: pub.body.sampling_session_id,
          type: "sample",
        })
        const out = yield* result(base, sampled.body.request_id)
        assert.strictEqual(out.body.sequences.length, 4)
        for (const seq of out.body.sequences) for (const lp of seq.logprobs) assert.isTrue(Number.isFinite(lp) && lp <= 0, String(lp))
      }).pipe(Effect.scoped),
  )
})

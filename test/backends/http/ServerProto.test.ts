/**
 * The server's side of today's Tinker wire, with raw HTTP as the official SDK sends it:
 *
 * - `forward_backward` bodies as `application/x-protobuf` (`resources/training.py`:
 *   `forward_backward_request_to_proto`, `forward_only` for `forward`, zstd with
 *   `Content-Encoding: zstd`): the SDK's golden request bytes are decoded (they name
 *   models this server does not have, so the answer is the 404 naming that model), and
 *   the same requests re-addressed to a live model (`Proto.encodeForwardBackwardRequest`)
 *   train;
 * - results through `retrieve_future` with `Accept: application/x-protobuf`
 *   (`lib/api_future_impl.py`): a `ForwardBackwardOutput` and a `SampleResponse` (with
 *   `X-Gyre-Policy-Version`) that read the same numbers as the JSON answer of the same
 *   future; every metric key is `name:reduction` with a reduction the SDK's chunk
 *   combiner knows (`lib/chunked_fwdbwd_helpers.py`); other results stay JSON;
 * - `forward_only` runs a forward (no gradient: the optimizer step after it sees none);
 * - malformed bytes get a 400 naming the problem; a protobuf body on another route is
 *   refused.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import * as Proto from "../../../src/backends/http/wire/Proto.ts"
import * as Server from "../../../src/backends/http/server/Server.ts"
import * as Wire from "../../../src/backends/http/wire/Wire.ts"
import { Sampler } from "../../../src/services/Sampler.ts"
import { Trainer } from "../../../src/services/Trainer.ts"
import { createModel, post, result, session, train } from "./JsonClient.ts"
import { makeToy } from "./ToyBackend.ts"

const DIR = join(import.meta.dirname, "fixtures", "proto")
const fixture = (file: string) => new Uint8Array(readFileSync(join(DIR, file)))
const requestJson = (name: string) => JSON.parse(readFileSync(join(DIR, `${name}.json`), "utf8")).json as Proto.ForwardBackwardRequest

/** The reductions of the SDK's `REDUCE_MAP` (lib/chunked_fwdbwd_helpers.py). */
const REDUCTIONS = ["mean", "sum", "min", "max", "slack", "hash_unordered", "unique"]
const assertWireKeys = (metrics: Readonly<Record<string, unknown>>) => {
  assert.isAbove(Object.keys(metrics).length, 0)
  for (const key of Object.keys(metrics)) {
    const parts = key.split(":")
    assert.isTrue(parts.length === 2 && REDUCTIONS.includes(parts[1]!), `metric key ${key} is not name:reduction`)
  }
}

/** A zstd frame holding `bytes` in one raw block (valid zstd for any decoder; Node 20 has no zstd encoder). */
const rawZstd = (bytes: Uint8Array): Uint8Array => {
  if (bytes.length >= 128 * 1024) throw new Error("one raw block holds less than 128 KiB")
  // magic; frame header descriptor 0 (a window descriptor follows, no content size, no checksum); window 2^17
  const block = 1 | (bytes.length << 3) // last block, type raw, its size
  return new Uint8Array([0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x38, block & 0xff, (block >> 8) & 0xff, (block >> 16) & 0xff, ...bytes])
}

interface Raw {
  readonly status: number
  readonly contentType: string
  readonly headers: Headers
  readonly bytes: Uint8Array
  /** the body as JSON when it is JSON */
  readonly body: any
}

const request = (base: string, path: string, payload: Uint8Array | string, headers: Record<string, string>) =>
  Effect.promise(async (): Promise<Raw> => {
    const res = await fetch(`${base}/api/v1/${path}`, { method: "POST", body: typeof payload === "string" ? payload : new Uint8Array(payload), headers })
    const bytes = new Uint8Array(await res.arrayBuffer())
    const contentType = res.headers.get("content-type") ?? ""
    const body = contentType.includes("json") ? JSON.parse(new TextDecoder().decode(bytes)) : undefined
    return { status: res.status, contentType, headers: res.headers, bytes, body }
  })

/** A protobuf `forward_backward` body, as the SDK posts it. */
const postProto = (base: string, bytes: Uint8Array, headers: Record<string, string> = {}) =>
  request(base, "forward_backward", bytes, { "content-type": Proto.PROTO_CONTENT_TYPE, ...headers })

/** A future's answer as the SDK polls it (`Accept: application/x-protobuf`), after any `try_again`. */
const retrieveProto = (base: string, requestId: string) =>
  Effect.gen(function* () {
    for (let i = 0; i < 1000; i++) {
      const a = yield* request(base, "retrieve_future", JSON.stringify({ request_id: requestId }), { "content-type": "application/json", accept: Proto.PROTO_CONTENT_TYPE })
      if (a.body?.type !== "try_again") return a
    }
    return assert.fail(`future ${requestId} never finished`)
  })

/** A toy server with one model; `seq` numbers its training calls. */
const setup = Effect.gen(function* () {
  const toy = makeToy({ vocab: 32 })
  const server = yield* Server.make({ sampleGather: 0 }).pipe(Effect.provideService(Trainer, toy.trainer), Effect.provideService(Sampler, toy.sampler))
  const base = server.url
  const created = yield* createModel(base, yield* session(base), "toy-bigram")
  const model = created.body.model_id as string
  let seq = 1
  /** a golden request re-addressed to the live model, encoded as the SDK encodes it; without its loss_fn_config when `noConfig` */
  const encoded = (name: string, forwardOnly?: boolean, noConfig = false) => {
    const { loss_fn_config: _, ...input } = requestJson(name).forward_backward_input
    return Proto.encodeForwardBackwardRequest({
      ...requestJson(name),
      ...(noConfig ? { forward_backward_input: input } : {}),
      model_id: model,
      seq_id: seq++,
      ...(forwardOnly !== undefined ? { forward_only: forwardOnly } : {}),
    })
  }
  const nextSeq = () => seq++
  const optimStep = Effect.suspend(() => train(base, "optim_step", { adam_params: { learning_rate: 0.1 }, model_id: model, seq_id: seq++ }))
  return { toy, base, model, encoded, optimStep, nextSeq }
})

describe("protobuf forward_backward on the server", () => {
  it.live("the SDK's golden request bytes decode: each answer is the 404 naming the fixture's model", () =>
    Effect.gen(function* () {
      const { base } = yield* setup
      const files = readdirSync(DIR).filter((f) => f.endsWith(".sdk.bin") && !f.startsWith("fb_image"))
      assert.isAtLeast(files.length, 5)
      for (const file of files) {
        const expected = requestJson(file.slice(0, -".sdk.bin".length))
        const a = yield* postProto(base, fixture(file))
        assert.strictEqual(a.status, 404, `${file}: ${JSON.stringify(a.body)}`)
        assert.include(a.body.detail, JSON.stringify(expected.model_id), file)
      }
      // an image chunk is decoded and refused by name (the messages carry no images here)
      const image = yield* postProto(base, fixture("fb_image_chunk.sdk.bin"))
      assert.strictEqual(image.status, 400, JSON.stringify(image.body))
      assert.match(image.body.detail, /^the protobuf body of forward_backward: .*image/i)
      // zstd as the SDK compresses it; the same bytes without the header are not protobuf
      const zstd = yield* postProto(base, fixture("fb_ppo.zst"), { "content-encoding": "zstd" })
      assert.strictEqual(zstd.status, 404, JSON.stringify(zstd.body))
      assert.include(zstd.body.detail, '"model-ppo"')
      const undeclared = yield* postProto(base, fixture("fb_ppo.zst"))
      assert.strictEqual(undeclared.status, 400)
      assert.match(undeclared.body.detail, /^the protobuf body of forward_backward: /)
    }).pipe(Effect.scoped))

  it.live("a request trains, and its result read as protobuf has the numbers of its JSON answer, metric keys name:reduction", () =>
    Effect.gen(function* () {
      const { toy, base, encoded } = yield* setup
      // a refusal reads as a JSON body's would: importance_sampling takes no loss_fn_config here
      const configured = yield* postProto(base, yield* encoded("fb_importance_sampling"))
      assert.strictEqual(configured.status, 400, JSON.stringify(configured.body))
      assert.match(configured.body.detail, /^forward_backward_input\.loss_fn: loss_fn_config key "clip_ratio" is not accepted by importance_sampling/)
      for (const name of ["fb_cross_entropy", "fb_importance_sampling"]) {
        const before = toy.counters.forwardBackward
        const submitted = yield* postProto(base, yield* encoded(name, undefined, true))
        assert.strictEqual(submitted.status, 200, `${name}: ${JSON.stringify(submitted.body)}`)
        const proto = yield* retrieveProto(base, submitted.body.request_id)
        assert.strictEqual(proto.status, 200)
        assert.include(proto.contentType, Proto.PROTO_CONTENT_TYPE)
        const decoded = yield* Proto.decodeForwardBackwardOutput(proto.bytes)
        const json = (yield* result(base, submitted.body.request_id)).body
        assert.deepStrictEqual(decoded.loss_fn_outputs, json.loss_fn_outputs)
        assert.deepStrictEqual(decoded.metrics, json.metrics)
        assert.strictEqual(decoded.loss_fn_output_type, json.loss_fn_output_type)
        assert.strictEqual(decoded.loss_fn_outputs.length, requestJson(name).forward_backward_input.data.length)
        assertWireKeys(decoded.metrics)
        assert.isAbove(decoded.metrics["active_tokens:sum"] as number, 0)
        assert.strictEqual(toy.counters.forwardBackward, before + 1)
      }
    }).pipe(Effect.scoped))

  it.live("forward_only runs a forward: no gradient reaches the optimizer step after it, unlike a forward_backward", () =>
    Effect.gen(function* () {
      const { toy, base, encoded, optimStep } = yield* setup
      const weights = [...toy.weights()]
      const fwd = yield* postProto(base, yield* encoded("forward_only_cross_entropy", true))
      assert.strictEqual(fwd.status, 200, JSON.stringify(fwd.body))
      const out = yield* Proto.decodeForwardBackwardOutput((yield* retrieveProto(base, fwd.body.request_id)).bytes)
      assert.strictEqual(out.loss_fn_outputs[0]!["logprobs"]!.data.length, 3)
      assert.deepStrictEqual([toy.counters.forward, toy.counters.forwardBackward], [1, 0])
      const still = yield* optimStep
      assert.strictEqual(still.body.metrics["grad_norm:mean"], 0)
      assert.deepStrictEqual([...toy.weights()], weights)
      // the same datums with forward_only false do train
      const fb = yield* postProto(base, yield* encoded("forward_only_cross_entropy", false))
      yield* retrieveProto(base, fb.body.request_id)
      assert.deepStrictEqual([toy.counters.forward, toy.counters.forwardBackward], [1, 1])
      const moved = yield* optimStep
      assert.isAbove(moved.body.metrics["grad_norm:mean"], 0)
      assert.notDeepEqual([...toy.weights()], weights)
    }).pipe(Effect.scoped))

  it.live("a zstd body is accepted; malformed bytes get a 400 naming the problem; a protobuf body on another route is refused", () =>
    Effect.gen(function* () {
      const { toy, base, encoded, model } = yield* setup
      const zstd = yield* postProto(base, rawZstd(yield* encoded("fb_cross_entropy")), { "content-encoding": "zstd" })
      assert.strictEqual(zstd.status, 200, JSON.stringify(zstd.body))
      yield* retrieveProto(base, zstd.body.request_id)
      assert.strictEqual(toy.counters.forwardBackward, 1)
      const cases: ReadonlyArray<readonly [string, Uint8Array, Record<string, string>, RegExp]> = [
        ["garbage", new Uint8Array([0xff, 0xff, 0xff, 0xff]), {}, /^the protobuf body of forward_backward: /],
        ["truncated", (yield* encoded("fb_cross_entropy")).slice(0, 40), {}, /^the protobuf body of forward_backward: /],
        ["bad zstd", new Uint8Array([0x28, 0xb5, 0x2f, 0xfd, 1, 2, 3]), { "content-encoding": "zstd" }, /not valid zstd/],
        ["gzip", yield* encoded("fb_cross_entropy"), { "content-encoding": "gzip" }, /Content-Encoding "gzip" is not supported/],
      ]
      for (const [what, bytes, headers, detail] of cases) {
        const a = yield* postProto(base, bytes, headers)
        assert.strictEqual(a.status, 400, `${what}: ${JSON.stringify(a.body)}`)
        assert.match(a.body.detail, detail, what)
      }
      const elsewhere = yield* request(base, "optim_step", yield* encoded("fb_cross_entropy"), { "content-type": Proto.PROTO_CONTENT_TYPE })
      assert.strictEqual(elsewhere.status, 415, JSON.stringify(elsewhere.body))
      assert.match(elsewhere.body.detail, /only forward_backward takes a protobuf body/)
      assert.strictEqual(toy.counters.forwardBackward, 1)
      // none of them ran, and the model is still served
      assert.strictEqual((yield* post(base, "get_info", { model_id: model })).status, 200)
    }).pipe(Effect.scoped))
})

describe("protobuf results of other futures", () => {
  it.live("a sample's result as protobuf decodes to its JSON answer and carries X-Gyre-Policy-Version; a create_model result stays JSON", () =>
    Effect.gen(function* () {
      const { base, model, encoded, optimStep, nextSeq } = yield* setup
      const fb = yield* postProto(base, yield* encoded("fb_cross_entropy"))
      yield* retrieveProto(base, fb.body.request_id)
      yield* optimStep
      const published = yield* train(base, "save_weights_for_sampler", { model_id: model, path: "s-1", seq_id: nextSeq() })
      assert.strictEqual(published.body.policy_version, 1, JSON.stringify(published.body))
      const submitted = yield* post(base, "asample", {
        model_path: published.body.path,
        prompt: { chunks: [{ type: "encoded_text", tokens: [1, 2, 3] }] },
        sampling_params: { max_tokens: 5, temperature: 1, seed: 11 },
        num_samples: 3,
        prompt_logprobs: true,
        type: "sample",
      })
      assert.strictEqual(submitted.status, 200, JSON.stringify(submitted.body))
      const proto = yield* retrieveProto(base, submitted.body.request_id)
      assert.include(proto.contentType, Proto.PROTO_CONTENT_TYPE)
      assert.strictEqual(proto.headers.get(Proto.POLICY_VERSION_HEADER), "1")
      const decoded = yield* Proto.decodeSampleResponse(proto.bytes)
      const json = (yield* result(base, submitted.body.request_id)).body as Wire.SampleResponse
      assert.strictEqual(json.policy_version, 1)
      assert.strictEqual(decoded.sequences.length, 3)
      assert.deepStrictEqual(decoded.sequences, json.sequences)
      assert.deepStrictEqual(decoded.prompt_logprobs, json.prompt_logprobs)
      assert.strictEqual(json.prompt_logprobs?.[0], null)

      const session2 = yield* session(base)
      const created = yield* post(base, "create_model", { session_id: session2, model_seq_id: 0, base_model: "toy-bigram", type: "create_model" })
      const createdResult = yield* retrieveProto(base, created.body.request_id)
      assert.include(createdResult.contentType, "application/json")
      assert.strictEqual(createdResult.body.type, "create_model")
    }).pipe(Effect.scoped))
})

describe("metric keys on the wire", () => {
  it("gyre's metrics go out as name:reduction and come back as gyre's names", () => {
    const gyre = { loss: 1.5, "loss:sum": 6, active_tokens: 4, clip_fraction: 0.25, grad_norm: 2, learning_rate: 0.1, step: 3, "custom:thing": 7, entropy: 0.5 }
    const wire = Wire.metricsToWire(gyre)
    assertWireKeys(wire)
    assert.deepInclude(wire, { "loss:mean": 1.5, "loss:sum": 6, "active_tokens:sum": 4, "grad_norm:mean": 2, "step:max": 3, "entropy:mean": 0.5 })
    assert.deepStrictEqual(Wire.metricsFromWire(wire), { ...Object.fromEntries(Object.entries(gyre).filter(([k]) => k !== "custom:thing")), "custom/thing": 7 })
    // another server's keys: a listed reduction other than mean stays as it is
    assert.deepStrictEqual(Wire.metricsFromWire({ "tokens:sum": 9, "mfu:mean": 0.4 }), { "tokens:sum": 9, mfu: 0.4 })
    // names that are members of every object are names like any other
    assert.deepStrictEqual(Wire.metricsToWire({ constructor: 1, toString: 2 }), { "constructor:mean": 1, "toString:mean": 2 })
    const objectNames: Record<string, number> = { constructor: 1, toString: 2 }
    assert.deepStrictEqual(Wire.metricsFromWire({ constructor: 1, "toString:mean": 2 }), objectNames)
  })
})

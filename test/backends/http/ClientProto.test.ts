/**
 * gyre's client speaks today's Tinker wire to a server that takes it: after the client
 * config handshake (`POST /client/config`, whose `proto_write_fwdbwd` / `fwd_via_fwdbwd`
 * flags the official SDK read up to 0.24.1, `tinker/types/client_config_response.py`)
 * `forward_backward` and `forward` go as protobuf to `/forward_backward`, `forward` as
 * `forward_only` (`tinker/resources/training.py`); polls ask
 * `Accept: application/x-protobuf` for those results and for samples and read either
 * content type (`tinker/lib/api_future_impl.py`). JSON stays the fallback. The server
 * here is a scripted fake that reads and writes the messages with `Proto.ts`.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { HttpClient, HttpClientResponse } from "effect/http"
import * as Client from "../../../src/backends/http/client/Client.ts"
import * as Proto from "../../../src/backends/http/wire/Proto.ts"
import * as Retry from "../../../src/backends/http/client/Retry.ts"
import type * as Wire from "../../../src/backends/http/wire/Wire.ts"
import { type Datum, float32, int64, modelInputFromTokens } from "../../../src/contract/Contract.ts"
import { Sampler } from "../../../src/services/Sampler.ts"
import { Trainer } from "../../../src/services/Trainer.ts"

interface Seen {
  readonly path: string
  readonly contentType: string | undefined
  readonly accept: string | undefined
  readonly userAgent: string | undefined
  readonly requestType: string | undefined
  /** the body, decoded from JSON or (forward_backward) from protobuf */
  readonly body: any
}

type Pending = { readonly kind: "create" } | { readonly kind: "fb"; readonly n: number; readonly lengths: ReadonlyArray<number> } | { readonly kind: "sample" }

const fbResult = (lengths: ReadonlyArray<number>): Wire.ForwardBackwardOutput => ({
  loss_fn_output_type: "ArrayRecord",
  loss_fn_outputs: lengths.map((n) => ({ logprobs: { data: Array.from({ length: n }, (_, i) => -0.5 * (i + 1)), dtype: "float32" as const, shape: [n] } })),
  metrics: { "loss:sum": 1.5 },
})

const sampleResult: Proto.SampleResponse = {
  sequences: [{ stop_reason: "stop", tokens: [5, 6], logprobs: [-0.25, -0.75] }],
  prompt_logprobs: [null, -1.5],
}

/** A fake server: `config` is its client config (undefined: it has none, 404); `protoResults` false: it answers JSON whatever `Accept` asks. */
const fake = (config: object | undefined, protoResults = true) => {
  const seen: Array<Seen> = []
  const pending = new Map<string, Pending>()
  let ids = 0
  const json = (status: number, body: unknown, request: Parameters<Parameters<typeof HttpClient.make>[0]>[0]) =>
    HttpClientResponse.fromWeb(request, new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json" } }))
  const client = HttpClient.make((request, url) =>
    Effect.gen(function* () {
      const path = url.pathname.replace(/^\/api\/v1\//, "")
      const bytes = request.body._tag === "Uint8Array" ? request.body.body : new Uint8Array()
      const contentType = request.body._tag === "Uint8Array" ? request.body.contentType : undefined
      const body = Proto.isProtoContentType(contentType)
        ? yield* Effect.orDie(Proto.decodeForwardBackwardRequest(bytes))
        : bytes.length > 0
          ? JSON.parse(new TextDecoder().decode(bytes))
          : undefined
      const accept = request.headers["accept"]
      seen.push({ path, contentType, accept, userAgent: request.headers["user-agent"], requestType: request.headers["x-tinker-request-type"], body })
      const future = (p: Pending) => {
        const id = `r-${++ids}`
        pending.set(id, p)
        return json(200, { request_id: id }, request)
      }
      switch (path) {
        case "client/config":
          return config === undefined ? json(404, { detail: "no such route" }, request) : json(200, config, request)
        case "create_session":
          return json(200, { type: "create_session", session_id: "s1" }, request)
        case "get_server_capabilities":
          return json(200, { supported_models: [{ model_name: "fake", max_context_length: 64 }] }, request)
        case "get_info":
          return json(200, { model_data: { model_name: "fake" }, model_id: "s1:train:0", lora_rank: 4, policy_version: 0 }, request)
        case "session_heartbeat":
          return json(200, { type: "session_heartbeat" }, request)
        case "create_model":
          return future({ kind: "create" })
        case "forward_backward":
        case "forward": {
          const data = (body.forward_backward_input ?? body.forward_input).data as ReadonlyArray<Wire.Datum>
          return future({ kind: "fb", n: data.length, lengths: data.map((d) => d.model_input.chunks[0]!.tokens.length) })
        }
        case "asample":
          return future({ kind: "sample" })
        case "retrieve_future": {
          const p = pending.get(body.request_id)
          const proto = protoResults && accept?.includes(Proto.PROTO_CONTENT_TYPE) === true
          const bin = (b: Uint8Array, headers: Record<string, string> = {}) =>
            HttpClientResponse.fromWeb(request, new Response(new Uint8Array(b), { status: 200, headers: { "content-type": Proto.PROTO_CONTENT_TYPE, ...headers } }))
          if (p?.kind === "create") return json(200, { model_id: "s1:train:0" }, request)
          if (p?.kind === "fb") return proto ? bin(yield* Effect.orDie(Proto.encodeForwardBackwardOutput(fbResult(p.lengths)))) : json(200, fbResult(p.lengths), request)
          if (p?.kind === "sample") {
            return proto ? bin(yield* Effect.orDie(Proto.encodeSampleResponse(sampleResult)), { [Proto.POLICY_VERSION_HEADER]: "7" }) : json(200, { ...sampleResult, policy_version: 3 }, request)
          }
          return json(404, { detail: "unknown future" }, request)
        }
        default:
          return json(404, { detail: `no ${path}` }, request)
      }
    }),
  )
  return { layer: Layer.succeed(HttpClient.HttpClient, client), seen }
}

const datum = (tokens: ReadonlyArray<number>): Datum => ({
  modelInput: modelInputFromTokens(tokens),
  lossFnInputs: { target_tokens: int64(tokens), weights: float32(tokens.map((_, i) => (i === 0 ? 0 : 1))) },
})

/** connects, runs forward_backward, forward and a sample, and returns what the fake saw and what came back */
const session = (config: object | undefined, wire?: "auto" | "protobuf" | "json", topK?: number, protoResults = true) =>
  Effect.gen(function* () {
    const server = fake(config, protoResults)
    const layer = Client.layerNoDeps({ baseUrl: "http://fake.test", retry: Retry.policy({ jitter: 0 }), apiKey: undefined, wire }).pipe(Layer.provide(server.layer))
    const results = yield* Effect.gen(function* () {
      const trainer = yield* Trainer
      const sampler = yield* Sampler
      const fb = yield* trainer.forwardBackward([datum([1, 2, 3, 4]), datum([1, 5, 6])], "cross_entropy", topK !== undefined ? { topKLogprobs: topK } : undefined)
      const fwd = yield* trainer.forward([datum([1, 7, 8])], "cross_entropy")
      const sample = yield* sampler.sample(modelInputFromTokens([1, 2]), { maxTokens: 2, temperature: 1 }, { numSamples: 1, includePromptLogprobs: true })
      return { fb, fwd, sample }
    }).pipe(Effect.provide(layer), Effect.scoped)
    return { ...results, seen: server.seen }
  })

const PROTO_FLAGS = { proto_write_fwdbwd: true, fwd_via_fwdbwd: true, proto_compress_fwdbwd: true }

describe("gyre's client on today's Tinker wire", () => {
  it.live("sends forward_backward and forward as protobuf when the client config says the server takes it, and reads protobuf results", () =>
    Effect.gen(function* () {
      const { fb, fwd, sample, seen } = yield* session(PROTO_FLAGS)
      assert.strictEqual(seen.filter((s) => s.path === "client/config").length, 1)
      const training = seen.filter((s) => s.path === "forward_backward" || s.path === "forward")
      assert.deepStrictEqual(training.map((s) => [s.path, s.contentType, s.body.forward_only, s.body.seq_id]), [
        ["forward_backward", Proto.PROTO_CONTENT_TYPE, false, 1],
        ["forward_backward", Proto.PROTO_CONTENT_TYPE, true, 2],
      ])
      // the datums arrive as the JSON route would have them (shifted targets, weights 0 on the prompt)
      assert.deepStrictEqual(training[0]!.body.forward_backward_input.data[1].loss_fn_inputs.target_tokens, { data: [5, 6], dtype: "int64", shape: [2] })
      const polls = seen.filter((s) => s.path === "retrieve_future" && s.requestType !== "CreateModel")
      assert.deepStrictEqual(polls.map((p) => p.requestType), ["ForwardBackward", "Forward", "Sample"])
      for (const p of polls) assert.include(p.accept, Proto.PROTO_CONTENT_TYPE)
      assert.deepStrictEqual(fb.lossFnOutputs.map((o) => o.logprobs), [[0, -0.5, -1, -1.5], [0, -0.5, -1]])
      assert.deepStrictEqual(fb.metrics, { "loss:sum": 1.5 })
      assert.deepStrictEqual(fwd.lossFnOutputs[0]!.logprobs, [0, -0.5, -1])
      assert.deepStrictEqual(sample.sequences, [{ tokens: [5, 6], logprobs: [-0.25, -0.75], stopReason: "stop" }])
      assert.strictEqual(sample.policyVersion, 7)
      // it names itself as gyre, never as the Python SDK
      for (const s of seen) assert.match(s.userAgent ?? "", /^gyre\/\d+\.\d+\.\d+ \(node /)
      assert.match(seen.find((s) => s.path === "client/config")!.body.sdk_version, /^gyre\//)
    }),
  )

  it.live("keeps JSON for forward_backward and forward when the server's client config does not ask for protobuf, and reads JSON results from a server that answers JSON", () =>
    Effect.gen(function* () {
      for (const config of [{ proto_compress_fwdbwd: false }, undefined]) {
        const { fb, sample, seen } = yield* session(config, "auto", undefined, false)
        const training = seen.filter((s) => s.path === "forward_backward" || s.path === "forward")
        assert.deepStrictEqual(training.map((s) => [s.path, s.contentType]), [["forward_backward", "application/json"], ["forward", "application/json"]])
        // results are still asked for as protobuf or JSON, as the SDK asks
        for (const p of seen.filter((s) => s.path === "retrieve_future" && s.requestType !== "CreateModel")) assert.include(p.accept, Proto.PROTO_CONTENT_TYPE)
        assert.deepStrictEqual(fb.lossFnOutputs[1]!.logprobs, [0, -0.5, -1])
        assert.strictEqual(sample.policyVersion, 3)
      }
    }),
  )

  it.live("proto_write_fwdbwd without fwd_via_fwdbwd: forward_backward as protobuf, forward as JSON", () =>
    Effect.gen(function* () {
      const { seen } = yield* session({ proto_write_fwdbwd: true })
      const training = seen.filter((s) => s.path === "forward_backward" || s.path === "forward")
      assert.deepStrictEqual(training.map((s) => [s.path, s.contentType]), [["forward_backward", Proto.PROTO_CONTENT_TYPE], ["forward", "application/json"]])
    }),
  )

  it.live("wire: json asks for no client config and only JSON; wire: protobuf needs no flags", () =>
    Effect.gen(function* () {
      const json = yield* session(PROTO_FLAGS, "json")
      assert.strictEqual(json.seen.filter((s) => s.path === "client/config").length, 0)
      for (const s of json.seen) assert.notInclude(s.accept ?? "", Proto.PROTO_CONTENT_TYPE)
      assert.strictEqual(json.seen.find((s) => s.path === "forward_backward")!.contentType, "application/json")
      const proto = yield* session(undefined, "protobuf")
      assert.strictEqual(proto.seen.filter((s) => s.path === "client/config").length, 0)
      assert.deepStrictEqual(proto.seen.filter((s) => s.path === "forward_backward").map((s) => s.contentType), [Proto.PROTO_CONTENT_TYPE, Proto.PROTO_CONTENT_TYPE])
    }),
  )

  it.live("a request protobuf cannot carry (gyre's top_k_logprobs) goes as JSON", () =>
    Effect.gen(function* () {
      const { seen } = yield* session(PROTO_FLAGS, "auto", 2)
      const training = seen.filter((s) => s.path === "forward_backward" || s.path === "forward")
      assert.deepStrictEqual(training.map((s) => s.contentType), ["application/json", Proto.PROTO_CONTENT_TYPE])
      assert.strictEqual(training[0]!.body.forward_backward_input.top_k_logprobs, 2)
    }),
  )
})

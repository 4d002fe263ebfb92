/**
 * The protobuf layer of today's Tinker wire against golden fixtures made by the
 * official Python SDK's own converters (`scripts/sdk/golden.py`, SDK 0.25.0), and
 * round-trip laws. Each fixture's `.json` names the SDK file it exercises:
 * - requests: `tinker/proto/request_conv.py` (`forward_backward_request_to_proto`), with
 *   `forward_only` set and zstd applied as `tinker/resources/training.py` does;
 * - results: built as a server would and checked by golden.py against
 *   `tinker/proto/response_conv.py` (`deserialize_forward_backward_output`,
 *   `deserialize_sample_response`) and `tinker/types/sample_response.py` (NaN prompt
 *   logprobs read as None, padded top-k rows).
 */
import { create, toBinary } from "@bufbuild/protobuf"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit } from "effect"
import * as fc from "fast-check"
import { readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import * as Proto from "../../../src/backends/http/wire/Proto.ts"
import * as Pb from "../../../src/backends/http/wire/proto/tinker_public_pb.ts"
import type * as Wire from "../../../src/backends/http/wire/Wire.ts"

const DIR = join(import.meta.dirname, "fixtures", "proto")

interface Fixture {
  readonly name: string
  readonly message: "ForwardBackwardRequest" | "ForwardBackwardOutput" | "SampleResponse"
  readonly sdk: string
  readonly json: never
}

const fixtures: ReadonlyArray<Fixture> = readdirSync(DIR)
  .filter((f) => f.endsWith(".json"))
  .sort()
  .map((f) => ({ name: f.slice(0, -".json".length), ...(JSON.parse(readFileSync(join(DIR, f), "utf8")) as Omit<Fixture, "name">) }))

const bytes = (file: string) => new Uint8Array(readFileSync(join(DIR, file)))

const run = <A>(effect: Effect.Effect<A, Proto.ProtoError>): A => Effect.runSync(effect)

const failure = <A>(effect: Effect.Effect<A, Proto.ProtoError>): Proto.ProtoError => {
  const exit = Effect.runSyncExit(effect)
  if (Exit.isSuccess(exit)) throw new Error("expected a ProtoError, got a success")
  const error = exit.cause.reasons.find((r) => r._tag === "Fail")
  if (error === undefined || error._tag !== "Fail") throw new Error(`expected a ProtoError, got ${String(exit.cause)}`)
  return error.error
}

const sameBytes = (actual: Uint8Array, expected: Uint8Array) => assert.deepStrictEqual(Buffer.from(actual).toString("hex"), Buffer.from(expected).toString("hex"))

describe("golden fixtures from the official SDK", () => {
  it("covers requests, forward/backward results and sample results", () => {
    const kinds = new Set(fixtures.map((f) => f.message))
    assert.deepStrictEqual([...kinds].sort(), ["ForwardBackwardOutput", "ForwardBackwardRequest", "SampleResponse"])
    assert.isAtLeast(fixtures.length, 10)
  })

  for (const f of fixtures) {
    it(`${f.name}: decodes to its JSON value and encodes back byte for byte (${f.sdk})`, () => {
      const canonical = bytes(`${f.name}.bin`)
      switch (f.message) {
        case "ForwardBackwardRequest": {
          // what the SDK sent (map entries in hash order) and its deterministic form
          assert.deepStrictEqual(run(Proto.decodeForwardBackwardRequest(bytes(`${f.name}.sdk.bin`))), f.json)
          assert.deepStrictEqual(run(Proto.decodeForwardBackwardRequest(canonical)), f.json)
          sameBytes(run(Proto.encodeForwardBackwardRequest(f.json)), canonical)
          break
        }
        case "ForwardBackwardOutput":
          assert.deepStrictEqual(run(Proto.decodeForwardBackwardOutput(canonical)), f.json)
          sameBytes(run(Proto.encodeForwardBackwardOutput(f.json)), canonical)
          break
        case "SampleResponse":
          assert.deepStrictEqual(run(Proto.decodeSampleResponse(canonical)), f.json)
          sameBytes(run(Proto.encodeSampleResponse(f.json)), canonical)
          break
      }
    })
  }

  it("decodes a zstd body as the SDK compresses it when proto_compress_fwdbwd is on (tinker/resources/training.py)", () => {
    const json = fixtures.find((f) => f.name === "fb_ppo")!.json
    assert.deepStrictEqual(run(Proto.decodeForwardBackwardRequest(bytes("fb_ppo.zst"), "zstd")), json)
    sameBytes(run(Proto.decompressZstd(bytes("fb_ppo.zst"))), bytes("fb_ppo.sdk.bin"))
  })

  it("keeps forward_only and the name:reduction metric keys", () => {
    assert.isTrue(run(Proto.decodeForwardBackwardRequest(bytes("forward_only_cross_entropy.sdk.bin"))).forward_only)
    const out = run(Proto.decodeForwardBackwardOutput(bytes("fb_output_cross_entropy.bin")))
    assert.deepStrictEqual(Object.keys(out.metrics).sort(), ["active_tokens:sum", "clipped_fraction:mean", "loss:sum"])
  })

  it("refuses an image chunk, naming the datum and the chunk", () => {
    const e = failure(Proto.decodeForwardBackwardRequest(bytes("fb_image_chunk.sdk.bin")))
    assert.strictEqual(e.reason, "Unsupported")
    assert.include(e.message, "forward_backward_input.data[1].model_input.chunks[1]")
    assert.include(e.message, "image")
  })
})

describe("malformed bodies", () => {
  it("names what is wrong", () => {
    const garbage = failure(Proto.decodeForwardBackwardRequest(new Uint8Array([0x1a, 0xff, 0xff, 0xff, 0xff, 0x0f])))
    assert.strictEqual(garbage.reason, "Malformed")
    assert.include(garbage.message, "ForwardBackwardRequest")

    const tensor = create(Pb.TensorSchema, { dtype: Pb.DType.DTYPE_FLOAT32, encoding: { case: "dense", value: new Uint8Array(6) } })
    const datum = create(Pb.DatumSchema, { lossFnInputs: { weights: tensor } })
    const odd = toBinary(Pb.ForwardBackwardRequestSchema, create(Pb.ForwardBackwardRequestSchema, { modelId: "m", seqId: 1, lossFn: "cross_entropy", data: [datum] }))
    const e = failure(Proto.decodeForwardBackwardRequest(odd))
    assert.strictEqual(e.reason, "Malformed")
    assert.include(e.message, "forward_backward_input.data[0].loss_fn_inputs.weights.dense has 6 bytes")

    const untyped = create(Pb.TensorSchema, { encoding: { case: "dense", value: new Uint8Array(4) } })
    const noDtype = toBinary(Pb.ForwardBackwardRequestSchema, create(Pb.ForwardBackwardRequestSchema, { data: [create(Pb.DatumSchema, { lossFnInputs: { advantages: untyped } })] }))
    assert.include(failure(Proto.decodeForwardBackwardRequest(noDtype)).message, "loss_fn_inputs.advantages.dtype is DTYPE_UNSPECIFIED")
  })

  it("refuses bad zstd, unknown encodings and bodies that decompress too far", () => {
    assert.strictEqual(failure(Proto.decodeForwardBackwardRequest(new Uint8Array([1, 2, 3, 4, 5]), "zstd")).reason, "Compression")
    const gzip = failure(Proto.decodeForwardBackwardRequest(bytes("fb_ppo.sdk.bin"), "gzip"))
    assert.strictEqual(gzip.reason, "Compression")
    assert.include(gzip.message, "gzip")
    assert.include(failure(Proto.decompressZstd(bytes("fb_ppo.zst"), 16)).message, "more than 16 bytes")
  })

  it("refuses what the messages cannot carry", () => {
    const req = fixtures.find((f) => f.name === "fb_cross_entropy")!.json as Proto.ForwardBackwardRequest
    const topK = failure(Proto.encodeForwardBackwardRequest({ ...req, forward_backward_input: { ...req.forward_backward_input, top_k_logprobs: 2 } }))
    assert.strictEqual(topK.reason, "Unsupported")
    assert.include(topK.message, "top_k_logprobs")
    const ragged: Wire.ForwardBackwardOutput = {
      loss_fn_outputs: [{ logprobs: { data: [-1], dtype: "float32" } }, { elementwise_loss: { data: [1], dtype: "float32" } }],
      metrics: {},
    }
    assert.include(failure(Proto.encodeForwardBackwardOutput(ragged)).message, "loss_fn_outputs[1] has fields [elementwise_loss]")
  })
})

// ---------------------------------------------------------------------------
// round trips

const f32 = fc.float({ noNaN: true, noDefaultInfinity: true })
const int32 = fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 })
const key = fc.stringMatching(/^[a-z_][a-z_:]{0,11}$/).filter((k) => k !== "__proto__")

const tensor: fc.Arbitrary<Wire.TensorData> = fc.oneof(
  fc.array(f32, { maxLength: 6 }).chain((data) => fc.boolean().map((shaped) => ({ data, dtype: "float32" as const, ...(shaped ? { shape: [data.length] } : {}) }))),
  fc.array(fc.maxSafeInteger(), { maxLength: 6 }).map((data) => ({ data, dtype: "int64" as const, shape: [data.length] })),
  // CSR: two rows of four columns
  fc.tuple(fc.integer({ min: 0, max: 4 }), fc.integer({ min: 0, max: 4 })).chain(([a, b]) =>
    fc.array(f32, { minLength: a + b, maxLength: a + b }).map((data) => ({
      data,
      dtype: "float32" as const,
      shape: [2, 4],
      sparse_crow_indices: [0, a, a + b],
      sparse_col_indices: [...Array.from({ length: a }, (_, i) => i), ...Array.from({ length: b }, (_, i) => 3 - i)],
    })),
  ),
)

const request: fc.Arbitrary<Proto.ForwardBackwardRequest> = fc.record({
  forward_backward_input: fc.record({
    data: fc.array(
      fc.record({
        model_input: fc.record({ chunks: fc.array(fc.record({ type: fc.constant("encoded_text" as const), tokens: fc.array(int32, { maxLength: 8 }) }), { minLength: 1, maxLength: 3 }) }),
        loss_fn_inputs: fc.dictionary(key, tensor, { maxKeys: 4 }),
      }),
      { maxLength: 4 },
    ),
    loss_fn: fc.constantFrom("cross_entropy", "importance_sampling", "ppo", "cispo"),
    loss_fn_config: fc.option(fc.dictionary(key, fc.double({ noNaN: true }), { minKeys: 1, maxKeys: 3 }), { nil: undefined }),
  }),
  model_id: fc.string({ maxLength: 12 }),
  seq_id: fc.integer({ min: 0, max: 2 ** 31 - 1 }),
  forward_only: fc.boolean(),
}).map((r) => ({ ...r, forward_backward_input: dropUndefined(r.forward_backward_input) }))

function dropUndefined<A extends object>(o: A): A {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as A
}

/** Outputs that share fields and dtypes, with 1-D or 2-D shapes (ragged trailing shapes make several records). */
const output: fc.Arbitrary<Wire.ForwardBackwardOutput> = fc
  .record({ fields: fc.uniqueArray(fc.tuple(key, fc.constantFrom("float32" as const, "int64" as const)), { selector: ([k]) => k, maxLength: 3 }), n: fc.integer({ min: 0, max: 4 }) })
  .chain(({ fields, n }) =>
    fc.record({
      loss_fn_output_type: fc.constant("ArrayRecord"),
      loss_fn_outputs: fc.array(
        fc.tuple(...fields.map(([k, dtype]) =>
          fc.tuple(fc.integer({ min: 0, max: 3 }), fc.integer({ min: 1, max: 3 }), fc.boolean()).chain(([rows, cols, flat]) =>
            fc.array(dtype === "float32" ? f32 : fc.maxSafeInteger(), { minLength: rows * cols, maxLength: rows * cols }).map((data) => [k, { data, dtype, shape: flat ? [rows * cols] : [rows, cols] }] as const),
          ),
        )).map((entries) => Object.fromEntries(entries)),
        { minLength: n, maxLength: n },
      ),
      metrics: fc.dictionary(key, fc.oneof(fc.double({ noNaN: true, noDefaultInfinity: true }), fc.constantFrom("NaN" as const, "Infinity" as const, "-Infinity" as const))),
    }),
  )

const logprob = f32.filter((x) => x !== Proto.MASK_LOGPROB)
const sample: fc.Arbitrary<Proto.SampleResponse> = fc
  .record({
    sequences: fc.array(
      fc.record({ stop_reason: fc.constantFrom("stop" as const, "length" as const), tokens: fc.array(int32, { maxLength: 6 }), logprobs: fc.option(fc.array(f32, { maxLength: 6 }), { nil: undefined }) }),
      { maxLength: 4 },
    ),
    prompt_logprobs: fc.option(fc.array(fc.option(f32, { nil: null }), { maxLength: 6 }), { nil: undefined }),
    // rows that are not all padding; an empty list decodes as absent, as the SDK reads it
    topk_prompt_logprobs: fc.option(fc.array(fc.option(fc.array(fc.tuple(fc.integer({ min: 1, max: 2 ** 31 - 1 }), logprob), { minLength: 1, maxLength: 4 }), { nil: null }), { minLength: 1, maxLength: 5 }), { nil: undefined }),
    prompt_cache_hit_tokens: fc.option(fc.integer({ min: 1, max: 2 ** 31 - 1 }), { nil: undefined }),
  })
  .map((s) => ({ ...dropUndefined(s), sequences: s.sequences.map(dropUndefined) }))

describe("round trips", () => {
  it("ForwardBackwardRequest: decode(encode(x)) = x, and encoding is stable", () =>
    fc.assert(
      fc.property(request, (r) => {
        const encoded = run(Proto.encodeForwardBackwardRequest(r))
        const decoded = run(Proto.decodeForwardBackwardRequest(encoded))
        assert.deepStrictEqual(decoded, r)
        sameBytes(run(Proto.encodeForwardBackwardRequest(decoded)), encoded)
      }),
      { numRuns: 200 },
    ))

  it("ForwardBackwardOutput: decode(encode(x)) = x", () =>
    fc.assert(
      fc.property(output, (o) => {
        const decoded = run(Proto.decodeForwardBackwardOutput(run(Proto.encodeForwardBackwardOutput(o))))
        assert.deepStrictEqual(decoded, o)
      }),
      { numRuns: 200 },
    ))

  it("SampleResponse: decode(encode(x)) = x", () =>
    fc.assert(
      fc.property(sample, (s) => {
        assert.deepStrictEqual(run(Proto.decodeSampleResponse(run(Proto.encodeSampleResponse(s)))), s)
      }),
      { numRuns: 200 },
    ))
})

/**
 * `RequestWriter` writes a `ForwardBackwardRequest` without protobuf-es: its bytes must be
 * protobuf-es's (`toBinary` of `requestToProto`) for any request, for every `seq_id`, and a
 * value that does not fit must fail as before, naming it.
 */
import { toBinary } from "@bufbuild/protobuf"
import { assert, describe, it } from "@effect/vitest"
import { Result } from "effect"
import * as fc from "fast-check"
import type { ForwardBackwardRequest } from "../../../src/backends/http/wire/proto/Common.ts"
import { requestToProto } from "../../../src/backends/http/wire/proto/Requests.ts"
import * as RequestWriter from "../../../src/backends/http/wire/proto/RequestWriter.ts"
import * as Pb from "../../../src/backends/http/wire/proto/tinker_public_pb.ts"
import type * as Wire from "../../../src/backends/http/wire/Wire.ts"

const hex = (b: Uint8Array) => Buffer.from(b).toString("hex")
const expected = (req: ForwardBackwardRequest) => hex(toBinary(Pb.ForwardBackwardRequestSchema, Result.getOrThrow(requestToProto(req))))

const number = fc.oneof(fc.double(), fc.float(), fc.constantFrom(0, -0, 1, -1))
const int32 = fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 })
const int64 = fc.oneof(fc.maxSafeInteger(), fc.constantFrom(-100, -1, 2 ** 32, -(2 ** 32), Number.MAX_SAFE_INTEGER, Number.MIN_SAFE_INTEGER))
// integer-like keys come first in a record's key order, as protobuf-es writes them
const key = fc.oneof(fc.stringMatching(/^[a-z_][a-z_:]{0,11}$/), fc.constantFrom("0", "10", "2", "é", "")).filter((k) => k !== "__proto__")
const shape = (n: number) => fc.oneof(fc.constant(undefined), fc.constant([n]), fc.array(fc.integer({ min: -3, max: 2 ** 40 }), { maxLength: 3 }))
const tensor: fc.Arbitrary<Wire.TensorData> = fc.oneof(
  fc.array(number, { maxLength: 40 }).chain((data) => shape(data.length).map((s) => ({ data, dtype: "float32" as const, ...(s !== undefined ? { shape: s } : {}) }))),
  fc.array(int64, { maxLength: 40 }).chain((data) => shape(data.length).map((s) => ({ data, dtype: "int64" as const, ...(s !== undefined ? { shape: s } : {}) }))),
  fc.record({
    data: fc.array(number, { maxLength: 5 }),
    dtype: fc.constant("float32" as const),
    sparse_crow_indices: fc.array(int64, { maxLength: 4 }),
    sparse_col_indices: fc.array(int64, { maxLength: 4 }),
  }),
)
const request: fc.Arbitrary<ForwardBackwardRequest> = fc.record({
  forward_backward_input: fc.record({
    data: fc.array(
      fc.record({
        model_input: fc.record({ chunks: fc.array(fc.record({ type: fc.constant("encoded_text" as const), tokens: fc.array(int32, { maxLength: 40 }) }), { maxLength: 3 }) }),
        loss_fn_inputs: fc.dictionary(key, tensor, { maxKeys: 4 }),
      }),
      { maxLength: 4 },
    ),
    loss_fn: fc.constantFrom("cross_entropy", "ppo", ""),
    loss_fn_config: fc.option(fc.dictionary(key, fc.double(), { maxKeys: 3 }), { nil: undefined }),
  }),
  model_id: fc.string({ maxLength: 12 }),
  seq_id: fc.oneof(fc.integer({ min: 0, max: 2 ** 31 - 1 }), fc.integer({ min: -(2 ** 31), max: -1 })),
  forward_only: fc.boolean(),
})

describe("RequestWriter", () => {
  it("writes protobuf-es's bytes, for each seq_id", () => {
    fc.assert(
      fc.property(request, fc.integer({ min: 0, max: 2 ** 31 - 1 }), (req, other) => {
        const write = Result.getOrThrow(RequestWriter.numbered(req))
        const first = write(req.seq_id)
        assert.strictEqual(hex(first), expected(req))
        // a second seq_id leaves the first one's bytes as they were
        assert.strictEqual(hex(write(other)), expected({ ...req, seq_id: other }))
        assert.strictEqual(hex(first), expected(req))
      }),
      { numRuns: 400 },
    )
  })

  const datum = (tokens: ReadonlyArray<number>, inputs: Record<string, Wire.TensorData> = {}): ForwardBackwardRequest => ({
    forward_backward_input: { data: [{ model_input: { chunks: [{ type: "encoded_text", tokens: [...tokens] }] }, loss_fn_inputs: inputs }], loss_fn: "ppo" },
    model_id: "m",
    seq_id: 1,
    forward_only: false,
  })
  const message = (req: ForwardBackwardRequest) => {
    const r = RequestWriter.numbered(req)
    return Result.isFailure(r) ? `${r.failure.reason}: ${r.failure.message}` : "ok"
  }

  it("refuses what protobuf cannot carry, naming the value", () => {
    assert.strictEqual(message(datum([1, 2 ** 31])), "Malformed: forward_backward_input.data[0].model_input.chunks[0].tokens[1] is 2147483648; it must be an int32")
    assert.strictEqual(message(datum([1.5])), "Malformed: forward_backward_input.data[0].model_input.chunks[0].tokens[0] is 1.5; it must be an int32")
    assert.strictEqual(
      message(datum([1], { target_tokens: { data: [2 ** 53], dtype: "int64" } })),
      "Malformed: forward_backward_input.data[0].loss_fn_inputs.target_tokens.data[0] is 9007199254740992; it must be an integer within ±2^53",
    )
    assert.strictEqual(
      message(datum([1], { w: { data: [1], dtype: "float32", sparse_crow_indices: [0] } })),
      "Malformed: forward_backward_input.data[0].loss_fn_inputs.w has sparse_crow_indices without sparse_col_indices",
    )
    const topK = datum([1])
    assert.strictEqual(message({ ...topK, forward_backward_input: { ...topK.forward_backward_input, top_k_logprobs: 2 } }).split(":")[0], "Unsupported")
  })

  it("gives the old encoder's message for each refusal", () => {
    for (const req of [datum([1, 2 ** 31]), datum([1], { target_tokens: { data: [0.5], dtype: "int64" } })]) {
      const old = requestToProto(req)
      assert.isTrue(Result.isFailure(old))
      assert.strictEqual(message(req), Result.isFailure(old) ? `${old.failure.reason}: ${old.failure.message}` : "")
    }
  })
})

/**
 * `ForwardBackwardRequest` messages <-> the JSON route's body (plus `forward_only`),
 * as the SDK's `proto/request_conv.py` writes them.
 *
 * @since 0.1.0
 */
import { create } from "@bufbuild/protobuf"
import { Result } from "effect"
import type * as Wire from "../Wire.ts"
import { type ForwardBackwardRequest, malformed, orMalformed, type ProtoError, readDtype, shapeOf, sortedRecord, unsupported, WRITE } from "./Common.ts"
import { pack, unpack } from "./Packed.ts"
import * as Pb from "./tinker_public_pb.ts"

const tensorFromProto = (t: Pb.Tensor, at: string): Result.Result<Wire.TensorData, ProtoError> =>
  Result.gen(function* () {
    const [element, dtype] = yield* readDtype(t.dtype, at)
    const shape = yield* shapeOf(t.shape, `${at}.shape`)
    const dims = shape.length > 0 ? { shape } : {}
    switch (t.encoding.case) {
      case "dense":
        return { data: yield* orMalformed(unpack(t.encoding.value, element, `${at}.dense`)), dtype, ...dims }
      case "sparseCsr": {
        const csr = t.encoding.value
        return {
          data: yield* orMalformed(unpack(csr.values, element, `${at}.sparse_csr.values`)),
          dtype,
          ...dims,
          sparse_crow_indices: yield* orMalformed(unpack(csr.crowIndices, "int64", `${at}.sparse_csr.crow_indices`)),
          sparse_col_indices: yield* orMalformed(unpack(csr.colIndices, "int64", `${at}.sparse_csr.col_indices`)),
        }
      }
      default:
        return yield* Result.fail(malformed(`${at} has neither dense nor sparse_csr data`))
    }
  })

const datumFromProto = (d: Pb.Datum, at: string): Result.Result<Wire.Datum, ProtoError> =>
  Result.gen(function* () {
    const chunks: Array<Wire.ModelInput["chunks"][number]> = []
    for (const [j, { chunk }] of d.modelInput.entries()) {
      const where = `${at}.model_input.chunks[${j}]`
      if (chunk.case === "encodedText") chunks.push({ type: "encoded_text", tokens: yield* orMalformed(unpack(chunk.value.tokens, "int32", `${where}.tokens`)) })
      else if (chunk.case === "image" || chunk.case === "dmel") {
        return yield* Result.fail(unsupported(`${where} is ${chunk.case === "image" ? "an image" : "an audio (dmel)"} chunk; this server takes token (encoded_text) chunks only`))
      } else return yield* Result.fail(malformed(`${where} is an empty chunk`))
    }
    const inputs: Record<string, Wire.TensorData> = {}
    for (const [key, t] of Object.entries(d.lossFnInputs)) inputs[key] = yield* tensorFromProto(t, `${at}.loss_fn_inputs.${key}`)
    return { model_input: { chunks }, loss_fn_inputs: inputs }
  })

/** @since 0.1.0 @category decoding */
export const requestFromProto = (msg: Pb.ForwardBackwardRequest): Result.Result<ForwardBackwardRequest, ProtoError> =>
  Result.gen(function* () {
    const data: Array<Wire.Datum> = []
    for (const [i, d] of msg.data.entries()) data.push(yield* datumFromProto(d, `forward_backward_input.data[${i}]`))
    const config = Object.keys(msg.lossFnConfig).length > 0 ? { loss_fn_config: { ...msg.lossFnConfig } } : {}
    return { forward_backward_input: { data, loss_fn: msg.lossFn, ...config }, model_id: msg.modelId, seq_id: msg.seqId, forward_only: msg.forwardOnly }
  })

const tensorToProto = (t: Wire.TensorData, at: string): Result.Result<Pb.Tensor, ProtoError> =>
  Result.gen(function* () {
    const [element, dtype] = WRITE[t.dtype]
    const shape = (t.shape ?? []).map(BigInt)
    const values = yield* orMalformed(pack(t.data, element, `${at}.data`))
    if (t.sparse_crow_indices === undefined) return create(Pb.TensorSchema, { dtype, shape, encoding: { case: "dense", value: values } })
    if (t.sparse_col_indices === undefined) return yield* Result.fail(malformed(`${at} has sparse_crow_indices without sparse_col_indices`))
    const sparse = create(Pb.SparseCsrSchema, {
      values,
      crowIndices: yield* orMalformed(pack(t.sparse_crow_indices, "int64", `${at}.sparse_crow_indices`)),
      colIndices: yield* orMalformed(pack(t.sparse_col_indices, "int64", `${at}.sparse_col_indices`)),
    })
    return create(Pb.TensorSchema, { dtype, shape, encoding: { case: "sparseCsr", value: sparse } })
  })

/** @since 0.1.0 @category encoding */
export const requestToProto = (req: ForwardBackwardRequest): Result.Result<Pb.ForwardBackwardRequest, ProtoError> =>
  Result.gen(function* () {
    const input = req.forward_backward_input
    if (input.top_k_logprobs !== undefined) return yield* Result.fail(unsupported("top_k_logprobs has no field in the protobuf ForwardBackwardRequest; send this request as JSON"))
    const data: Array<Pb.Datum> = []
    for (const [i, d] of input.data.entries()) {
      const at = `forward_backward_input.data[${i}]`
      const modelInput: Array<Pb.Chunk> = []
      for (const [j, chunk] of d.model_input.chunks.entries()) {
        const tokens = yield* orMalformed(pack(chunk.tokens, "int32", `${at}.model_input.chunks[${j}].tokens`))
        modelInput.push(create(Pb.ChunkSchema, { chunk: { case: "encodedText", value: create(Pb.EncodedTextChunkSchema, { tokens }) } }))
      }
      const lossFnInputs = yield* sortedRecord(d.loss_fn_inputs, (t, key) => tensorToProto(t, `${at}.loss_fn_inputs.${key}`))
      data.push(create(Pb.DatumSchema, { modelInput, lossFnInputs }))
    }
    const lossFnConfig = yield* sortedRecord(input.loss_fn_config ?? {}, (v) => Result.succeed(v))
    return create(Pb.ForwardBackwardRequestSchema, { modelId: req.model_id, seqId: req.seq_id, data, lossFn: input.loss_fn, lossFnConfig, forwardOnly: req.forward_only })
  })

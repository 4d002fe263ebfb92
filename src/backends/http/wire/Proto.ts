/**
 * gyre's wire values <-> today's Tinker protobuf messages (`proto/tinker_public.proto`,
 * derived from the descriptor the official Python SDK publishes; types generated with
 * protoc-gen-es), byte for byte as the SDK writes and reads them:
 *
 * - `ForwardBackwardRequest` (what the SDK POSTs to `/api/v1/forward_backward`, with
 *   `forward_only` for `forward`; optionally zstd-compressed): tokens as int32 and
 *   tensors as dense bytes in their dtype or CSR (values + int64 indices), little-endian
 *   (the SDK's `proto/request_conv.py`). Decoded to the JSON route's body plus
 *   `forward_only`, so the server checks it with the same Schemas and validator.
 * - `ForwardBackwardOutput` (a `retrieve_future` result): per field one `BatchedTensor`
 *   of all datums (byte offsets, the trailing shape) in an `ArrayRecord` with
 *   `num_datums`, a new record where a field's dtype or trailing shape changes (the
 *   SDK's `proto/response_conv.py`).
 * - `SampleResponse`: int32 tokens, float32 logprobs; `prompt_logprobs` with NaN where
 *   JSON has `null` (the first prompt token); top-k prompt logprobs as dense
 *   `prompt_length × k` matrices padded with token 0 / logprob -99999
 *   (`types/sample_response.py` reads a row that starts so as `null` and trims the
 *   padding).
 *
 * Map entries are written in key order, as the SDK's deterministic serialization does.
 * What the messages cannot carry fails with reason `Unsupported`: image and audio
 * chunks, gyre's `top_k_logprobs` extension (send JSON), sparse outputs.
 *
 * @since 0.1.0
 */
import { toBinary } from "@bufbuild/protobuf"
import { Effect, Result } from "effect"
import { Decompress } from "fzstd"
import { type ForwardBackwardRequest, parse, ProtoError, type SampleResponse } from "./proto/Common.ts"
import { requestFromProto } from "./proto/Requests.ts"
import * as RequestWriter from "./proto/RequestWriter.ts"
import * as Results from "./proto/Results.ts"
import * as Pb from "./proto/tinker_public_pb.ts"
import type * as Wire from "./Wire.ts"

export { type ForwardBackwardRequest, ProtoError, SampleResponse, TopkPromptLogprobs } from "./proto/Common.ts"

/** The content type of protobuf bodies, both ways. @since 0.1.0 @category constants */
export const PROTO_CONTENT_TYPE = "application/x-protobuf"

/** Whether a `Content-Type` header names protobuf. @since 0.1.0 @category predicates */
export const isProtoContentType = (contentType: string | undefined): boolean =>
  contentType !== undefined && contentType.toLowerCase().includes(PROTO_CONTENT_TYPE)

/**
 * A protobuf `SampleResponse` has no field for gyre's `policy_version` extension; a gyre
 * server may send it in this header of the `retrieve_future` answer instead.
 * @since 0.1.0 @category constants
 */
export const POLICY_VERSION_HEADER = "x-gyre-policy-version"

/** Decompressed bodies above this many bytes are refused (256 MiB). @since 0.1.0 @category constants */
export const MAX_DECOMPRESSED_BYTES = 256 * 1024 * 1024

// ---------------------------------------------------------------------------
// zstd

/**
 * Decompresses a zstd body (what the SDK sends with `Content-Encoding: zstd`), refusing
 * more than `maxBytes` of output.
 * @since 0.1.0 @category combinators
 */
export const decompressZstd = Effect.fn("Proto.decompressZstd")(function* (bytes: Uint8Array, maxBytes: number = MAX_DECOMPRESSED_BYTES) {
  const parts: Array<Uint8Array> = []
  let total = 0
  let overflow = false
  const stream = new Decompress((chunk) => {
    total += chunk.byteLength
    if (total > maxBytes) overflow = true
    else parts.push(chunk)
  })
  const pushed = Result.try({ try: () => stream.push(bytes, true), catch: (e) => (e instanceof Error ? e.message : String(e)) })
  if (overflow) return yield* new ProtoError({ reason: "Compression", message: `the zstd body decompresses to more than ${maxBytes} bytes` })
  if (Result.isFailure(pushed)) return yield* new ProtoError({ reason: "Compression", message: `the body is not valid zstd: ${pushed.failure}` })
  const out = new Uint8Array(total)
  let at = 0
  for (const p of parts) {
    out.set(p, at)
    at += p.byteLength
  }
  return out
})

const decodedBody = (body: Uint8Array, contentEncoding: string | undefined) => {
  const encoding = (contentEncoding ?? "").trim().toLowerCase()
  if (encoding === "" || encoding === "identity") return Effect.succeed(body)
  if (encoding === "zstd") return decompressZstd(body)
  return Effect.fail(new ProtoError({ reason: "Compression", message: `Content-Encoding ${JSON.stringify(contentEncoding)} is not supported; send zstd or none` }))
}

// ---------------------------------------------------------------------------
// public operations: requests

/**
 * A protobuf `ForwardBackwardRequest` body (zstd-compressed when `contentEncoding` is
 * `zstd`) -> the JSON route's body plus `forward_only`. Route it to `forward` when
 * `forward_only` is true; check it with `Wire.ForwardBackwardRequest` as a JSON body.
 * @since 0.1.0 @category decoding
 */
export const decodeForwardBackwardRequest = Effect.fn("Proto.decodeForwardBackwardRequest")(function* (body: Uint8Array, contentEncoding?: string) {
  const bytes = yield* decodedBody(body, contentEncoding)
  const msg = yield* Effect.fromResult(parse(Pb.ForwardBackwardRequestSchema, bytes))
  return yield* Effect.fromResult(requestFromProto(msg))
})

/**
 * `encodeForwardBackwardRequest` as a plain function, for a caller that builds request
 * bodies synchronously.
 * @since 0.1.0 @category encoding
 */
export const forwardBackwardRequestBytes = (req: ForwardBackwardRequest): Result.Result<Uint8Array, ProtoError> =>
  Result.map(RequestWriter.numbered(req), (bytes) => bytes(req.seq_id))

/**
 * A request's bytes for whichever `seq_id` it is given later (a client numbers each
 * submission when its turn comes): the datums are written once, here, so a request
 * protobuf cannot carry fails now.
 * @since 0.1.0 @category encoding
 */
export const forwardBackwardRequestNumbered = (req: Omit<ForwardBackwardRequest, "seq_id">): Result.Result<RequestWriter.Numbered, ProtoError> => RequestWriter.numbered(req)

/**
 * The JSON body of `forward_backward` (or `forward`, with `forward_only`) -> protobuf
 * bytes, as the SDK sends them. Fails `Unsupported` when the request uses
 * `top_k_logprobs` (JSON only).
 * @since 0.1.0 @category encoding
 */
export const encodeForwardBackwardRequest = Effect.fn("Proto.encodeForwardBackwardRequest")(function* (req: ForwardBackwardRequest) {
  return yield* Effect.fromResult(forwardBackwardRequestBytes(req))
})


// ---------------------------------------------------------------------------
// public operations: results

/**
 * A `forward_backward` / `forward` result in JSON (`loss_fn_outputs` of TensorData,
 * `metrics`) -> `ForwardBackwardOutput` bytes, as the SDK's
 * `deserialize_forward_backward_output` reads them.
 * @since 0.1.0 @category encoding
 */
export const encodeForwardBackwardOutput = Effect.fn("Proto.encodeForwardBackwardOutput")(function* (out: Wire.ForwardBackwardOutput) {
  const msg = yield* Effect.fromResult(Results.outputToProto(out))
  return toBinary(Pb.ForwardBackwardOutputSchema, msg)
})

/**
 * `ForwardBackwardOutput` bytes -> the JSON result (each tensor with its full shape,
 * int32 widened to int64 and bfloat16 to float32, as the SDK does).
 * @since 0.1.0 @category decoding
 */
export const decodeForwardBackwardOutput = Effect.fn("Proto.decodeForwardBackwardOutput")(function* (body: Uint8Array) {
  const msg = yield* Effect.fromResult(parse(Pb.ForwardBackwardOutputSchema, body))
  return yield* Effect.fromResult(Results.outputFromProto(msg))
})

/**
 * A sample result in JSON (`asample`, `compute_logprobs`) -> `SampleResponse` bytes:
 * `null` prompt logprobs travel as NaN, top-k rows as dense padded matrices.
 * @since 0.1.0 @category encoding
 */
export const encodeSampleResponse = Effect.fn("Proto.encodeSampleResponse")(function* (res: SampleResponse) {
  const msg = yield* Effect.fromResult(Results.sampleToProto(res))
  return toBinary(Pb.SampleResponseSchema, msg)
})

/**
 * `SampleResponse` bytes -> the JSON result (NaN prompt logprobs as `null`, top-k rows
 * trimmed of their padding, a row that starts padded as `null`).
 * @since 0.1.0 @category decoding
 */
export const decodeSampleResponse = Effect.fn("Proto.decodeSampleResponse")(function* (body: Uint8Array) {
  const msg = yield* Effect.fromResult(parse(Pb.SampleResponseSchema, body))
  return yield* Effect.fromResult(Results.sampleFromProto(msg))
})

export { MASK_LOGPROB } from "./proto/Results.ts"

/**
 * What the protobuf conversions share: their error, the JSON-side shapes, parsing,
 * map-key order and the dtype tables.
 *
 * @since 0.1.0
 */
import { type DescMessage, fromBinary, type MessageShape } from "@bufbuild/protobuf"
import { Result, Schema } from "effect"
import * as Wire from "../Wire.ts"
import { type Element, safeNumber } from "./Packed.ts"
import * as Pb from "./tinker_public_pb.ts"

/**
 * A body that cannot be converted: `Malformed` (not the message, or inconsistent),
 * `Unsupported` (a valid message gyre does not serve), `Compression` (a bad zstd frame
 * or an unknown `Content-Encoding`). A server answers all three with 400.
 * @since 0.1.0 @category errors
 */
export class ProtoError extends Schema.TaggedError<ProtoError>()("ProtoError", {
  reason: Schema.Literals(["Malformed", "Unsupported", "Compression"]),
  message: Schema.String,
}) {}

/** @since 0.1.0 @category constructors */
export const malformed = (message: string) => new ProtoError({ reason: "Malformed", message })
/** @since 0.1.0 @category constructors */
export const unsupported = (message: string) => new ProtoError({ reason: "Unsupported", message })
/** @since 0.1.0 @category combinators */
export const orMalformed = <A>(r: Result.Result<A, string>): Result.Result<A, ProtoError> => Result.mapError(r, malformed)

// ---------------------------------------------------------------------------
// JSON-side shapes

/** A protobuf `ForwardBackwardRequest` as the JSON route's body, plus `forward_only`. @since 0.1.0 @category models */
export interface ForwardBackwardRequest {
  readonly forward_backward_input: Wire.ForwardBackwardInput
  readonly model_id: string
  readonly seq_id: number
  readonly forward_only: boolean
}

/** Top-k prompt logprobs in JSON: per prompt position `[token, logprob]` pairs, or `null`. @since 0.1.0 @category models */
export const TopkPromptLogprobs = Schema.Array(Schema.NullOr(Schema.Array(Schema.Tuple([Schema.Int, Schema.Number]))))

/** A sample result in JSON: `Wire.SampleResponse` with the fields only protobuf carries today. @since 0.1.0 @category models */
export const SampleResponse = Schema.Struct({
  ...Wire.SampleResponse.fields,
  topk_prompt_logprobs: Schema.optional(Schema.NullOr(TopkPromptLogprobs)),
  prompt_cache_hit_tokens: Schema.optional(Schema.Int),
})
export type SampleResponse = typeof SampleResponse.Type

// ---------------------------------------------------------------------------
// bytes <-> messages

/** Parses bytes as a message; a failure names the message. @since 0.1.0 @category combinators */
export const parse = <D extends DescMessage>(schema: D, bytes: Uint8Array): Result.Result<MessageShape<D>, ProtoError> =>
  Result.try({
    try: () => fromBinary(schema, bytes),
    catch: (e) => malformed(`the body is not a protobuf ${schema.name}: ${e instanceof Error ? e.message : String(e)}`),
  })

/** A record's entries in key order, as the SDK's deterministic serialization writes map entries (keys are distinct: compared as strings, as `sort` does). @since 0.1.0 @category combinators */
export const sortedEntries = <A>(o: Readonly<Record<string, A>>): Array<[string, A]> => Object.entries(o).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))

/** Maps a record in sorted key order. @since 0.1.0 @category combinators */
export const sortedRecord = <A, B>(o: Readonly<Record<string, A>>, f: (a: A, key: string) => Result.Result<B, ProtoError>): Result.Result<Record<string, B>, ProtoError> => {
  const out: Record<string, B> = {}
  for (const [key, value] of sortedEntries(o)) {
    const r = f(value, key)
    if (Result.isFailure(r)) return Result.fail(r.failure)
    out[key] = r.success
  }
  return Result.succeed(out)
}

/** Wire dtype -> the element type gyre writes and the proto enum. */
export const WRITE: Readonly<Record<Wire.TensorData["dtype"], readonly [Element, Pb.DType]>> = {
  float32: ["float32", Pb.DType.DTYPE_FLOAT32],
  int64: ["int64", Pb.DType.DTYPE_INT64],
}

/** Proto enum -> the element type read and the public dtype (int32 widens to int64, bfloat16 to float32, as the SDK does). */
export const READ: Partial<Record<Pb.DType, readonly [Element, Wire.TensorData["dtype"]]>> = {
  [Pb.DType.DTYPE_FLOAT32]: ["float32", "float32"],
  [Pb.DType.DTYPE_INT64]: ["int64", "int64"],
  [Pb.DType.DTYPE_INT32]: ["int32", "int64"],
  [Pb.DType.DTYPE_BFLOAT16]: ["bfloat16", "float32"],
}

/** @since 0.1.0 @category combinators */
export const readDtype = (dtype: Pb.DType, at: string): Result.Result<readonly [Element, Wire.TensorData["dtype"]], ProtoError> => {
  const found = READ[dtype]
  return found === undefined ? Result.fail(malformed(`${at}.dtype is ${Pb.DType[dtype] ?? dtype}; expected DTYPE_FLOAT32, DTYPE_INT64, DTYPE_INT32 or DTYPE_BFLOAT16`)) : Result.succeed(found)
}

/** Protobuf dimensions -> numbers (each >= 0, within ±2^53). @since 0.1.0 @category combinators */
export const shapeOf = (dims: ReadonlyArray<bigint>, at: string): Result.Result<Array<number>, ProtoError> => {
  const out: Array<number> = []
  for (const [i, dim] of dims.entries()) {
    const d = safeNumber(dim, `${at}[${i}]`)
    if (Result.isFailure(d)) return Result.fail(malformed(d.failure))
    if (d.success < 0) return Result.fail(malformed(`${at}[${i}] is ${d.success}; dimensions are >= 0`))
    out.push(d.success)
  }
  return Result.succeed(out)
}

/**
 * The protobuf side of the server (today's Tinker wire, as the official SDK 0.25 speaks
 * it; see `Proto.ts` for the messages):
 *
 * - a `POST forward_backward` whose `Content-Type` is `application/x-protobuf` (zstd
 *   when `Content-Encoding: zstd`) is decoded to the JSON route's body and handled by the
 *   JSON route: `forward_backward`, or `forward` when `forward_only` is set (the SDK's
 *   `resources/training.py` sends both to `/api/v1/forward_backward`). Malformed bytes
 *   get a 400 naming what was wrong, as a bad JSON body does. Another route given a
 *   protobuf body answers 415: only `forward_backward` reads one;
 * - a `retrieve_future` whose `Accept` names protobuf gets a finished
 *   `forward_backward` / `forward` result as a `ForwardBackwardOutput` and a sample
 *   result as a `SampleResponse` (the SDK's `lib/api_future_impl.py` sends that `Accept`
 *   for exactly those result types and decodes by the answer's `Content-Type`); the
 *   policy version of a sample, which the message has no field for, goes in
 *   `X-Gyre-Policy-Version`. Everything else (a failed future, `try_again`, other
 *   results) stays JSON.
 *
 * @since 0.1.0
 */
import { createHash } from "node:crypto"
import { Effect, Schema } from "effect"
import * as Proto from "../wire/Proto.ts"
import { bad, Reject, type Reply } from "./Requests.ts"
import * as Wire from "../wire/Wire.ts"

/** A protobuf request body read as the JSON route that handles it. @since 0.1.0 @category models */
export interface Routed {
  /** the route that handles it: `forward_backward` or `forward` */
  readonly name: "forward_backward" | "forward"
  /** the JSON route's body */
  readonly value: unknown
  /** what idempotency compares: a digest of the bytes */
  readonly text: string
}

/** The one route that takes a protobuf body. @since 0.1.0 @category constants */
export const PROTO_ROUTE = "forward_backward"

/**
 * The answer to a protobuf body on another route than `forward_backward`: 415, not the
 * body read as a `forward_backward` that the route would then run.
 * @since 0.1.0 @category constructors
 */
export const refuseElsewhere = (route: string): Reject =>
  new Reject({ status: 415, message: `only ${PROTO_ROUTE} takes a protobuf body (${Proto.PROTO_CONTENT_TYPE}); send ${route.slice(0, 100)} as JSON` })

/** Whether a request's `Content-Type` is protobuf. @since 0.1.0 @category predicates */
export const isProtoRequest = (headers: Readonly<Record<string, string | undefined>>): boolean => Proto.isProtoContentType(headers["content-type"])

/**
 * A protobuf `forward_backward` body -> the JSON route and body that handle it.
 * @since 0.1.0 @category decoding
 */
export const route = (bytes: Uint8Array, contentEncoding: string | undefined) =>
  Proto.decodeForwardBackwardRequest(bytes, contentEncoding).pipe(
    Effect.mapError((e) => bad(`the protobuf body of forward_backward: ${e.message}`)),
    Effect.map((req): Routed => {
      const text = `protobuf:${createHash("sha256").update(bytes).digest("hex")}`
      const { forward_only, forward_backward_input, ...ids } = req
      return forward_only
        ? { name: "forward", value: { ...ids, forward_input: forward_backward_input }, text }
        : { name: "forward_backward", value: { ...ids, forward_backward_input }, text }
    }),
  )

const isForwardOutput = Schema.is(Wire.ForwardBackwardOutput)
const isSampleResponse = Schema.is(Wire.SampleResponse)

/** Whether an `Accept` header asks for protobuf. @since 0.1.0 @category predicates */
export const acceptsProto = (accept: string | undefined): boolean => accept !== undefined && Proto.isProtoContentType(accept)

/**
 * A `retrieve_future` answer as protobuf bytes when it is a finished forward(_backward)
 * or sample result; any other answer as it is.
 * @since 0.1.0 @category encoding
 */
export const encodeResult = (reply: Reply): Effect.Effect<Reply> => {
  const body = reply.body
  if (reply.status !== 200 || typeof body !== "object" || body === null) return Effect.succeed(reply)
  if ("loss_fn_outputs" in body && isForwardOutput(body)) {
    return Proto.encodeForwardBackwardOutput(body).pipe(
      Effect.map((bytes): Reply => ({ ...reply, raw: { bytes, contentType: Proto.PROTO_CONTENT_TYPE } })),
      // an output the message cannot carry (a sparse tensor) is answered in JSON
      Effect.orElseSucceed(() => reply),
    )
  }
  if ("sequences" in body && isSampleResponse(body)) {
    return Proto.encodeSampleResponse(body).pipe(
      Effect.map((bytes): Reply => ({
        ...reply,
        raw: { bytes, contentType: Proto.PROTO_CONTENT_TYPE },
        headers: { ...reply.headers, ...(body.policy_version !== undefined ? { [Proto.POLICY_VERSION_HEADER]: String(body.policy_version) } : {}) },
      })),
      Effect.orElseSucceed(() => reply),
    )
  }
  return Effect.succeed(reply)
}

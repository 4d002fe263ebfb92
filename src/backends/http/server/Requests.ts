/**
 * Request-level pieces of the server: the `Reject` error (an HTTP status with a
 * message), Schema decoding that answers 400 naming the field, names, and the
 * conversion of wire sampling parameters.
 *
 * @since 0.1.0
 */
import { Data, Effect, Result, type Schema, type Stream } from "effect"
import type { BackendError, SamplingParams } from "../../../contract/Contract.ts"
import type { DatumIssue } from "../../../contract/DatumIssue.ts"
import { decode } from "../wire/Decode.ts"
import * as NewerFields from "./NewerFields.ts"
import type * as Wire from "../wire/Wire.ts"

/** A request the server refuses: the HTTP status and the `detail` it answers. @since 0.1.0 @category errors */
export class Reject extends Data.TaggedError("Reject")<{
  readonly status: number
  readonly message: string
  /** seconds, sent as `Retry-After` (429 and 503) */
  readonly retryAfter?: number | undefined
  /** a refused datum's issue, sent as `issue` next to `detail` (gyre's names and positions) */
  readonly issue?: DatumIssue | undefined
}> {}

/** A file to send: its bytes as a stream, their count and the name to save it under. @since 0.1.0 @category models */
export interface FileReply {
  readonly stream: Stream.Stream<Uint8Array, Error>
  readonly size: number
  readonly filename: string
  /** default `application/octet-stream` */
  readonly contentType?: string | undefined
}

/** An answer: the status and the JSON body. @since 0.1.0 @category models */
export interface Reply {
  readonly status: number
  readonly body: unknown
  readonly headers?: Readonly<Record<string, string>> | undefined
  /** a file sent as the body instead of `body` (a checkpoint download) */
  readonly file?: FileReply | undefined
  /** bytes sent as the body instead of `body` (a protobuf result) */
  readonly raw?: { readonly bytes: Uint8Array; readonly contentType: string } | undefined
}

/** @since 0.1.0 @category constructors */
export const bad = (message: string) => new Reject({ status: 400, message })

/** @since 0.1.0 @category constructors */
export const notFound = (message: string) => new Reject({ status: 404, message })

/** Decodes a body (or headers) with a wire Schema, else 400 naming the field. @since 0.1.0 @category combinators */
export const decodeOr400 = <S extends Schema.ConstraintDecoder<unknown>>(schema: S, prefix = "") => {
  const run = decode(schema, prefix)
  return (value: unknown): Effect.Effect<S["Type"], Reject> => {
    const r = run(value)
    return Result.isSuccess(r) ? Effect.succeed(r.success) : Effect.fail(bad(r.failure))
  }
}

/**
 * Decodes the body of `route` strictly: a newer SDK's field that asks for something this
 * server cannot do, or any field the route does not know, is a 400 naming it
 * (`NewerFields.ts`).
 * @since 0.1.0 @category combinators
 */
export const decodeRequestOr400 = <S extends Schema.ConstraintDecoder<unknown>>(schema: S, route: string) => {
  const run = decode(schema, "", { strict: true })
  return (value: unknown): Effect.Effect<S["Type"], Reject> => {
    const screened = NewerFields.screen(route, value)
    if (screened.refused !== undefined) return Effect.fail(bad(screened.refused))
    const r = run(screened.body)
    return Result.isSuccess(r) ? Effect.succeed(r.success) : Effect.fail(bad(r.failure))
  }
}

const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/

/** Checkpoint names: never a path on the server's machine. @since 0.1.0 @category combinators */
export const checkName = (name: string, field: string) =>
  NAME.test(name) ? Effect.void : Effect.fail(bad(`${field} ${JSON.stringify(name.slice(0, 80))} is not a valid name: use 1-128 letters, digits, '.', '_' or '-'`))

const categoryOf = (reason: BackendError["reason"]): "user" | "server" => (reason === "InvalidInput" || reason === "Rejected" ? "user" : "server")

/** A backend failure as a failed future's body. @since 0.1.0 @category combinators */
export const futureFailure = (e: BackendError) => ({
  error: `${e.operation}: ${e.message}`,
  category: categoryOf(e.reason),
  reason: e.reason,
  ...(e.issue !== undefined ? { issue: e.issue } : {}),
})

/** Wire sampling parameters -> gyre's, or a message naming the field. @since 0.1.0 @category combinators */
export const samplingParamsFromWire = (p: Wire.SamplingParams, maxLength: number): Result.Result<SamplingParams, string> => {
  if (p.max_tokens === undefined || p.max_tokens === null) return Result.fail("sampling_params.max_tokens is required by this server")
  if (p.max_tokens < 1 || p.max_tokens > maxLength) return Result.fail(`sampling_params.max_tokens is ${p.max_tokens}; it must be in [1, ${maxLength}]`)
  const temperature = p.temperature ?? 1
  if (temperature < 0) return Result.fail(`sampling_params.temperature is ${temperature}; it must be >= 0`)
  const topP = p.top_p ?? 1
  if (topP < 0 || topP > 1) return Result.fail(`sampling_params.top_p is ${topP}; it must be in [0, 1]`)
  const topK = p.top_k ?? -1
  if (topK < -1) return Result.fail(`sampling_params.top_k is ${topK}; use -1 for no limit or a positive count`)
  const stop = p.stop === undefined || p.stop === null ? undefined : typeof p.stop === "string" ? [p.stop] : [...p.stop]
  if (stop !== undefined && stop.length > 64) return Result.fail(`sampling_params.stop has ${stop.length} entries; at most 64`)
  return Result.succeed({
    maxTokens: p.max_tokens,
    temperature,
    ...(topP !== 1 ? { topP } : {}),
    ...(topK > 0 ? { topK } : {}),
    ...(stop !== undefined ? { stop } : {}),
    ...(p.seed !== undefined && p.seed !== null ? { seed: p.seed } : {}),
  })
}

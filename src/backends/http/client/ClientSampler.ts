/**
 * The client's `Sampler`: `asample` futures on the sampler weights last published
 * by the trainer of the same connection. A sample pinned to a policy version
 * (`X-Min-Policy-Version`) waits at most `readyTimeout` (1 hour by default) for it,
 * then fails with reason `Timeout` naming the version waited for and the version the
 * server serves; a server that answers `try_again` forever cannot hold it longer.
 *
 * A result comes as JSON or as Tinker's protobuf `SampleResponse` (`Proto.ts`),
 * whichever the server answers; protobuf has no field for the `policy_version`
 * extension, which a gyre server then sends as the `X-Gyre-Policy-Version` header.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Option, Result, Schema } from "effect"
import { BackendError, type ModelInput, modelInputTokens, type SampleOptions, type SampleResult, type SamplingParams } from "../../../contract/Contract.ts"
import type { SamplerShape } from "../../../services/Sampler.ts"
import * as Alignment from "../wire/Alignment.ts"
import type { Calls } from "./Calls.ts"
import type { State } from "./ClientTrainer.ts"
import * as Proto from "../wire/Proto.ts"
import { type Binary, decodeTypedResult, headerValueProblem } from "./Transport.ts"
import * as Wire from "../wire/Wire.ts"

/** A protobuf sample result as JSON, with the policy version its answer's header carries. */
const sampleFromProto = (b: Binary) =>
  Effect.map(Proto.decodeSampleResponse(b.bytes), (r) => {
    const header = b.headers[Proto.POLICY_VERSION_HEADER]
    const version = header === undefined ? Number.NaN : Number(header)
    return Number.isSafeInteger(version) && version >= 0 ? { ...r, policy_version: version } : r
  })

/**
 * An `asample` future's answer (JSON, or protobuf) as `Wire.SampleResponse`. A protobuf
 * answer is typed by its decoding (int32 tokens, float32 log-probs), so only JSON is
 * checked by the Schema, whose cost grows with every token.
 * @since 0.1.0 @category combinators
 */
export const sampleResult = (raw: unknown, operation: string): Effect.Effect<Wire.SampleResponse, BackendError> =>
  decodeTypedResult(raw, sampleFromProto, Wire.SampleResponse, operation)

const samplingParamsToWire = (p: SamplingParams): Result.Result<Wire.SamplingParams, string> => {
  let stop: Wire.SamplingParams["stop"] = undefined
  if (p.stop !== undefined) {
    const strings = p.stop.filter((s): s is string => typeof s === "string")
    const ids = p.stop.filter((s): s is number => typeof s === "number")
    if (strings.length > 0 && ids.length > 0) return Result.fail("sampling stop mixes strings and token ids; the protocol takes one kind per request")
    stop = ids.length > 0 ? ids : strings
  }
  return Result.succeed({
    max_tokens: p.maxTokens,
    temperature: p.temperature,
    top_p: p.topP ?? 1,
    top_k: p.topK ?? -1,
    ...(stop !== undefined ? { stop } : {}),
    ...(p.seed !== undefined ? { seed: p.seed } : {}),
  })
}

const invalid = (operation: string, message: string) => new BackendError({ reason: "InvalidInput", operation, message })

/** What the operations of one sampler share. */
interface Context {
  readonly calls: Calls
  readonly state: State
  /** how long a call pinned to a policy version waits for it */
  readonly readyTimeout: Duration.Input
  /** batched retrieval, where the server offers it: waits until a sampling session's future is reported done */
  readonly finished: ((samplingSessionId: string, requestId: string) => Effect.Effect<void>) | undefined
}

/** The policy version the sampler serves. */
const servedVersion = (ctx: Context) =>
  Effect.suspend(() => {
    const { state } = ctx
    const id = state.published?.samplingSessionId ?? state.baseModel
    return ctx.calls.direct("GET", `/samplers/${encodeURIComponent(id)}`, undefined, Wire.SamplerInfo, "sampler_version").pipe(
      Effect.map((s) => s.policy_version ?? state.published?.version ?? state.trainerVersion),
    )
  }).pipe(Effect.withSpan("Http.version"))

/** Bounds a pinned call by the ready timeout; the error names both versions. */
const pinned = <A>(ctx: Context, operation: string, min: number | undefined, call: Effect.Effect<A, BackendError>) =>
  min === undefined
    ? call
    : call.pipe(
        Effect.timeoutOrElse({
          duration: ctx.readyTimeout,
          orElse: () =>
            Effect.gen(function* () {
              const served = yield* servedVersion(ctx).pipe(Effect.timeout("10 seconds"), Effect.option)
              return yield* new BackendError({
                reason: "Timeout",
                operation,
                message:
                  `waited ${Duration.format(Duration.fromInputUnsafe(ctx.readyTimeout))} for policy version ${min}, but the sampler ` +
                  `${Option.isSome(served) ? `serves version ${served.value}` : "did not say which version it serves"}: ` +
                  "the trainer never published it (raise readyTimeout if publishing is just slow)",
              })
            }),
        }),
      )

/** What a sample is drawn from: the published sampling session (taking its next `seq_id`), the published model path, or the base model. */
const sampleTarget = (state: State) =>
  state.published?.samplingSessionId !== undefined
    ? { sampling_session_id: state.published.samplingSessionId, seq_id: state.samplerSeq++ }
    : state.published?.modelPath !== undefined
      ? { model_path: state.published.modelPath }
      : { base_model: state.baseModel }

/** One `asample` call. */
interface SampleRequest {
  readonly prompt: ModelInput
  readonly params: Wire.SamplingParams
  readonly numSamples: number
  readonly promptLogprobs: boolean
  readonly minPolicyVersion: number | undefined
  readonly affinityKey: string | undefined
  readonly operation: string
}

/** An `asample` future, with the policy version its result came from. */
const asample = (ctx: Context, req: SampleRequest) =>
  Effect.suspend(() => {
    const { state } = ctx
    const { operation, minPolicyVersion, affinityKey } = req
    const headers: Record<string, string> = {}
    if (minPolicyVersion !== undefined) headers[Wire.Headers.minPolicyVersion] = String(minPolicyVersion)
    if (affinityKey !== undefined) {
      const problem = headerValueProblem(affinityKey)
      if (problem !== undefined) return Effect.fail(invalid(operation, `affinityKey has ${problem}; it travels as the X-Affinity-Key header`))
      headers[Wire.Headers.affinityKey] = affinityKey
    }
    const versionUsed = state.published?.version
    const target = sampleTarget(state)
    const session = "sampling_session_id" in target ? target.sampling_session_id : undefined
    const finished = ctx.finished
    const body = {
      num_samples: req.numSamples,
      prompt: { chunks: [{ type: "encoded_text", tokens: modelInputTokens(req.prompt) }] },
      sampling_params: req.params,
      ...target,
      ...(req.promptLogprobs ? { prompt_logprobs: true } : {}),
      type: "sample",
    }
    return pinned(
      ctx,
      operation,
      minPolicyVersion,
      ctx.calls.futureCall("/asample", body, "Sample", Schema.Unknown, operation, headers, session === undefined || finished === undefined ? undefined : (id) => finished(session, id)).pipe(
        Effect.flatMap((raw) => sampleResult(raw, operation)),
        Effect.map((r) => ({ response: r, version: r.policy_version ?? versionUsed ?? state.trainerVersion })),
      ),
    )
  })

const sample = (ctx: Context) =>
  Effect.fn("Http.sample")(function* (prompt: ModelInput, params: SamplingParams, opts: SampleOptions) {
    const wireParams = samplingParamsToWire(params)
    if (Result.isFailure(wireParams)) return yield* invalid("sample", wireParams.failure)
    const { response, version } = yield* asample(ctx, {
      prompt,
      params: wireParams.success,
      numSamples: opts.numSamples,
      promptLogprobs: opts.includePromptLogprobs ?? false,
      minPolicyVersion: opts.minPolicyVersion,
      affinityKey: opts.affinityKey,
      operation: "sample",
    })
    const sequences = []
    for (const [i, s] of response.sequences.entries()) {
      if (s.logprobs === undefined || s.logprobs === null || s.logprobs.length !== s.tokens.length) {
        return yield* new BackendError({ reason: "Internal", operation: "sample", message: `sequences[${i}] has ${s.logprobs?.length ?? "no"} logprobs for ${s.tokens.length} tokens` })
      }
      // the decoded arrays are this answer's own: no copy
      sequences.push({ tokens: s.tokens as Array<number>, logprobs: s.logprobs as Array<number>, stopReason: s.stop_reason })
    }
    const result: { -readonly [K in keyof SampleResult]: SampleResult[K] } = { sequences, policyVersion: version }
    if (opts.includePromptLogprobs && response.prompt_logprobs !== undefined && response.prompt_logprobs !== null) {
      const lps = Alignment.promptLogprobsFromWire(response.prompt_logprobs)
      if (Result.isFailure(lps)) return yield* new BackendError({ reason: "Internal", operation: "sample", message: lps.failure })
      result.promptLogprobs = lps.success
    }
    return result as SampleResult
  })

const computeLogprobs = (ctx: Context) =>
  Effect.fn("Http.computeLogprobs")(function* (input: ModelInput, opts?: { readonly minPolicyVersion?: number }) {
    const { response } = yield* asample(ctx, {
      prompt: input,
      params: { max_tokens: 1, temperature: 1, top_p: 1, top_k: -1 },
      numSamples: 1,
      promptLogprobs: true,
      minPolicyVersion: opts?.minPolicyVersion,
      affinityKey: undefined,
      operation: "compute_logprobs",
    })
    if (response.prompt_logprobs === undefined || response.prompt_logprobs === null) {
      return yield* new BackendError({ reason: "Internal", operation: "compute_logprobs", message: "the server returned no prompt_logprobs" })
    }
    const lps = Alignment.promptLogprobsFromWire(response.prompt_logprobs)
    if (Result.isFailure(lps)) return yield* new BackendError({ reason: "Internal", operation: "compute_logprobs", message: lps.failure })
    return lps.success
  })

/** @since 0.1.0 @category constructors */
export const make = (
  calls: Calls,
  state: State,
  options: { readonly readyTimeout: Duration.Input; readonly finished?: ((samplingSessionId: string, requestId: string) => Effect.Effect<void>) | undefined },
): SamplerShape => {
  const ctx: Context = { calls, state, readyTimeout: options.readyTimeout, finished: options.finished }
  return { sample: sample(ctx), computeLogprobs: computeLogprobs(ctx), version: servedVersion(ctx) }
}

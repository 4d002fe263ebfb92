/**
 * The client's `Reference`: a sampling session of the base model, as the Tinker SDK's
 * `create_sampling_client(base_model=...)` makes it (`create_sampling_session` with
 * `base_model`), and `compute_logprobs` on it (`asample` with `prompt_logprobs`,
 * `max_tokens` 1). The session is created on first use (`check` or `logprobs`) and
 * kept; if the server refuses it, every later call fails with the server's reason.
 *
 * A teacher (`Options.reference`) is scored the same way, on a sampling session of the
 * model it names: a sampler path (`model_path`, e.g. `tinker://…/sampler_weights/…`) or
 * another base model the server serves (`base_model`).
 *
 * The session takes the next `sampling_session_seq_id` of this connection: the
 * connection counts the sampler ids the server gave it (one per published sampler),
 * since the protocol shares that counter between sampling sessions and samplers.
 *
 * @since 0.1.0
 */
import { Effect, Result, Schema } from "effect"
import { BackendError, type ModelInput, modelInputTokens } from "../../../contract/Contract.ts"
import { Reference, type ReferenceShape } from "../../../services/Reference.ts"
import * as Alignment from "../wire/Alignment.ts"
import type { Calls } from "./Calls.ts"
import { sampleResult } from "./ClientSampler.ts"
import type { State } from "./ClientTrainer.ts"
import * as Wire from "../wire/Wire.ts"

/** Sequences scored at once (each is one `asample` future). */
const CONCURRENCY = 16

/** The model a reference session scores with: the run's base model, another base model, or a sampler path. @since 0.1.0 @category models */
export type ScoredModel = { readonly baseModel: string } | { readonly modelPath: string }

/** What `--teacher` names on a Tinker-protocol service: a sampler path (`tinker://…`), else a base model it serves. @since 0.1.0 @category constructors */
export const scoredModelOf = (given: string): ScoredModel => (given.includes("://") ? { modelPath: given } : { baseModel: given })

/** The model in words, for errors. */
const describe = (model: ScoredModel) => ("modelPath" in model ? `model_path ${JSON.stringify(model.modelPath)}` : `the base model ${JSON.stringify(model.baseModel)}`)

/** @since 0.1.0 @category constructors */
export const make = (calls: Calls, state: State, sessionId: string, scored?: ScoredModel): Effect.Effect<ReferenceShape> =>
  Effect.gen(function* () {
    const model: ScoredModel = scored ?? { baseModel: state.baseModel }
    const what = scored === undefined ? "the reference log-probs come from it" : "the teacher's log-probs come from it"
    const { direct, futureCall } = calls
    let seq = 0

    const create = Effect.suspend(() => {
      const samplingSeq = state.samplerIds
      return direct(
        "POST",
        "/create_sampling_session",
        { session_id: sessionId, sampling_session_seq_id: samplingSeq, ...("modelPath" in model ? { model_path: model.modelPath } : { base_model: model.baseModel }), type: "create_sampling_session" },
        Wire.CreateSamplingSessionResponse,
        "create_sampling_session",
      ).pipe(
        Effect.tap(() => Effect.sync(() => (state.samplerIds = Math.max(state.samplerIds, samplingSeq + 1)))),
        Effect.map((r) => r.sampling_session_id),
        Effect.mapError(
          (e) =>
            new BackendError({
              reason: e.reason,
              operation: "reference",
              message: `the server refused a sampling session of ${describe(model)} (${what}): ${e.message}`,
            }),
        ),
      )
    })
    // created once; a refusal is kept too, so that every call says the same
    const session = yield* Effect.cached(create)

    const one = (samplingSessionId: string, input: ModelInput, index: number) =>
      Effect.gen(function* () {
        const body = {
          num_samples: 1,
          prompt: { chunks: [{ type: "encoded_text", tokens: modelInputTokens(input) }] },
          sampling_params: { max_tokens: 1, temperature: 1, top_p: 1, top_k: -1 },
          sampling_session_id: samplingSessionId,
          seq_id: seq++,
          prompt_logprobs: true,
          type: "sample",
        }
        const r = yield* Effect.flatMap(futureCall("/asample", body, "Sample", Schema.Unknown, "reference"), (raw) => sampleResult(raw, "reference"))
        if (r.prompt_logprobs === undefined || r.prompt_logprobs === null) {
          return yield* new BackendError({ reason: "Internal", operation: "reference", message: `the server returned no prompt_logprobs for inputs[${index}] of ${describe(model)}` })
        }
        const lps = Alignment.promptLogprobsFromWire(r.prompt_logprobs)
        if (Result.isFailure(lps)) return yield* new BackendError({ reason: "Internal", operation: "reference", message: `inputs[${index}]: ${lps.failure}` })
        return lps.success
      })

    const logprobs = Effect.fn("Http.referenceLogprobs")(function* (inputs: ReadonlyArray<ModelInput>) {
      if (inputs.length === 0) return []
      const id = yield* session
      return yield* Effect.forEach(inputs, (input, i) => one(id, input, i), { concurrency: CONCURRENCY })
    })

    return Reference.of({
      logprobs,
      // the session, and one two-token score on it: the server must send prompt log-probs back
      check: Effect.asVoid(logprobs([{ chunks: [{ type: "encoded_text", tokens: [0, 0] }] }])).pipe(Effect.withSpan("Http.referenceCheck")),
    })
  })

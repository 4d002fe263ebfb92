/**
 * gyre's `Sampler` on a Loops run's paired sampler, over the route `DataWire.ts` assumes
 * (vLLM's `POST /v1/completions` with token ids in and out).
 *
 * - The model a request names: the newest LoRA adapter `GET /v1/models` lists (an entry
 *   with a `parent`), else the base model; looked up again whenever a request asks for a
 *   newer policy version than the last lookup saw.
 * - The policy-version floor travels as `X-Min-Policy-Version` (the sampler holds the
 *   request until it serves that version), so a request's timeout is the ready timeout.
 * - The group's affinity key travels as `X-Affinity-Key` (assumed; the SDK's `sample()`
 *   takes one, its wire is not public).
 * - Sampled tokens come back as `token_id:N` with their log-probs; prompt log-probs as
 *   vLLM's per-position maps (null at position 0, which gyre reports as 0), read from the
 *   first choice that carries them (`choices[i].prompt_logprobs`, where vLLM puts them),
 *   else from the top of the answer.
 *
 * @since 0.1.0
 */
import { type Duration, Effect, Result, type Schema } from "effect"
import { BackendError, type ModelInput, modelInputTokens, type SampleOptions, type SampleResult, type SamplingParams } from "../../contract/Contract.ts"
import type { SamplerShape } from "../../services/Sampler.ts"
import type * as Retry from "../http/client/Retry.ts"
import type { Transport } from "../http/client/Transport.ts"
import * as DataWire from "./DataWire.ts"
import { request } from "./Operations.ts"

/** @since 0.1.0 @category models */
export interface Options {
  readonly transport: Transport
  readonly retry: Retry.Policy
  /** how long a request may wait for the sampler to serve its policy version */
  readonly readyTimeout: Duration.Input
  /** the trainer's policy version (what the sampler serves once it has loaded it) */
  readonly trainerVersion: Effect.Effect<number, BackendError>
}

const fail = (operation: string, message: string, reason: BackendError["reason"] = "Internal") => new BackendError({ reason, operation, message })

const call = <S extends Schema.ConstraintDecoder<unknown>>(o: Options, operation: string, method: "GET" | "POST", path: string, schema: S, body?: unknown, headers: Record<string, string> = {}) =>
  request({ transport: o.transport, retry: o.retry, timeout: o.readyTimeout }, operation, method, path, schema, body, headers)

/** The stop rules as vLLM's `stop` (strings) and `stop_token_ids`. */
const stops = (params: SamplingParams) => {
  const strings = (params.stop ?? []).filter((s): s is string => typeof s === "string")
  const ids = (params.stop ?? []).filter((s): s is number => typeof s === "number")
  return { ...(strings.length > 0 ? { stop: strings } : {}), ...(ids.length > 0 ? { stop_token_ids: ids } : {}) }
}

/** One completion as a sampled sequence. */
const sequenceOf = (c: typeof DataWire.Choice.Type, at: string) => {
  const tokens = c.logprobs.tokens.map(DataWire.tokenIdOf)
  const bad = tokens.findIndex((t) => t === undefined)
  if (bad >= 0) return Result.fail(`${at}.logprobs.tokens[${bad}] is ${JSON.stringify(c.logprobs.tokens[bad])}, not token_id:N (the request asks for return_tokens_as_token_ids)`)
  const missing = c.logprobs.token_logprobs.findIndex((l) => l === null)
  if (missing >= 0 || c.logprobs.token_logprobs.length !== tokens.length) return Result.fail(`${at}.logprobs.token_logprobs has no log-prob for every token`)
  return Result.succeed({ tokens: tokens as Array<number>, logprobs: c.logprobs.token_logprobs as Array<number>, stopReason: c.finish_reason === "length" ? ("length" as const) : ("stop" as const) })
}

/** vLLM's prompt log-probs as gyre's: position i's log-prob of the prompt's own token i; 0 at position 0. */
const promptLogprobsOf = (lps: ReadonlyArray<typeof DataWire.PromptLogprob.Type>, tokens: ReadonlyArray<number>) => {
  const out: Array<number> = []
  for (let i = 0; i < tokens.length; i++) {
    if (i === 0) {
      out.push(0)
      continue
    }
    const lp = lps[i]?.[String(tokens[i])]?.logprob
    if (lp === undefined) return Result.fail(`prompt_logprobs[${i}] has no log-prob for the prompt's token ${tokens[i]}`)
    out.push(lp)
  }
  return Result.succeed(out)
}

/** @since 0.1.0 @category constructors */
export const make = (o: Options): SamplerShape => {
  let resolved: { readonly version: number; readonly model: string } | undefined = undefined
  const modelFor = (min: number) =>
    Effect.gen(function* () {
      if (resolved !== undefined && resolved.version >= min) return resolved.model
      const models = yield* call(o, "sample", "GET", "/v1/models", DataWire.Models)
      const adapter = models.data.filter((m) => m.parent !== undefined && m.parent !== null).at(-1)
      const model = adapter?.id ?? models.data.find((m) => m.parent === undefined || m.parent === null)?.id
      if (model === undefined) return yield* fail("sample", "the sampler's GET /v1/models lists no model", "Unavailable")
      resolved = { version: min, model }
      return model
    })
  const sample = Effect.fn("Loops.Sampler.sample")(function* (prompt: ModelInput, params: SamplingParams, options: SampleOptions): Effect.fn.Return<SampleResult, BackendError> {
    const tokens = modelInputTokens(prompt)
    const min = options.minPolicyVersion ?? 0
    const body: DataWire.CompletionRequest = {
      model: yield* modelFor(min),
      prompt: tokens,
      n: options.numSamples,
      max_tokens: params.maxTokens,
      temperature: params.temperature,
      ...(params.topP !== undefined ? { top_p: params.topP } : {}),
      ...(params.topK !== undefined && params.topK > 0 ? { top_k: params.topK } : {}),
      ...(params.seed !== undefined ? { seed: params.seed } : {}),
      ...stops(params),
      logprobs: 1,
      ...(options.includePromptLogprobs === true ? { prompt_logprobs: 0 } : {}),
      return_tokens_as_token_ids: true,
    }
    const headers = {
      ...(options.minPolicyVersion !== undefined ? { [DataWire.Headers.minPolicyVersion]: String(options.minPolicyVersion) } : {}),
      ...(options.affinityKey !== undefined ? { [DataWire.Headers.affinityKey]: options.affinityKey } : {}),
    }
    const r = yield* call(o, "sample", "POST", "/v1/completions", DataWire.CompletionResponse, body, headers)
    const sequences = yield* Effect.forEach(r.choices, (c, i) => Effect.fromResult(sequenceOf(c, `choices[${i}]`)).pipe(Effect.mapError((m) => fail("sample", m))))
    if (sequences.length !== options.numSamples) return yield* fail("sample", `asked for ${options.numSamples} samples, the sampler answered ${sequences.length}`)
    const promptLogprobs = options.includePromptLogprobs === true
      ? yield* Effect.fromResult(promptLogprobsOf(r.choices.find((c) => c.prompt_logprobs != null)?.prompt_logprobs ?? r.prompt_logprobs ?? [], tokens)).pipe(Effect.mapError((m) => fail("sample", m)))
      : undefined
    return { sequences, policyVersion: r.policy_version ?? min, ...(promptLogprobs !== undefined ? { promptLogprobs } : {}) }
  })
  return {
    sample,
    computeLogprobs: Effect.fn("Loops.Sampler.computeLogprobs")(function* (input: ModelInput, options?: { readonly minPolicyVersion?: number }) {
      const r = yield* sample(input, { maxTokens: 1, temperature: 1 }, { numSamples: 1, includePromptLogprobs: true, ...options })
      return [...(r.promptLogprobs ?? [])]
    }),
    version: o.trainerVersion,
  }
}

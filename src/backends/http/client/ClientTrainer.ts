/**
 * The client's `Trainer`: training calls as ordered futures (`Calls.ts`), datums
 * through `Alignment.ts` (gyre's full sequences <-> Tinker's shifted targets).
 *
 * `forward_backward` and `forward` travel as JSON or as Tinker's protobuf
 * `ForwardBackwardRequest` (`Proto.ts`), as the client-config handshake before the
 * first of them decides (`negotiateWire`): with `proto_write_fwdbwd`, `forward_backward` goes as protobuf, and
 * with `fwd_via_fwdbwd` too, `forward` goes to `/forward_backward` with `forward_only`
 * (the flags the official SDK read up to 0.24.1; 0.25.0 always does both). A request
 * that protobuf cannot carry (gyre's `top_k_logprobs`) goes as JSON. The body is never
 * compressed (`proto_compress_fwdbwd` is a permission, and Node 20 has no zstd encoder).
 * Results come as protobuf or JSON, whichever the server answers (`Transport.ts`).
 *
 * @since 0.1.0
 */
import { Effect, Option, Result, Schema } from "effect"
import { type AdamParams, BackendError, type Datum, type ForwardBackwardResult, type ForwardOptions, type LossFn } from "../../../contract/Contract.ts"
import { resolveLoss } from "../../../loss/Loss.ts"
import { awaitingEach, type TrainerInfo, type TrainerShape } from "../../../services/Trainer.ts"
import * as Alignment from "../wire/Alignment.ts"
import type { Calls } from "./Calls.ts"
import * as Proto from "../wire/Proto.ts"
import { Binary, CLIENT_VERSION, decodeTypedResult } from "./Transport.ts"
import * as Wire from "../wire/Wire.ts"

/** How `forward_backward` and `forward` travel. @since 0.1.0 @category models */
export interface WireChoice {
  /** `forward_backward` as a protobuf `ForwardBackwardRequest` */
  readonly protobuf: boolean
  /** `forward` as `forward_only` on `/forward_backward` (protobuf) instead of JSON `/forward` */
  readonly forwardOnly: boolean
}

/** @since 0.1.0 @category constants */
export const JSON_WIRE: WireChoice = { protobuf: false, forwardOnly: false }

/** @since 0.1.0 @category constants */
export const PROTOBUF_WIRE: WireChoice = { protobuf: true, forwardOnly: true }

/** The client-config flags the client reads (the answer holds more; unknown ones are ignored). @since 0.1.0 @category models */
export const ClientConfig = Schema.Struct({
  proto_write_fwdbwd: Schema.optional(Schema.Boolean),
  fwd_via_fwdbwd: Schema.optional(Schema.Boolean),
  proto_compress_fwdbwd: Schema.optional(Schema.Boolean),
  sample_use_retrieve_futures: Schema.optional(Schema.Boolean),
})

/**
 * The wire of the training data: `json` and `protobuf` as said; `auto` asks the server
 * (`POST /client/config`, as the SDK does first) and takes protobuf where its flags say
 * so, JSON otherwise or when the server has no such route.
 * @since 0.1.0 @category constructors
 */
export const negotiateWire = Effect.fn("Http.negotiateWire")(function* (calls: Calls, choice: "auto" | "protobuf" | "json") {
  if (choice === "json") return JSON_WIRE
  if (choice === "protobuf") return PROTOBUF_WIRE
  const config = yield* calls.direct("POST", "/client/config", { sdk_version: CLIENT_VERSION }, ClientConfig, "client_config").pipe(Effect.option)
  if (Option.isNone(config)) {
    yield* Effect.logDebug("the server has no client config: forward_backward travels as JSON")
    return JSON_WIRE
  }
  const protobuf = config.value.proto_write_fwdbwd === true
  return { protobuf, forwardOnly: protobuf && config.value.fwd_via_fwdbwd === true } satisfies WireChoice
})

/** What the trainer and the sampler of one connection share. @since 0.1.0 @category models */
export interface State {
  readonly modelId: string
  readonly baseModel: string
  readonly loraRank: number | undefined
  readonly maxContext: number | undefined
  trainerVersion: number
  /** the sampler weights last published by `saveWeightsForSampler` */
  published: { readonly version: number; readonly samplingSessionId?: string | undefined; readonly modelPath?: string | undefined } | undefined
  samplerSeq: number
  /**
   * sampler ids (`sampling_session_seq_id`s) the server has given this session so far:
   * one per published sampler it named with a `sampling_session_id`, one per sampling
   * session created; the next sampling session takes this one
   */
  samplerIds: number
}

const invalid = (operation: string, message: string) => new BackendError({ reason: "InvalidInput", operation, message })

/** What the operations of one trainer share. */
interface Context {
  readonly calls: Calls
  readonly state: State
  /** `get_info` of the model */
  readonly getInfo: Effect.Effect<typeof Wire.GetInfoResponse.Type, BackendError>
  /** the wire of the training data, asked of the server once */
  readonly wire: Effect.Effect<WireChoice>
}

type Kind = "forward_backward" | "forward"

/**
 * The protobuf body of a call (numbered by its `seq_id`), when the wire takes one and
 * protobuf can carry the request; else none, and the call goes as JSON.
 */
const protobufCall = (ctx: Context, kind: Kind, input: Wire.ForwardBackwardInput) =>
  Effect.gen(function* () {
    const wire = yield* ctx.wire
    if (!wire.protobuf || (kind === "forward" && !wire.forwardOnly)) return Option.none<(seq: number) => Binary>()
    const numbered = Proto.forwardBackwardRequestNumbered({ forward_backward_input: input, model_id: ctx.state.modelId, forward_only: kind === "forward" })
    if (Result.isFailure(numbered)) {
      if (numbered.failure.reason !== "Unsupported") return yield* invalid(kind, numbered.failure.message)
      yield* Effect.logDebug(`${kind} goes as JSON: ${numbered.failure.message}`)
      return Option.none<(seq: number) => Binary>()
    }
    // the datums are written once; each seq_id only adds the request's head
    return Option.some((seq: number) => new Binary(numbered.success(seq)))
  })

/** The request's input on the wire: the loss checked, each datum aligned to Tinker's shifted targets. */
const inputOf = (kind: Kind, data: ReadonlyArray<Datum>, lossFn: LossFn, opts: ForwardOptions | undefined) =>
  Effect.gen(function* () {
    const loss = resolveLoss(lossFn, opts?.lossFnConfig)
    if (!loss.ok) return yield* invalid(kind, loss.message)
    if (data.length === 0) return yield* invalid(kind, "data is empty: send at least one Datum")
    const wireData: Array<Wire.Datum> = []
    for (const [i, datum] of data.entries()) {
      const r = Alignment.datumToWire(datum, lossFn, `data[${i}]`)
      if (Result.isFailure(r)) return yield* invalid(kind, r.failure)
      wireData.push(r.success)
    }
    return {
      data: wireData,
      loss_fn: lossFn,
      ...(opts?.lossFnConfig !== undefined ? { loss_fn_config: opts.lossFnConfig } : {}),
      ...(opts?.topKLogprobs !== undefined ? { top_k_logprobs: opts.topKLogprobs } : {}),
    } satisfies Wire.ForwardBackwardInput
  })

/** The result back in gyre's terms: one output per datum sent. */
const resultOf = (kind: Kind, out: Wire.ForwardBackwardOutput, datums: number) =>
  Effect.gen(function* () {
    if (out.loss_fn_outputs.length !== datums) {
      return yield* new BackendError({ reason: "Internal", operation: kind, message: `the server returned ${out.loss_fn_outputs.length} outputs for ${datums} datums` })
    }
    const outputs = []
    for (const [i, o] of out.loss_fn_outputs.entries()) {
      const r = Alignment.outputFromWire(o, `loss_fn_outputs[${i}]`)
      if (Result.isFailure(r)) return yield* new BackendError({ reason: "Internal", operation: kind, message: r.failure })
      outputs.push(r.success)
    }
    return { lossFnOutputs: outputs, metrics: Wire.metricsFromWire(out.metrics) } satisfies ForwardBackwardResult
  })

/** The calls of a `Submitter`, each succeeding once queued with the effect that awaits its result. */
const submitForward = (ctx: Context, kind: Kind, wait: boolean) =>
  Effect.fn(kind === "forward" ? "Http.submitForward" : "Http.submitForwardBackward")(function* (data: ReadonlyArray<Datum>, lossFn: LossFn, opts?: ForwardOptions) {
    const input: Wire.ForwardBackwardInput = yield* inputOf(kind, data, lossFn, opts)
    const type = kind === "forward" ? "Forward" : "ForwardBackward"
    const call = yield* protobufCall(ctx, kind, input)
    const raw = Option.isSome(call)
      ? yield* ctx.calls.trainingSubmit("/forward_backward", call.value, type, Schema.Unknown, kind, wait)
      : yield* ctx.calls.trainingSubmit(
          `/${kind}`,
          (seq) => ({ [kind === "forward" ? "forward_input" : "forward_backward_input"]: input, model_id: ctx.state.modelId, seq_id: seq }),
          type,
          Schema.Unknown,
          kind,
          wait,
        )
    return Effect.gen(function* () {
      const out = yield* decodeTypedResult(yield* raw, (b) => Proto.decodeForwardBackwardOutput(b.bytes), Wire.ForwardBackwardOutput, kind)
      return yield* resultOf(kind, out, data.length)
    })
  })

const submitOptimStep = (ctx: Context, wait: boolean) =>
  Effect.fn("Http.submitOptimStep")(function* (adam: AdamParams) {
    const { state } = ctx
    const raw = yield* ctx.calls.trainingSubmit(
      "/optim_step",
      (seq) => ({ adam_params: Wire.adamParamsToWire(adam), model_id: state.modelId, seq_id: seq, type: "optim_step" }),
      "OptimStep",
      Wire.OptimStepResponse,
      "optim_step",
      wait,
    )
    // cached: the version moves once however often the result is awaited
    return yield* Effect.cached(Effect.map(raw, (out) => {
      state.trainerVersion = out.policy_version ?? state.trainerVersion + 1
      return { version: state.trainerVersion, metrics: Wire.metricsFromWire(out.metrics) }
    }))
  })

const submitSaveWeightsForSampler = (ctx: Context, wait: boolean) =>
  Effect.fn("Http.submitSaveWeightsForSampler")(function* (name: string) {
    const { state } = ctx
    const raw = yield* ctx.calls.trainingSubmit(
      "/save_weights_for_sampler",
      (seq) => ({ model_id: state.modelId, path: name, seq_id: seq, type: "save_weights_for_sampler" }),
      "SaveWeightsForSampler",
      Wire.SaveWeightsForSamplerResponse,
      "save_weights_for_sampler",
      wait,
    )
    return yield* Effect.cached(Effect.map(raw, (out) => {
      const version = out.policy_version ?? state.trainerVersion
      state.published = { version, samplingSessionId: out.sampling_session_id ?? undefined, modelPath: out.path ?? undefined }
      if (out.sampling_session_id !== undefined && out.sampling_session_id !== null) state.samplerIds++
      state.samplerSeq = 0
      return { version, path: out.path ?? out.sampling_session_id ?? name }
    }))
  })

const saveState = (ctx: Context) =>
  Effect.fn("Http.saveState")(function* (name: string) {
    const out = yield* ctx.calls.trainingCall(
      "/save_weights",
      (seq) => ({ model_id: ctx.state.modelId, path: name, seq_id: seq, type: "save_weights" }),
      "SaveWeights",
      Wire.SaveWeightsResponse,
      "save_weights",
    )
    return { path: out.path }
  })

const loadState = (ctx: Context) =>
  Effect.fn("Http.loadState")(function* (path: string, opts?: { readonly withOptimizer?: boolean }) {
    yield* ctx.calls.trainingCall(
      "/load_weights",
      (seq) => ({ model_id: ctx.state.modelId, seq_id: seq, path, optimizer: opts?.withOptimizer ?? false, type: "load_weights" }),
      "LoadWeights",
      Wire.LoadWeightsResponse,
      "load_weights",
    )
    const info = yield* ctx.getInfo
    if (info.policy_version !== undefined) ctx.state.trainerVersion = info.policy_version
  })

const info = (ctx: Context) =>
  Effect.gen(function* () {
    const { state } = ctx
    const info = yield* ctx.getInfo
    if (info.policy_version !== undefined) state.trainerVersion = info.policy_version
    return {
      modelName: info.model_name ?? info.model_data.model_name ?? state.baseModel,
      loraRank: info.lora_rank ?? state.loraRank ?? 0,
      version: state.trainerVersion,
      maxSequenceLength: info.max_sequence_length ?? state.maxContext ?? 0,
      ...(info.model_data.tokenizer_id != null ? { tokenizerId: info.model_data.tokenizer_id } : {}),
    } satisfies TrainerInfo
  }).pipe(Effect.withSpan("Http.info"))

/** @since 0.1.0 @category constructors */
export const make = (calls: Calls, state: State, options: { readonly wire?: "auto" | "protobuf" | "json" | undefined } = {}): TrainerShape => {
  // asked once; concurrent first calls may both ask
  let negotiated: WireChoice | undefined
  const ctx: Context = {
    calls,
    state,
    getInfo: calls.direct("POST", "/get_info", { model_id: state.modelId, type: "get_info" }, Wire.GetInfoResponse, "get_info"),
    wire: Effect.suspend(() =>
      negotiated !== undefined ? Effect.succeed(negotiated) : Effect.tap(negotiateWire(calls, options.wire ?? "auto"), (w) => Effect.sync(() => (negotiated = w))),
    ),
  }
  return {
    // awaited at once: each submission asks for its result with the answer
    forwardBackward: awaitingEach(submitForward(ctx, "forward_backward", true)),
    forward: awaitingEach(submitForward(ctx, "forward", true)),
    optimStep: awaitingEach(submitOptimStep(ctx, true)),
    saveWeightsForSampler: awaitingEach(submitSaveWeightsForSampler(ctx, true)),
    saveState: saveState(ctx),
    loadState: loadState(ctx),
    info: info(ctx),
    submit: {
      forwardBackward: submitForward(ctx, "forward_backward", false),
      optimStep: submitOptimStep(ctx, false),
      saveWeightsForSampler: submitSaveWeightsForSampler(ctx, false),
    },
  }
}

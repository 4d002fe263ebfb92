/**
 * The client's `Trainer`: training calls as ordered futures (`Calls.ts`), datums
 * through `Alignment.ts` (gyre's full sequences <-> Tinker's shifted targets).
 *
 * @since 0.1.0
 */
import { Effect, Result } from "effect"
import { type AdamParams, BackendError, type Datum, type ForwardBackwardResult, type ForwardOptions, type LossFn } from "../../Contract.ts"
import { resolveLoss } from "../../Loss.ts"
import type { TrainerInfo, TrainerShape } from "../../Trainer.ts"
import * as Alignment from "./Alignment.ts"
import type { Calls } from "./Calls.ts"
import * as Wire from "./Wire.ts"

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

/** @since 0.1.0 @category constructors */
export const make = (calls: Calls, state: State): TrainerShape => {
  const { direct, trainingCall } = calls
  const invalid = (operation: string, message: string) => new BackendError({ reason: "InvalidInput", operation, message })
  const getInfo = direct("POST", "/get_info", { model_id: state.modelId, type: "get_info" }, Wire.GetInfoResponse, "get_info")

  const forwardLike = (kind: "forward_backward" | "forward") =>
    Effect.fn(kind === "forward" ? "Http.forward" : "Http.forwardBackward")(function* (data: ReadonlyArray<Datum>, lossFn: LossFn, opts?: ForwardOptions) {
      const loss = resolveLoss(lossFn, opts?.lossFnConfig)
      if (!loss.ok) return yield* invalid(kind, loss.message)
      if (data.length === 0) return yield* invalid(kind, "data is empty: send at least one Datum")
      const wireData: Array<Wire.Datum> = []
      for (let i = 0; i < data.length; i++) {
        const r = Alignment.datumToWire(data[i]!, lossFn, `data[${i}]`)
        if (Result.isFailure(r)) return yield* invalid(kind, r.failure)
        wireData.push(r.success)
      }
      const input = {
        data: wireData,
        loss_fn: lossFn,
        ...(opts?.lossFnConfig !== undefined ? { loss_fn_config: opts.lossFnConfig } : {}),
        ...(opts?.topKLogprobs !== undefined ? { top_k_logprobs: opts.topKLogprobs } : {}),
      }
      const out = yield* trainingCall(
        `/${kind}`,
        (seq) => ({ [kind === "forward" ? "forward_input" : "forward_backward_input"]: input, model_id: state.modelId, seq_id: seq }),
        kind === "forward" ? "Forward" : "ForwardBackward",
        Wire.ForwardBackwardOutput,
        kind,
      )
      if (out.loss_fn_outputs.length !== data.length) {
        return yield* new BackendError({ reason: "Internal", operation: kind, message: `the server returned ${out.loss_fn_outputs.length} outputs for ${data.length} datums` })
      }
      const outputs = []
      for (let i = 0; i < out.loss_fn_outputs.length; i++) {
        const r = Alignment.outputFromWire(out.loss_fn_outputs[i]!, `loss_fn_outputs[${i}]`)
        if (Result.isFailure(r)) return yield* new BackendError({ reason: "Internal", operation: kind, message: r.failure })
        outputs.push(r.success)
      }
      return { lossFnOutputs: outputs, metrics: Wire.metricsFromWire(out.metrics) } satisfies ForwardBackwardResult
    })

  return {
    forwardBackward: forwardLike("forward_backward"),
    forward: forwardLike("forward"),
    optimStep: Effect.fn("Http.optimStep")(function* (adam: AdamParams) {
      const out = yield* trainingCall(
        "/optim_step",
        (seq) => ({ adam_params: Wire.adamParamsToWire(adam), model_id: state.modelId, seq_id: seq, type: "optim_step" }),
        "OptimStep",
        Wire.OptimStepResponse,
        "optim_step",
      )
      state.trainerVersion = out.policy_version ?? state.trainerVersion + 1
      return { version: state.trainerVersion, metrics: Wire.metricsFromWire(out.metrics) }
    }),
    saveWeightsForSampler: Effect.fn("Http.saveWeightsForSampler")(function* (name: string) {
      const out = yield* trainingCall(
        "/save_weights_for_sampler",
        (seq) => ({ model_id: state.modelId, path: name, seq_id: seq, type: "save_weights_for_sampler" }),
        "SaveWeightsForSampler",
        Wire.SaveWeightsForSamplerResponse,
        "save_weights_for_sampler",
      )
      const version = out.policy_version ?? state.trainerVersion
      state.published = { version, samplingSessionId: out.sampling_session_id ?? undefined, modelPath: out.path ?? undefined }
      if (out.sampling_session_id !== undefined && out.sampling_session_id !== null) state.samplerIds++
      state.samplerSeq = 0
      return { version, path: out.path ?? out.sampling_session_id ?? name }
    }),
    saveState: Effect.fn("Http.saveState")(function* (name: string) {
      const out = yield* trainingCall(
        "/save_weights",
        (seq) => ({ model_id: state.modelId, path: name, seq_id: seq, type: "save_weights" }),
        "SaveWeights",
        Wire.SaveWeightsResponse,
        "save_weights",
      )
      return { path: out.path }
    }),
    loadState: Effect.fn("Http.loadState")(function* (path: string, opts?: { readonly withOptimizer?: boolean }) {
      yield* trainingCall(
        "/load_weights",
        (seq) => ({ model_id: state.modelId, seq_id: seq, path, optimizer: opts?.withOptimizer ?? false, type: "load_weights" }),
        "LoadWeights",
        Wire.LoadWeightsResponse,
        "load_weights",
      )
      const info = yield* getInfo
      if (info.policy_version !== undefined) state.trainerVersion = info.policy_version
    }),
    info: Effect.gen(function* () {
      const info = yield* getInfo
      if (info.policy_version !== undefined) state.trainerVersion = info.policy_version
      return {
        modelName: info.model_name ?? info.model_data.model_name ?? state.baseModel,
        loraRank: info.lora_rank ?? state.loraRank ?? 0,
        version: state.trainerVersion,
        maxSequenceLength: info.max_sequence_length ?? state.maxContext ?? 0,
      } satisfies TrainerInfo
    }).pipe(Effect.withSpan("Http.info")),
  }
}

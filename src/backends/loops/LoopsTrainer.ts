/**
 * gyre's `Trainer` on a Loops run's trainer, over the Loops data plane
 * (`DataWire.ts`, `Operations.ts`).
 *
 * Datums travel shifted, as every public caller of a Loops trainer sends them
 * (`target_tokens[i]` is token i+1, the trainer's `logprobs[i]` is log p(token i+1)):
 * the conversion is the HTTP backend's (`Alignment.ts`), in both directions. Loops
 * reports a loss as a mean over active tokens (`loss`); gyre's runner reads `loss:sum`
 * and `active_tokens`, so when the trainer sends only `loss` they are made from it and
 * the batch's own count of active tokens.
 *
 * Its `submit` queues a step's `forward_backward`, `optim_step` and
 * `save_weights_for_sampler` before polling the first: the trainer runs operations one at
 * a time in submission order (`DataWire.ts`), so a step pays one round of polling.
 *
 * @since 0.1.0
 */
import { Effect, Result } from "effect"
import { type AdamParams, BackendError, type Datum, type ForwardBackwardResult, type ForwardOptions, type LossFn } from "../../contract/Contract.ts"
import { activeCount } from "../../loss/Loss.ts"
import { awaitingEach, type TrainerShape } from "../../services/Trainer.ts"
import * as Alignment from "../http/wire/Alignment.ts"
import { adamParamsToWire } from "../http/wire/Wire.ts"
import type * as Wire from "../http/wire/Wire.ts"
import * as DataWire from "./DataWire.ts"
import { type Operations, readAs } from "./Operations.ts"

/** @since 0.1.0 @category models */
export interface Options {
  readonly runId: string
  readonly baseModel: string
  readonly loraRank: number
  /** the base model's context length (the control plane's capabilities), 0 when unknown */
  readonly maxSequenceLength: number
}

const fail = (operation: string, message: string, reason: BackendError["reason"] = "InvalidInput") => new BackendError({ reason, operation, message })

/** gyre Datums as the wire's. */
const toWire = (operation: string, data: ReadonlyArray<Datum>, lossFn: LossFn) =>
  Effect.forEach(data, (d, i) => {
    const w = Alignment.datumToWire(d, lossFn, `data[${i}]`)
    return Result.isSuccess(w) ? Effect.succeed(w.success) : Effect.fail(fail(operation, w.failure))
  })

/** A result tensor as a wire TensorData (its `dtype` may be missing, its nulls are zeros). */
const tensorOf = (t: typeof DataWire.ResultTensor.Type): Wire.TensorData => ({
  data: t.data.map((v) => v ?? 0),
  dtype: t.dtype === "int64" ? "int64" : "float32",
  ...(t.shape !== undefined ? { shape: t.shape } : {}),
})

/** The runner's metrics from a result: the trainer's own, else `loss:sum` and `active_tokens` from its mean `loss`. */
const metricsOf = (r: DataWire.ForwardResult, active: number): Record<string, number> => {
  const own = r.metrics ?? {}
  const loss = r.loss ?? undefined
  return {
    ...(loss !== undefined && loss !== null ? { loss } : {}),
    ...(own["active_tokens"] === undefined ? { active_tokens: active } : {}),
    ...(own["loss:sum"] === undefined && loss !== undefined && loss !== null ? { "loss:sum": loss * active } : {}),
    ...own,
  }
}

/** `forward_backward` or `forward`, submitted: the effect it succeeds with awaits the result. */
const submitPass = (ops: Operations, op: "forward_backward" | "forward") =>
  Effect.fn(`Loops.Trainer.submit.${op}`)(function* (data: ReadonlyArray<Datum>, lossFn: LossFn, options?: ForwardOptions) {
    const wire = yield* toWire(op, data, lossFn)
    const body: DataWire.ForwardRequest = {
      data: wire,
      loss_fn: lossFn,
      ...(options?.lossFnConfig !== undefined ? { loss_fn_config: options.lossFnConfig } : {}),
      ...(options?.topKLogprobs !== undefined && options.topKLogprobs > 0 ? { top_k_logprobs: options.topKLogprobs } : {}),
    }
    const pending = yield* ops.submit(op, body)
    return Effect.gen(function* () {
      const r = yield* readAs(DataWire.ForwardResult, op)(yield* pending)
      if (r.loss_fn_outputs.length !== data.length) return yield* fail(op, `the trainer answered ${r.loss_fn_outputs.length} outputs for ${data.length} datums`, "Internal")
      const outputs = yield* Effect.forEach(r.loss_fn_outputs, (o, i) => {
        const out = Alignment.outputFromWire(Object.fromEntries(Object.entries(o).map(([k, t]) => [k, tensorOf(t)])), `loss_fn_outputs[${i}]`)
        return Result.isSuccess(out) ? Effect.succeed(out.success) : Effect.fail(fail(op, out.failure, "Internal"))
      })
      return { lossFnOutputs: outputs, metrics: metricsOf(r, activeCount(data, lossFn)) } satisfies ForwardBackwardResult
    })
  })

/** The trainer's policy version (`GET /policy_version`). @since 0.1.0 @category combinators */
export const policyVersion = (ops: Operations) =>
  Effect.map(ops.get("/policy_version", DataWire.PolicyVersion), (v) => (typeof v === "number" ? v : v.policy_version))

/** @since 0.1.0 @category constructors */
export const make = (ops: Operations, o: Options): TrainerShape => {
  const version = policyVersion(ops)
  /** a save, submitted: the effect it succeeds with awaits where it went and the version it holds */
  const submitSave = (op: "save_state" | "save_weights_for_sampler", name: string) =>
    Effect.map(ops.submit(op, { name, run_id: o.runId }), (pending) =>
      Effect.gen(function* () {
        const r = yield* readAs(DataWire.SaveResult, op)(yield* pending)
        return { path: r.path ?? DataWire.checkpointUri(o.runId, op === "save_state" ? "weights" : "sampler_weights", name), version: r.policy_version }
      }))
  const submitOptimStep = Effect.fn("Loops.Trainer.submit.optimStep")(function* (adam: AdamParams) {
    const pending = yield* ops.submit("optim_step", { adam_params: adamParamsToWire(adam) })
    return Effect.gen(function* () {
      const r = yield* readAs(DataWire.OptimStepResult, "optim_step")(yield* pending)
      const metrics = { ...(r.grad_norm !== undefined ? { grad_norm: r.grad_norm } : {}), ...(r.metrics ?? {}) }
      return { version: r.policy_version ?? (yield* version), metrics }
    })
  })
  const submitPublish = Effect.fn("Loops.Trainer.submit.saveWeightsForSampler")(function* (name: string) {
    const pending = yield* submitSave("save_weights_for_sampler", name)
    return Effect.gen(function* () {
      const s = yield* pending
      return { path: s.path, version: s.version ?? (yield* version) }
    })
  })
  // the trainer runs operations one at a time in submission order (DataWire.ts), so a step's may be queued together
  const submit = { forwardBackward: submitPass(ops, "forward_backward"), optimStep: submitOptimStep, saveWeightsForSampler: submitPublish }
  const save = (op: "save_state" | "save_weights_for_sampler", name: string) => Effect.flatten(submitSave(op, name))
  return {
    submit,
    forwardBackward: awaitingEach(submit.forwardBackward),
    forward: awaitingEach(submitPass(ops, "forward")),
    optimStep: awaitingEach(submitOptimStep),
    saveWeightsForSampler: awaitingEach(submitPublish),
    saveState: Effect.fn("Loops.Trainer.saveState")(function* (name: string) {
      return { path: (yield* save("save_state", name)).path }
    }),
    loadState: Effect.fn("Loops.Trainer.loadState")(function* (path: string, options?: { readonly withOptimizer?: boolean }) {
      yield* ops.run(options?.withOptimizer === true ? "load_state_with_optimizer" : "load_state", { path })
    }),
    info: Effect.map(version, (v) => ({ modelName: o.baseModel, loraRank: o.loraRank, version: v, maxSequenceLength: o.maxSequenceLength })),
  }
}

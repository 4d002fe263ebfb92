/**
 * The trainer half of gyre's Loops data-plane server: each operation of `DataWire.ts`
 * on gyre's `Trainer`. A body is decoded strictly (a field the wire does not have is a
 * 422 naming it) and its datums are converted and checked at submission by the Tinker
 * wire's checks (`WireDatums.ts`: a float32 overflow such as an advantage of 1e300 is a 422
 * naming `body.data[i].loss_fn_inputs.advantages.data[j]`), as a Loops trainer refuses a
 * body it cannot validate; what the trainer refuses later is the operation's error.
 *
 * Checkpoints are named as Loops names them (`bt://loops:<run>/weights/<name>`,
 * `.../sampler_weights/<name>`), `<run>` being the server's run, else the `run_id` the
 * request names; `load_state` takes such a URI of a checkpoint this server saved.
 *
 * @since 0.1.0
 */
import { Data, Effect, Result, type Schema } from "effect"
import { type BackendError, type Datum, LossFn } from "../../../contract/Contract.ts"
import { decode } from "../../../util/Decode.ts"
import type { TrainerShape } from "../../../services/Trainer.ts"
import * as Alignment from "../../http/wire/Alignment.ts"
import * as WireDatums from "../../http/server/WireDatums.ts"
import { adamParamsFromWire } from "../../http/wire/Wire.ts"
import * as DataWire from "../DataWire.ts"

/** A refused submission: its status and message. @since 0.1.0 @category errors */
export class Refusal extends Data.TaggedError("Refusal")<{ readonly status: number; readonly message: string }> {}

/** What a route makes of a body: the work to run as an operation, or a refusal. @since 0.1.0 @category models */
export type Route = (body: unknown) => Effect.Effect<Effect.Effect<unknown, BackendError>, Refusal>

const refuse = (message: string, status = 422): Refusal => new Refusal({ status, message })

/** A body decoded strictly, or a 422 naming the field. @since 0.1.0 @category combinators */
export const strict = <S extends Schema.ConstraintDecoder<unknown>>(schema: S, body: unknown): Effect.Effect<S["Type"], Refusal> => {
  const r = decode(schema, "body", { strict: true })(body)
  return Result.isSuccess(r) ? Effect.succeed(r.success) : Effect.fail(refuse(r.failure))
}

const lossFnOf = (name: string | undefined): Effect.Effect<LossFn, Refusal> => {
  const r = decode(LossFn, "body.loss_fn")(name ?? "cross_entropy")
  return Result.isSuccess(r) ? Effect.succeed(r.success) : Effect.fail(refuse(r.failure))
}

/**
 * The body's datums in gyre's convention, checked as the Tinker wire checks them (the one
 * Datum validator, float32 range included), or a 422 naming the first bad one.
 */
const dataOf = (raw: unknown, lossFn: LossFn, limits: WireDatums.Limits): Effect.Effect<ReadonlyArray<Datum>, Refusal> =>
  WireDatums.checkedDatums("body", raw, lossFn, limits).pipe(Effect.mapError((r) => refuse(r.message)))

/** The body with its `data` left out (decoded on its own, datum by datum), and that data as sent. */
const splitData = (body: unknown): { readonly envelope: unknown; readonly data: unknown } =>
  typeof body === "object" && body !== null && Array.isArray((body as { data?: unknown }).data)
    ? { envelope: { ...body, data: [] }, data: (body as { data: unknown }).data }
    : { envelope: body, data: undefined }

/** A forward result as the wire's: the mean `loss`, per-datum outputs shifted back, the metrics. */
const forwardResult = (r: { readonly lossFnOutputs: ReadonlyArray<Parameters<typeof Alignment.outputToWire>[0]>; readonly metrics: Readonly<Record<string, number>> }) => {
  const active = r.metrics["active_tokens"] ?? 0
  const loss = r.metrics["loss"] ?? (active > 0 ? (r.metrics["loss:sum"] ?? 0) / active : 0)
  return { loss: Number.isFinite(loss) ? loss : null, loss_fn_outputs: r.lossFnOutputs.map(Alignment.outputToWire), metrics: r.metrics }
}

/** The checkpoints this server wrote, by their `bt://` URI. */
type Saved = Map<string, string>

/** The trainer's operations, by route. @since 0.1.0 @category constructors */
export const make = (trainer: TrainerShape, runId: string | undefined, limits: WireDatums.Limits): Record<DataWire.Operation, Route> => {
  const saved: Saved = new Map()
  const pass = (backward: boolean): Route => (body) =>
    Effect.gen(function* () {
      const { envelope, data: raw } = splitData(body)
      const req = yield* strict(DataWire.ForwardRequest, envelope)
      const lossFn = yield* lossFnOf(req.loss_fn)
      const data = yield* dataOf(raw, lossFn, limits)
      const options = {
        ...(req.loss_fn_config !== undefined && req.loss_fn_config !== null ? { lossFnConfig: req.loss_fn_config } : {}),
        ...(req.top_k_logprobs !== undefined && req.top_k_logprobs > 0 ? { topKLogprobs: req.top_k_logprobs } : {}),
      }
      return Effect.map(backward ? trainer.forwardBackward(data, lossFn, options) : trainer.forward(data, lossFn, options), forwardResult)
    })
  const save = (kind: "weights" | "sampler_weights"): Route => (body) =>
    Effect.gen(function* () {
      const req = yield* strict(DataWire.SaveRequest, body)
      if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/.test(req.name)) return yield* refuse(`body.name ${JSON.stringify(req.name.slice(0, 80))} is not a valid name: use 1-128 letters, digits, '.', '_' or '-'`)
      const given = req.run_id ?? undefined
      if (runId !== undefined && given !== undefined && given !== runId) return yield* refuse(`body.run_id is ${JSON.stringify(given)}, but this trainer is run ${runId}`)
      const uri = DataWire.checkpointUri(runId ?? given ?? "local", kind, req.name)
      return kind === "weights"
        ? Effect.map(trainer.saveState(req.name), (r) => (saved.set(uri, r.path), { path: uri }))
        : Effect.map(trainer.saveWeightsForSampler(req.name), (r) => ({ path: uri, policy_version: r.version }))
    })
  const load = (withOptimizer: boolean): Route => (body) =>
    Effect.gen(function* () {
      const req = yield* strict(DataWire.LoadStateRequest, body)
      const file = saved.get(req.path)
      if (file === undefined) return yield* refuse(`body.path ${JSON.stringify(req.path.slice(0, 200))} is not a checkpoint this trainer saved (save_state answers bt://loops:<run>/weights/<name>)`, 404)
      return Effect.as(trainer.loadState(file, { withOptimizer }), { path: req.path })
    })
  return {
    forward_backward: pass(true),
    forward: pass(false),
    optim_step: (body) =>
      Effect.gen(function* () {
        const req = yield* strict(DataWire.OptimStepRequest, body)
        const adam = adamParamsFromWire(req.adam_params)
        if (Result.isFailure(adam)) return yield* refuse(`body.${adam.failure}`)
        return Effect.map(trainer.optimStep(adam.success), (r) => ({ metrics: r.metrics, policy_version: r.version }))
      }),
    save_state: save("weights"),
    save_weights_for_sampler: save("sampler_weights"),
    load_state: load(false),
    load_state_with_optimizer: load(true),
  }
}

/** A failed operation as the wire's error: the class a Python server would raise, and gyre's reason. @since 0.1.0 @category combinators */
export const errorBody = (e: BackendError) => {
  const errorClass = e.reason === "InvalidInput" ? "ValueError" : e.reason === "Timeout" ? "TimeoutError" : "RuntimeError"
  return { status: "error", error: `${errorClass}: ${e.operation}: ${e.message}`, error_class: errorClass, reason: e.reason }
}

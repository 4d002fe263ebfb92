/**
 * The server's session, model and training endpoints: `create_session`,
 * `session_heartbeat`, `create_model`, `unload_model`, `get_info`, `forward_backward`,
 * `forward`, `optim_step`, `save_weights`, `save_weights_for_sampler`, `load_weights`.
 *
 * Wire datums are decoded with the Schemas of `Wire.ts`, aligned (`Alignment.ts`) and
 * then checked by the one Datum validator (`Datum.checkAll`: lengths, vocabulary,
 * float32 range, the inputs each loss reads) before any work starts, one datum at a time
 * with turns for other requests between them (`WireDatums.ts`), so a bad datum gets a 400
 * naming the datum and field: the issue is mapped to wire names and positions, then rendered.
 *
 * A training call refused for good (a 4xx the client does not retry) consumes its
 * `seq_id` when its body names a model of this server and a `seq_id` (`SeqOrder.forfeit`),
 * as the official SDK assumes when it numbers the next call.
 *
 * @since 0.1.0
 */
import { type Duration, Effect, Option, Result, Schema, SubscriptionRef } from "effect"
import type { BackendError } from "../../../contract/Contract.ts"
import { resolveLoss } from "../../../loss/Loss.ts"
import * as Alignment from "../wire/Alignment.ts"
import type { CheckpointIndex } from "./CheckpointIndex.ts"
import type { Clock } from "./ClockCycle.ts"
import type { FutureTable } from "./Futures.ts"
import type { Model, Registry } from "./Models.ts"
import { bad, checkName, decodeRequestOr400, Reject } from "./Requests.ts"
import { kindOfStatus } from "../client/Retry.ts"
import { claim, forfeit, inTurn } from "./SeqOrder.ts"
import * as Wire from "../wire/Wire.ts"
import { checkedDatums } from "./WireDatums.ts"

/** What the training endpoints share with the rest of the server. @since 0.1.0 @category models */
export interface Context {
  readonly registry: Registry
  readonly futures: FutureTable
  readonly modelName: string
  readonly tokenizerId: string | undefined
  readonly vocabSize: number | undefined
  readonly maxLength: number
  readonly maxDatums: number
  readonly turnTimeout: Duration.Input
  /** the checkpoints saved through this server, kept across restarts */
  readonly checkpoints: CheckpointIndex
  /** publishes a model's sampler version under a sampling session and a path */
  readonly published: (model: Model, samplingSessionId: string, uri: string, version: number) => void
  /** a simulated clock-cycle trainer: training operations run only at its cycles (`ClockCycle.ts`) */
  readonly clock: Clock | undefined
  /** simulated: how long after it ran `save_weights_for_sampler` is answered (0: at once) */
  readonly publishLatencyMillis: number
}

/** A POST handler: the decoded JSON body in, the answer body out. @since 0.1.0 @category models */
export type Handler = (body: unknown, headers: Readonly<Record<string, string | undefined>>) => Effect.Effect<unknown, Reject>

const unavailable = (e: BackendError) => new Reject({ status: 503, message: e.message })

export { wireDetail, wireIssue } from "./WireDatums.ts"

/** The calls that take a model's `seq_id`. */
const ORDERED = ["forward_backward", "forward", "optim_step", "save_weights", "save_weights_for_sampler", "load_weights"] as const

/** The ids of a training call, read on their own: a body refused for its other fields still names them. */
const SeqOf = Schema.Struct({ model_id: Schema.String, seq_id: Schema.Int })

/**
 * The parts a `lora_config` asks to train. `train_attn` and `train_mlp` are honoured;
 * both false leaves nothing to train (400). gyre's adapters never train the unembedding:
 * `train_unembed` true (the official SDK's default) is accepted with a warning in the
 * server's log, and `weights_info` answers `train_unembed: false`.
 */
const partsOf = (lora: (typeof Wire.CreateModelRequest.Type)["lora_config"]) =>
  Effect.gen(function* () {
    const trains = { attn: lora?.train_attn ?? true, mlp: lora?.train_mlp ?? true }
    if (!trains.attn && !trains.mlp) {
      return yield* bad("lora_config.train_attn and lora_config.train_mlp are both false: this server's adapters train attention and MLP projections only, so nothing would train")
    }
    if (lora?.train_unembed === true) yield* Effect.logWarning("create_model: lora_config.train_unembed is true, but adapters here never train the unembedding; it stays frozen")
    return trains
  })

/** What the checkpoint index keeps of the parts a model trains: only what differs from the default. */
const trainsOf = (model: Model) => ({ ...(model.trains.attn ? {} : { train_attn: false }), ...(model.trains.mlp ? {} : { train_mlp: false }) })

/** What the handlers share: the server's context and the `load_weights` count per model. */
interface Routes extends Context {
  /** `load_weights` applied per model: with the policy version it names a model's weights (`CheckpointIndex.Entry.loads`) */
  readonly loads: Map<string, number>
}

/** A refusal the client does not retry consumes the call's seq_id (see `SeqOrder.ts`). */
const consumesSeq =
  (ctx: Routes, handler: Handler): Handler =>
  (body, headers) =>
    Effect.tapError(handler(body, headers), (r) => {
      if (kindOfStatus(r.status) !== "Fatal") return Effect.void
      const ids = Schema.decodeUnknownOption(SeqOf)(body)
      if (Option.isNone(ids)) return Effect.void
      return ctx.registry.getModel(ids.value.model_id).pipe(
        Effect.flatMap((m) => forfeit(m, ids.value.seq_id)),
        Effect.ignore,
      )
    })

/**
 * Runs `work` as a future of `model`, in the turn of its `seq` (with a clock, in a cycle
 * too); its answer waits `answerAfter` milliseconds more.
 */
const trainingFuture = (ctx: Routes, type: Wire.RequestType, model: Model, seq: number, work: Effect.Effect<unknown, BackendError>, answerAfter = 0) =>
  Effect.gen(function* () {
    yield* claim(model, seq, "seq_id")
    const turn = inTurn(model, seq, work, ctx.turnTimeout)
    const timed = (ctx.clock === undefined ? turn : ctx.clock.gate(model, seq, turn)).pipe((e) => (answerAfter > 0 ? Effect.tap(e, () => Effect.sleep(answerAfter)) : e))
    const id = yield* ctx.futures
      .start(type, ctx.registry.tracked(model, timed), ctx.registry.touch(model))
      .pipe(Effect.tapError(() => Effect.sync(() => model.pending.delete(seq))))
    return { request_id: id, model_id: model.id }
  })

const tinkerPath = (modelId: string, kind: "weights" | "sampler_weights", name: string) => `tinker://${modelId}/${kind}/${name}`

/**
 * The body with its `<key>.data` left out, and that data as sent: the envelope is decoded
 * at once, the datums one by one (`WireDatums.ts`).
 */
const splitData = (body: unknown, key: string): { readonly envelope: unknown; readonly data: unknown } => {
  if (typeof body !== "object" || body === null || !Object.hasOwn(body, key)) return { envelope: body, data: undefined }
  const input = (body as Record<string, unknown>)[key]
  if (typeof input !== "object" || input === null || !Array.isArray((input as { data?: unknown }).data)) return { envelope: body, data: undefined }
  return { envelope: { ...body, [key]: { ...input, data: [] } }, data: (input as { data: unknown }).data }
}

const forwardLike = (ctx: Routes, kind: "forward_backward" | "forward", input: Wire.ForwardBackwardInput, rawData: unknown, modelId: string, seq: number) =>
  Effect.gen(function* () {
    const at = kind === "forward" ? "forward_input" : "forward_backward_input"
    const model = yield* ctx.registry.getModel(modelId)
    const loss = resolveLoss(input.loss_fn, input.loss_fn_config ?? undefined)
    if (!loss.ok) return yield* bad(`${at}.loss_fn: ${loss.message}`)
    const lossFn = loss.value.lossFn
    if (input.top_k_logprobs !== undefined && input.top_k_logprobs > 20) return yield* bad(`${at}.top_k_logprobs is ${input.top_k_logprobs}; at most 20`)
    // the one Datum validator, before any work (the backend runs it again)
    const data = yield* checkedDatums(at, rawData, lossFn, ctx).pipe(Effect.mapError((r) => new Reject({ status: 400, message: r.message, issue: r.issue })))
    const opts = {
      ...(input.loss_fn_config ? { lossFnConfig: input.loss_fn_config } : {}),
      ...(input.top_k_logprobs !== undefined ? { topKLogprobs: input.top_k_logprobs } : {}),
    }
    const work = (kind === "forward" ? model.trainer.forward(data, lossFn, opts) : model.trainer.forwardBackward(data, lossFn, opts)).pipe(
      Effect.map((r) => ({ loss_fn_output_type: "ArrayRecord", loss_fn_outputs: r.lossFnOutputs.map(Alignment.outputToWire), metrics: Wire.metricsToWire(r.metrics) })),
    )
    return yield* trainingFuture(ctx, kind === "forward" ? "Forward" : "ForwardBackward", model, seq, work)
  })

const createSession =
  (ctx: Routes): Handler =>
  (body) =>
    Effect.gen(function* () {
      yield* decodeRequestOr400(Wire.CreateSessionRequest, "create_session")(body)
      return { type: "create_session", session_id: yield* ctx.registry.createSession }
    })

const sessionHeartbeat =
  (ctx: Routes): Handler =>
  (body) =>
    Effect.gen(function* () {
      const req = yield* decodeRequestOr400(Wire.SessionHeartbeatRequest, "session_heartbeat")(body)
      yield* ctx.registry.getSession(req.session_id)
      return { type: "session_heartbeat" }
    })

/** `sessions/{id}/finish` (newer SDKs, when a client closes): why the session ended, acknowledged and logged; its models are freed when its heartbeats stop, as any session's. */
const SessionFinishRequest = Schema.Struct({
  session_id: Schema.String,
  reason: Schema.Struct({ type: Schema.Literals(["success", "errored", "interrupted"]) }),
  detail: Schema.optional(Schema.NullOr(Schema.String)),
})

const sessionFinish =
  (ctx: Routes): Handler =>
  (body) =>
    Effect.gen(function* () {
      const req = yield* decodeRequestOr400(SessionFinishRequest, "session_finish")(body)
      yield* ctx.registry.getSession(req.session_id)
      yield* Effect.logInfo(`session ${req.session_id} finished (${req.reason.type}${req.detail ? `: ${req.detail.slice(0, 200)}` : ""})`)
      return {}
    })

const createModel =
  (ctx: Routes): Handler =>
  (body) =>
    Effect.gen(function* () {
      const req = yield* decodeRequestOr400(Wire.CreateModelRequest, "create_model")(body)
      yield* ctx.registry.getSession(req.session_id)
      if (req.base_model !== ctx.modelName) {
        return yield* bad(`base_model ${JSON.stringify(req.base_model)} is not served here; this server serves ${JSON.stringify(ctx.modelName)}`)
      }
      // uninterruptible: a client that hangs up must not leave a half-built model behind
      const trains = yield* partsOf(req.lora_config)
      const model = yield* Effect.uninterruptible(ctx.registry.createModel(req.session_id, req.model_seq_id, req.lora_config?.rank, req.lora_config?.seed ?? undefined, trains))
      const id = yield* ctx.futures.start("CreateModel", Effect.succeed({ model_id: model.id, type: "create_model" }))
      return { request_id: id, model_id: model.id }
    })

const unloadModel =
  (ctx: Routes): Handler =>
  (body) =>
    Effect.gen(function* () {
      const req = yield* decodeRequestOr400(Wire.UnloadModelRequest, "unload_model")(body)
      yield* ctx.registry.unloadModel(req.model_id)
      const id = yield* ctx.futures.start("UnloadModel", Effect.succeed({ model_id: req.model_id, type: "unload_model" }))
      return { request_id: id, model_id: req.model_id }
    })

const getInfo =
  (ctx: Routes): Handler =>
  (body) =>
    Effect.gen(function* () {
      const req = yield* decodeRequestOr400(Wire.GetInfoRequest, "get_info")(body)
      const model = yield* ctx.registry.getModel(req.model_id)
      const info = yield* model.trainer.info.pipe(Effect.mapError(unavailable))
      return {
        type: "get_info",
        model_data: { arch: "gyre", model_name: ctx.modelName, ...(ctx.tokenizerId ? { tokenizer_id: ctx.tokenizerId } : {}) },
        model_id: req.model_id,
        is_lora: true,
        lora_rank: info.loraRank,
        model_name: ctx.modelName,
        policy_version: info.version,
        max_sequence_length: info.maxSequenceLength,
      }
    })

const forwardBackward =
  (ctx: Routes): Handler =>
  (body) =>
    Effect.suspend(() => {
      const { envelope, data } = splitData(body, "forward_backward_input")
      return Effect.flatMap(decodeRequestOr400(Wire.ForwardBackwardRequest, "forward_backward")(envelope), (req) => forwardLike(ctx, "forward_backward", req.forward_backward_input, data, req.model_id, req.seq_id))
    })

const forward =
  (ctx: Routes): Handler =>
  (body) =>
    Effect.suspend(() => {
      const { envelope, data } = splitData(body, "forward_input")
      return Effect.flatMap(decodeRequestOr400(Wire.ForwardRequest, "forward")(envelope), (req) => forwardLike(ctx, "forward", req.forward_input, data, req.model_id, req.seq_id))
    })

const optimStep =
  (ctx: Routes): Handler =>
  (body) =>
    Effect.gen(function* () {
      const req = yield* decodeRequestOr400(Wire.OptimStepRequest, "optim_step")(body)
      const decoded = Wire.adamParamsFromWire(req.adam_params)
      if (Result.isFailure(decoded)) return yield* bad(decoded.failure)
      const adam = decoded.success
      const model = yield* ctx.registry.getModel(req.model_id)
      return yield* trainingFuture(
        ctx,
        "OptimStep",
        model,
        req.seq_id,
        Effect.map(model.trainer.optimStep(adam), (r) => ({ type: "optim_step", metrics: Wire.metricsToWire(r.metrics), policy_version: r.version })),
      )
    })

const saveWeights =
  (ctx: Routes): Handler =>
  (body) =>
    Effect.gen(function* () {
      const req = yield* decodeRequestOr400(Wire.SaveWeightsRequest, "save_weights")(body)
      const name = req.path ?? `state-${req.seq_id}`
      yield* checkName(name, "path")
      const model = yield* ctx.registry.getModel(req.model_id)
      const uri = tinkerPath(req.model_id, "weights", name)
      return yield* trainingFuture(
        ctx,
        "SaveWeights",
        model,
        req.seq_id,
        Effect.gen(function* () {
          const r = yield* model.trainer.saveState(name)
          const info = yield* model.trainer.info
          yield* ctx.checkpoints.record({ tinker_path: uri, kind: "weights", model_id: model.id, name, file: r.path, base_model: ctx.modelName, lora_rank: model.loraRank, ...trainsOf(model), policy_version: info.version, loads: ctx.loads.get(model.id) ?? 0 })
          return { type: "save_weights", path: uri }
        }),
      )
    })

const saveWeightsForSampler =
  (ctx: Routes): Handler =>
  (body) =>
    Effect.gen(function* () {
      const req = yield* decodeRequestOr400(Wire.SaveWeightsForSamplerRequest, "save_weights_for_sampler")(body)
      const model = yield* ctx.registry.getModel(req.model_id)
      const name = req.path ?? `sampler-${req.seq_id}`
      yield* checkName(name, "path")
      const uri = tinkerPath(req.model_id, "sampler_weights", name)
      const session = yield* ctx.registry.getSession(model.sessionId)
      return yield* trainingFuture(
        ctx,
        "SaveWeightsForSampler",
        model,
        req.seq_id,
        Effect.gen(function* () {
          const r = yield* model.trainer.saveWeightsForSampler(name)
          const n = req.sampling_session_seq_id ?? session.samplers++
          const samplingSessionId = `${model.sessionId}:sample:${n}`
          yield* ctx.checkpoints.record({ tinker_path: uri, kind: "sampler_weights", model_id: model.id, name, base_model: ctx.modelName, lora_rank: model.loraRank, ...trainsOf(model), policy_version: r.version, loads: ctx.loads.get(model.id) ?? 0 })
          ctx.published(model, samplingSessionId, uri, r.version)
          yield* SubscriptionRef.update(model.sampler.published, (v) => Math.max(v, r.version))
          return { type: "save_weights_for_sampler", path: uri, sampling_session_id: samplingSessionId, policy_version: r.version }
        }),
        ctx.publishLatencyMillis,
      )
    })

const loadWeights =
  (ctx: Routes): Handler =>
  (body) =>
    Effect.gen(function* () {
      const req = yield* decodeRequestOr400(Wire.LoadWeightsRequest, "load_weights")(body)
      if (req.model_id === undefined || req.model_id === null || req.seq_id === undefined || req.seq_id === null) {
        return yield* bad("load_weights needs model_id and seq_id (create the model first; create-via-load is not supported)")
      }
      // only checkpoints named by this protocol: a client never names a file on this machine
      const name = /^tinker:\/\/([^/]+)\/weights\/([^/]+)$/.exec(req.path)?.[2]
      if (name === undefined) return yield* bad(`path ${JSON.stringify(req.path.slice(0, 200))} is not a training checkpoint: expected tinker://<model_id>/weights/<name>`)
      yield* checkName(name, "path's checkpoint name")
      const model = yield* ctx.registry.getModel(req.model_id)
      // a checkpoint this server saved (in this run or an earlier one), else the backend looks the name up
      const target = ctx.checkpoints.files.get(req.path) ?? name
      return yield* trainingFuture(
        ctx,
        "LoadWeights",
        model,
        req.seq_id,
        model.trainer.loadState(target, { withOptimizer: req.optimizer ?? false }).pipe(
          // counted also when it fails: a load that broke off may have changed some weights
          Effect.ensuring(Effect.sync(() => ctx.loads.set(model.id, (ctx.loads.get(model.id) ?? 0) + 1))),
          Effect.as({ type: "load_weights", path: req.path, model_id: model.id }),
        ),
      )
    })

/** @since 0.1.0 @category constructors */
export const make = (context: Context): Record<string, Handler> => {
  const ctx: Routes = { ...context, loads: new Map() }
  const ordered: Record<(typeof ORDERED)[number], Handler> = {
    forward_backward: forwardBackward(ctx),
    forward: forward(ctx),
    optim_step: optimStep(ctx),
    save_weights: saveWeights(ctx),
    save_weights_for_sampler: saveWeightsForSampler(ctx),
    load_weights: loadWeights(ctx),
  }
  return {
    create_session: createSession(ctx),
    session_heartbeat: sessionHeartbeat(ctx),
    session_finish: sessionFinish(ctx),
    create_model: createModel(ctx),
    unload_model: unloadModel(ctx),
    get_info: getInfo(ctx),
    ...Object.fromEntries(ORDERED.map((name) => [name, consumesSeq(ctx, ordered[name])])),
  }
}

/**
 * Serves any `Trainer | Sampler` over the Tinker wire protocol (JSON), so that the
 * HTTP client (or the Python SDK) can train and sample through it.
 *
 * - Every body is decoded with the Schemas of `Wire.ts`; bad input gets a 400 whose
 *   `detail` names the field (`forward_backward_input.data[2].loss_fn_inputs.advantages: ...`).
 *   Loss names and `loss_fn_config` keys are checked by `src/Loss.ts` before any work.
 * - Long operations answer `{request_id}` at once and run as futures; `retrieve_future`
 *   holds the poll up to `pollWait` and answers `try_again` if the work is not done.
 *   Futures are kept `futureTtl` after they finish; an unknown or expired id gets 410.
 *   A submission sent with `X-Gyre-Wait-Ms` is answered when its future is done (or
 *   that wait, capped at `pollWait`, ends), with the outcome in `result`.
 * - A submission with an `X-Idempotency-Key` already seen gets the first answer again
 *   (the same `request_id`), so a retried POST never runs twice. The same key with
 *   another body gets 422.
 * - Training calls of a model run strictly in `seq_id` order (1, 2, ...); a reused
 *   `seq_id` gets 400.
 * - Sampling goes to one of the sampler replicas, chosen by consistent hashing of
 *   `X-Affinity-Key` (round robin without one), and waits for `X-Min-Policy-Version`.
 *   Requests reaching a replica within `sampleGather` are handed over together, so a
 *   batching sampler decodes a step's groups as one batch.
 * - Policy versions: `optim_step`, `save_weights_for_sampler`, `asample`, `get_info` and
 *   `GET samplers/{id}` answer a `policy_version` field: the number of optimizer steps
 *   behind the weights. A sampling session id names the version it was published at.
 *
 * One server hosts one training run: every `create_model` attaches to the trainer it
 * was given (base model and LoRA rank must match).
 *
 * @since 0.1.0
 */
import { NodeHttpServer } from "@effect/platform-node"
import {
  ByteSize,
  Context,
  Data,
  Deferred,
  Duration,
  Effect,
  HashRing,
  Layer,
  Option,
  PrimaryKey,
  Redacted,
  Result,
  Schema,
} from "effect"
import { HttpIncomingMessage, HttpServerRequest, HttpServerResponse } from "effect/http"
import { createHash, timingSafeEqual } from "node:crypto"
import { createServer } from "node:http"
import {
  AdamParams as AdamParamsSchema,
  adamParams,
  BackendError,
  type Datum,
  type LossFn,
  type SamplingParams,
} from "../../Contract.ts"
import { LOSS_INPUTS, resolveLoss } from "../../Loss.ts"
import { Sampler, type SamplerShape } from "../../Sampler.ts"
import { Trainer, type TrainerShape } from "../../Trainer.ts"
import * as Alignment from "./Alignment.ts"
import * as Wire from "./Wire.ts"

/** @since 0.1.0 @category models */
export interface Options {
  /** 0 (the default) picks a free port */
  readonly port?: number | undefined
  /** default 127.0.0.1 */
  readonly host?: string | undefined
  /** sampler replicas; default one, the `Sampler` service */
  readonly replicas?: ReadonlyArray<SamplerShape> | undefined
  /** the base model name clients must ask for; default the trainer's `modelName` */
  readonly modelName?: string | undefined
  /** reported by `get_info` */
  readonly tokenizerId?: string | undefined
  /** token ids must be below it (unchecked when absent) */
  readonly vocabSize?: number | undefined
  /** when set, every request but `healthz` must carry it as `X-API-Key` */
  readonly apiKey?: Redacted.Redacted<string> | undefined
  /** how long `retrieve_future` holds a poll (default 20 s) */
  readonly pollWait?: Duration.Input | undefined
  /** how long finished futures and idempotency keys are kept (default 15 min) */
  readonly futureTtl?: Duration.Input | undefined
  /** largest request body (default 64 MiB) */
  readonly maxBodyBytes?: number | undefined
  /** most datums in one forward(_backward) (default 4096) */
  readonly maxDatums?: number | undefined
  /** most samples in one `asample` (default 256) */
  readonly maxSamples?: number | undefined
  /** how long a training call waits for the calls with smaller seq ids (default 10 min) */
  readonly turnTimeout?: Duration.Input | undefined
  /**
   * sampling requests reaching a replica together are handed to it together, so that a
   * sampler that batches concurrent requests (the embedded one does) sees the whole
   * burst of a step: a window closes `sampleGatherQuiet` after its last arrival and at
   * most `sampleGather` after its first (defaults 3 ms and 10 ms; 0 hands each request
   * over at once)
   */
  readonly sampleGather?: Duration.Input | undefined
  readonly sampleGatherQuiet?: Duration.Input | undefined
}

/** Counters for tests and logs. @since 0.1.0 @category models */
export interface Stats {
  /** HTTP requests answered */
  requests: number
  /** submissions that started work */
  submissions: number
  /** submissions answered from the idempotency cache */
  deduplicated: number
  /** operations run on the backend, by request type */
  readonly executed: Record<string, number>
  /** samples served by each replica */
  readonly replicaRequests: Array<number>
}

/** A running server. @since 0.1.0 @category models */
export interface Handle {
  readonly url: string
  readonly port: number
  readonly stats: Stats
  /** the replica an affinity key is routed to */
  readonly route: (affinityKey: string) => number
}

class Reject extends Data.TaggedError("Reject")<{ readonly status: number; readonly message: string }> {}

interface Reply {
  readonly status: number
  readonly body: unknown
}

interface FutureEntry {
  readonly type: Wire.RequestType
  readonly result: Deferred.Deferred<Reply>
  doneAt: number | undefined
}

interface IdempotencyEntry {
  readonly hash: string
  readonly reply: Deferred.Deferred<Reply>
  readonly at: number
  requestId: string | undefined
}

interface ModelState {
  readonly sessionId: string
  nextSeq: number
  readonly pending: Set<number>
  readonly turns: Map<number, Deferred.Deferred<void>>
}

interface SamplingSession {
  readonly version: number
  readonly modelPath: string | undefined
}

class ReplicaNode implements PrimaryKey.PrimaryKey {
  constructor(readonly index: number) {}
  [PrimaryKey.symbol]() {
    return `replica-${this.index}`
  }
}

/** Consistent hashing of affinity keys onto `n` replicas (128 virtual points each). @since 0.1.0 @category constructors */
export const makeRouter = (n: number): ((key: string) => number) => {
  const ring = HashRing.make<ReplicaNode>()
  HashRing.addMany(ring, Array.from({ length: n }, (_, i) => new ReplicaNode(i)))
  // the ring's own string hash clusters short similar keys ("g1", "g2", ...): spread them first
  return (key) => HashRing.get(ring, createHash("sha1").update(key).digest("hex").slice(0, 16))?.index ?? 0
}

/** SchemaError text -> `path: message`, with the path in dotted form under `prefix`. */
const formatIssue = (message: string, prefix: string): string => {
  const lines = message.split("\n")
  const at = lines.findIndex((l) => /^\s*at \[/.test(l))
  const dotted = (raw: string) =>
    raw
      .trim()
      .replace(/^at /, "")
      .replace(/\["([^"]*)"\]/g, (_, k: string) => `.${k}`)
      .replace(/^\./, "")
  if (at < 0) return prefix === "" ? message : `${prefix}: ${message}`
  const path = dotted(lines[at]!)
  const full = prefix === "" ? path : path === "" ? prefix : `${prefix}.${path}`
  const text = lines.filter((_, i) => i !== at).join(" ").trim()
  return `${full === "" ? "body" : full}: ${text}`
}

const decodeOr400 = <S extends Schema.Top>(schema: S, prefix = "") => {
  const decode = Schema.decodeUnknownResult(schema as unknown as Schema.Codec<S["Type"], unknown>)
  return (value: unknown): Effect.Effect<S["Type"], Reject> => {
    const r = decode(value)
    return Result.isSuccess(r) ? Effect.succeed(r.success) : Effect.fail(new Reject({ status: 400, message: formatIssue(r.failure.message, prefix) }))
  }
}

const bad = (message: string) => new Reject({ status: 400, message })

const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/

const checkName = (name: string, field: string) =>
  NAME.test(name) ? Effect.void : Effect.fail(bad(`${field} ${JSON.stringify(name.slice(0, 80))} is not a valid name: use 1-128 letters, digits, '.', '_' or '-'`))

const categoryOf = (reason: BackendError["reason"]): "user" | "server" => (reason === "InvalidInput" || reason === "Rejected" ? "user" : "server")

const futureFailure = (e: BackendError) => ({ error: `${e.operation}: ${e.message}`, category: categoryOf(e.reason), reason: e.reason })

/**
 * Checks wire datums with wire field names (the backend checks again after the
 * conversion): token ids, required and known inputs, value ranges.
 */
const checkWireData = (
  data: ReadonlyArray<Wire.Datum>,
  lossFn: LossFn,
  at: string,
  limits: { readonly vocabSize: number | undefined; readonly maxLength: number },
): string | undefined => {
  const spec = LOSS_INPUTS[lossFn]
  const allowed = new Set(["target_tokens", ...spec.required, ...spec.optional])
  for (let d = 0; d < data.length; d++) {
    const datum = data[d]!
    const where = `${at}[${d}]`
    const tokens = datum.model_input.chunks.flatMap((c) => c.tokens)
    if (tokens.length + 1 > limits.maxLength) {
      return `${where}.model_input has ${tokens.length} tokens; with its last target that exceeds the context length ${limits.maxLength}`
    }
    for (let i = 0; i < tokens.length; i++) {
      const t = tokens[i]!
      if (t < 0 || (limits.vocabSize !== undefined && t >= limits.vocabSize)) {
        return `${where}.model_input token ${i} is ${t}, outside the vocabulary [0, ${limits.vocabSize ?? "?"})`
      }
    }
    for (const key of spec.required) {
      if (datum.loss_fn_inputs[key] === undefined) return `${where}.loss_fn_inputs.${key} is missing; ${lossFn} needs ${spec.required.join(" and ")}`
    }
    for (const [key, tensor] of Object.entries(datum.loss_fn_inputs)) {
      const field = `${where}.loss_fn_inputs.${key}`
      if (!allowed.has(key)) return `${field} is not an input of ${lossFn}; allowed: ${[...allowed].join(", ")}`
      for (let i = 0; i < tensor.data.length; i++) {
        const v = tensor.data[i]!
        if (key === "target_tokens" && v !== -100 && limits.vocabSize !== undefined && v >= limits.vocabSize) {
          return `${field}[${i}] is ${v}, outside the vocabulary [0, ${limits.vocabSize})`
        }
        if (key === "logprobs" && v > 1e-6) return `${field}[${i}] is ${v}; a log-probability must be <= 0`
        if (key === "weights" && v < 0) return `${field}[${i}] is ${v}; weights must be >= 0`
      }
    }
  }
  return undefined
}

const samplingParamsFromWire = (p: Wire.SamplingParams, maxLength: number): Result.Result<SamplingParams, string> => {
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

const sha256 = (text: string) => createHash("sha256").update(text).digest("hex")

const sameKey = (given: string, expected: string) => {
  const a = Buffer.from(given)
  const b = Buffer.from(expected)
  return a.length === b.length && timingSafeEqual(a, b)
}

/**
 * Starts the server on the trainer and sampler in context; it stops when the scope
 * closes.
 * @since 0.1.0 @category constructors
 */
export const make = Effect.fn("HttpServer.make")(function* (options: Options = {}) {
  const trainer: TrainerShape = yield* Trainer
  const defaultSampler = yield* Sampler
  const replicas = options.replicas !== undefined && options.replicas.length > 0 ? options.replicas : [defaultSampler]
  const info0 = yield* trainer.info
  const modelName = options.modelName ?? info0.modelName
  const maxLength = info0.maxSequenceLength > 0 ? info0.maxSequenceLength : Number.MAX_SAFE_INTEGER
  const pollWait = options.pollWait ?? "20 seconds"
  const ttl = Duration.toMillis(options.futureTtl ?? "15 minutes")
  const maxDatums = options.maxDatums ?? 4096
  const maxSamples = options.maxSamples ?? 256
  const maxBody = options.maxBodyBytes ?? 64 * 1024 * 1024
  const turnTimeout = options.turnTimeout ?? "10 minutes"
  const route = makeRouter(replicas.length)
  const gatherMillis = Duration.toMillis(options.sampleGather ?? "10 millis")
  const quietMillis = Math.min(Duration.toMillis(options.sampleGatherQuiet ?? "3 millis"), gatherMillis)
  const windows: Array<{ readonly first: number; last: number; count: number; readonly closed: Deferred.Deferred<void> } | undefined> = replicas.map(
    () => undefined,
  )
  const scope = yield* Effect.scope

  const stats: Stats = { requests: 0, submissions: 0, deduplicated: 0, executed: {}, replicaRequests: replicas.map(() => 0) }
  const futures = new Map<string, FutureEntry>()
  const idempotency = new Map<string, IdempotencyEntry>()
  const sessions = new Map<string, { lastSeen: number; samplers: number }>()
  const models = new Map<string, ModelState>()
  const samplingSessions = new Map<string, SamplingSession>()
  const checkpoints = new Map<string, string>()
  const samplerPaths = new Map<string, number>()
  let counter = 0
  let roundRobin = 0
  const newId = (prefix: string) => `${prefix}-${(++counter).toString(36)}-${globalThis.crypto.randomUUID().slice(0, 8)}`
  const now = Effect.clockWith((c) => c.currentTimeMillis).pipe(Effect.map(Number))

  // --- futures -------------------------------------------------------------
  const startFuture = (type: Wire.RequestType, work: Effect.Effect<unknown, BackendError>) =>
    Effect.gen(function* () {
      const id = newId("req")
      const result = yield* Deferred.make<Reply>()
      const entry: FutureEntry = { type, result, doneAt: undefined }
      futures.set(id, entry)
      stats.submissions++
      const run = work.pipe(
        Effect.map((body): Reply => ({ status: 200, body })),
        Effect.catchTag("BackendError", (e) => Effect.succeed<Reply>({ status: 200, body: futureFailure(e) })),
        Effect.catchCause((cause) =>
          Effect.as(Effect.logError(`${type} failed`, cause), { status: 200, body: { error: `${type}: internal error`, category: "server", reason: "Internal" } } as Reply),
        ),
        Effect.tap(() => Effect.sync(() => (stats.executed[type] = (stats.executed[type] ?? 0) + 1))),
        Effect.flatMap((reply) => Effect.flatMap(now, (t) => Effect.sync(() => (entry.doneAt = t)).pipe(Effect.andThen(Deferred.succeed(result, reply))))),
      )
      yield* Effect.forkIn(run, scope, { startImmediately: true })
      return id
    })

  /**
   * Waits for the replica's current gather window to close, opening one if none is
   * open. A window closes `sampleGatherQuiet` after its last arrival, and at most
   * `sampleGather` after its first.
   */
  const gather = (index: number) =>
    Effect.gen(function* () {
      if (gatherMillis <= 0) return
      const t = yield* now
      let window = windows[index]
      if (window !== undefined) {
        window.last = t
        window.count++
        return yield* Deferred.await(window.closed)
      }
      const opened = { first: t, last: t, count: 1, closed: yield* Deferred.make<void>() }
      windows[index] = opened
      const wait: Effect.Effect<void> = Effect.gen(function* () {
        const due = Math.min(opened.first + gatherMillis, opened.last + quietMillis)
        const remaining = due - (yield* now)
        if (remaining > 0) {
          yield* Effect.sleep(Duration.millis(remaining))
          return yield* wait
        }
      })
      yield* Effect.forkIn(
        wait.pipe(
          Effect.andThen(Effect.sync(() => (windows[index] = undefined))),
          Effect.andThen(Effect.suspend(() => Effect.logDebug(`replica ${index}: ${opened.count} sampling request(s) gathered`))),
          Effect.andThen(Deferred.succeed(opened.closed, undefined)),
        ),
        scope,
        { startImmediately: true },
      )
      yield* Deferred.await(opened.closed)
    })

  const sweep = Effect.gen(function* () {
    const t = yield* now
    for (const [id, f] of futures) if (f.doneAt !== undefined && t - f.doneAt > ttl) futures.delete(id)
    for (const [key, e] of idempotency) {
      if (e.requestId !== undefined ? !futures.has(e.requestId) : t - e.at > ttl) idempotency.delete(key)
    }
  })
  yield* Effect.forkIn(sweep.pipe(Effect.delay(Duration.millis(Math.max(1000, Math.min(60_000, ttl / 4)))), Effect.forever), scope)

  // --- ordering ------------------------------------------------------------
  const claimSeq = (model: ModelState, seq: number, field: string) =>
    Effect.suspend(() => {
      if (seq < model.nextSeq || model.pending.has(seq)) {
        return Effect.fail(bad(`${field} ${seq} was already used by another request of this model (next free: ${Math.max(model.nextSeq, ...model.pending) + 1})`))
      }
      model.pending.add(seq)
      return Effect.void
    })

  const inTurn = <A>(model: ModelState, seq: number, work: Effect.Effect<A, BackendError>) =>
    Effect.gen(function* () {
      if (model.nextSeq !== seq) {
        let turn = model.turns.get(seq)
        if (turn === undefined) {
          turn = yield* Deferred.make<void>()
          model.turns.set(seq, turn)
        }
        const waited = yield* Deferred.await(turn).pipe(Effect.timeoutOption(turnTimeout))
        if (Option.isNone(waited)) {
          return yield* new BackendError({
            reason: "Rejected",
            operation: "seq_id",
            message: `seq_id ${seq} waited ${Duration.format(Duration.fromInputUnsafe(turnTimeout))} for seq_id ${model.nextSeq}, which never arrived`,
          })
        }
      }
      return yield* work.pipe(
        Effect.ensuring(
          Effect.suspend(() => {
            model.pending.delete(seq)
            model.turns.delete(seq)
            model.nextSeq = seq + 1
            const next = model.turns.get(seq + 1)
            return next === undefined ? Effect.void : Deferred.succeed(next, undefined)
          }),
        ),
      )
    })

  const getModel = (modelId: string, field = "model_id") =>
    Effect.suspend(() => {
      const m = models.get(modelId)
      return m === undefined ? Effect.fail(new Reject({ status: 404, message: `${field} ${JSON.stringify(modelId)} is unknown; call create_model first` })) : Effect.succeed(m)
    })

  const trainingFuture = (
    type: Wire.RequestType,
    modelId: string,
    seq: number,
    work: Effect.Effect<unknown, BackendError>,
  ) =>
    Effect.gen(function* () {
      const model = yield* getModel(modelId)
      yield* claimSeq(model, seq, "seq_id")
      const id = yield* startFuture(type, inTurn(model, seq, work))
      return { request_id: id, model_id: modelId }
    })

  const tinkerPath = (modelId: string, kind: "weights" | "sampler_weights", name: string) => `tinker://${modelId}/${kind}/${name}`

  // --- endpoints -----------------------------------------------------------
  const lossOf = (lossFn: string, config: Readonly<Record<string, number>> | null | undefined, at: string) => {
    const r = resolveLoss(lossFn, config ?? undefined)
    return r.ok ? Effect.succeed(r.value.lossFn) : Effect.fail(bad(`${at}: ${r.message}`))
  }

  const forwardLike = (kind: "forward_backward" | "forward", input: Wire.ForwardBackwardInput, modelId: string, seq: number) =>
    Effect.gen(function* () {
      const at = kind === "forward" ? "forward_input" : "forward_backward_input"
      const lossFn = yield* lossOf(input.loss_fn, input.loss_fn_config, `${at}.loss_fn`)
      if (input.data.length === 0) return yield* bad(`${at}.data is empty: send at least one datum`)
      if (input.data.length > maxDatums) return yield* bad(`${at}.data has ${input.data.length} datums; at most ${maxDatums} per request`)
      if (input.top_k_logprobs !== undefined && input.top_k_logprobs > 20) {
        return yield* bad(`${at}.top_k_logprobs is ${input.top_k_logprobs}; at most 20`)
      }
      const problem = checkWireData(input.data, lossFn, `${at}.data`, { vocabSize: options.vocabSize, maxLength })
      if (problem !== undefined) return yield* bad(problem)
      const data: Array<Datum> = []
      for (let i = 0; i < input.data.length; i++) {
        const r = Alignment.datumFromWire(input.data[i]!, lossFn, `${at}.data[${i}]`)
        if (Result.isFailure(r)) return yield* bad(r.failure)
        data.push(r.success)
      }
      const opts = {
        ...(input.loss_fn_config ? { lossFnConfig: input.loss_fn_config } : {}),
        ...(input.top_k_logprobs !== undefined ? { topKLogprobs: input.top_k_logprobs } : {}),
      }
      const work = (kind === "forward" ? trainer.forward(data, lossFn, opts) : trainer.forwardBackward(data, lossFn, opts)).pipe(
        Effect.map((r) => ({
          loss_fn_output_type: "ArrayRecord",
          loss_fn_outputs: r.lossFnOutputs.map(Alignment.outputToWire),
          metrics: Wire.metricsToWire(r.metrics),
        })),
      )
      return yield* trainingFuture(kind === "forward" ? "Forward" : "ForwardBackward", modelId, seq, work)
    })

  const minReplicaVersion = Effect.map(
    Effect.forEach(replicas, (r) => r.version, { concurrency: "unbounded" }),
    (vs) => Math.min(...vs),
  )

  type Handler = (body: unknown, req: HttpServerRequest.HttpServerRequest) => Effect.Effect<unknown, Reject>

  const post: Record<string, Handler> = {
    "client/config": () =>
      Effect.succeed({
        pjwt_auth_enabled: false,
        parallel_fwdbwd_chunks: false,
        proto_compress_fwdbwd: false,
        use_pyqwest_transport: false,
        create_model_via_load_weights: false,
      }),
    create_session: (body) =>
      Effect.gen(function* () {
        yield* decodeOr400(Wire.CreateSessionRequest)(body)
        const id = newId("session")
        sessions.set(id, { lastSeen: yield* now, samplers: 0 })
        return { type: "create_session", session_id: id }
      }),
    session_heartbeat: (body) =>
      Effect.gen(function* () {
        const req = yield* decodeOr400(Wire.SessionHeartbeatRequest)(body)
        const s = sessions.get(req.session_id)
        if (s === undefined) return yield* new Reject({ status: 404, message: `session_id ${JSON.stringify(req.session_id)} is unknown` })
        s.lastSeen = yield* now
        return { type: "session_heartbeat" }
      }),
    create_model: (body) =>
      Effect.gen(function* () {
        const req = yield* decodeOr400(Wire.CreateModelRequest)(body)
        if (!sessions.has(req.session_id)) return yield* new Reject({ status: 404, message: `session_id ${JSON.stringify(req.session_id)} is unknown` })
        if (req.base_model !== modelName) {
          return yield* bad(`base_model ${JSON.stringify(req.base_model)} is not served here; this server serves ${JSON.stringify(modelName)}`)
        }
        const info = yield* trainer.info.pipe(Effect.mapError((e) => new Reject({ status: 503, message: e.message })))
        if (req.lora_config && req.lora_config.rank !== info.loraRank) {
          return yield* bad(`lora_config.rank ${req.lora_config.rank} does not match the served adapter's rank ${info.loraRank}`)
        }
        const modelId = `${req.session_id}:train:${req.model_seq_id}`
        if (!models.has(modelId)) models.set(modelId, { sessionId: req.session_id, nextSeq: 1, pending: new Set(), turns: new Map() })
        const id = yield* startFuture("CreateModel", Effect.succeed({ model_id: modelId, type: "create_model" }))
        return { request_id: id, model_id: modelId }
      }),
    get_info: (body) =>
      Effect.gen(function* () {
        const req = yield* decodeOr400(Wire.GetInfoRequest)(body)
        yield* getModel(req.model_id)
        const info = yield* trainer.info.pipe(Effect.mapError((e) => new Reject({ status: 503, message: e.message })))
        return {
          type: "get_info",
          model_data: { arch: "gyre", model_name: modelName, ...(options.tokenizerId ? { tokenizer_id: options.tokenizerId } : {}) },
          model_id: req.model_id,
          is_lora: true,
          lora_rank: info.loraRank,
          model_name: modelName,
          policy_version: info.version,
          max_sequence_length: info.maxSequenceLength,
        }
      }),
    forward_backward: (body) =>
      Effect.flatMap(decodeOr400(Wire.ForwardBackwardRequest)(body), (req) =>
        forwardLike("forward_backward", req.forward_backward_input, req.model_id, req.seq_id),
      ),
    forward: (body) => Effect.flatMap(decodeOr400(Wire.ForwardRequest)(body), (req) => forwardLike("forward", req.forward_input, req.model_id, req.seq_id)),
    optim_step: (body) =>
      Effect.gen(function* () {
        const req = yield* decodeOr400(Wire.OptimStepRequest)(body)
        const given = Object.fromEntries(Object.entries(req.adam_params).filter(([, v]) => v !== undefined))
        const adam = yield* decodeOr400(AdamParamsSchema, "adam_params")(adamParams(given))
        return yield* trainingFuture(
          "OptimStep",
          req.model_id,
          req.seq_id,
          Effect.map(trainer.optimStep(adam), (r) => ({ type: "optim_step", metrics: Wire.metricsToWire(r.metrics), policy_version: r.version })),
        )
      }),
    save_weights: (body) =>
      Effect.gen(function* () {
        const req = yield* decodeOr400(Wire.SaveWeightsRequest)(body)
        const name = req.path ?? `state-${req.seq_id}`
        yield* checkName(name, "path")
        const uri = tinkerPath(req.model_id, "weights", name)
        return yield* trainingFuture(
          "SaveWeights",
          req.model_id,
          req.seq_id,
          Effect.map(trainer.saveState(name), (r) => {
            checkpoints.set(uri, r.path)
            return { type: "save_weights", path: uri }
          }),
        )
      }),
    save_weights_for_sampler: (body) =>
      Effect.gen(function* () {
        const req = yield* decodeOr400(Wire.SaveWeightsForSamplerRequest)(body)
        const model = yield* getModel(req.model_id)
        const name = req.path ?? `sampler-${req.seq_id}`
        yield* checkName(name, "path")
        const uri = tinkerPath(req.model_id, "sampler_weights", name)
        const session = sessions.get(model.sessionId)
        return yield* trainingFuture(
          "SaveWeightsForSampler",
          req.model_id,
          req.seq_id,
          Effect.map(trainer.saveWeightsForSampler(name), (r) => {
            const n = req.sampling_session_seq_id ?? (session ? session.samplers++ : 0)
            const samplingSessionId = `${model.sessionId}:sample:${n}`
            samplingSessions.set(samplingSessionId, { version: r.version, modelPath: uri })
            samplerPaths.set(uri, r.version)
            return { type: "save_weights_for_sampler", path: uri, sampling_session_id: samplingSessionId, policy_version: r.version }
          }),
        )
      }),
    load_weights: (body) =>
      Effect.gen(function* () {
        const req = yield* decodeOr400(Wire.LoadWeightsRequest)(body)
        if (req.model_id === undefined || req.model_id === null || req.seq_id === undefined || req.seq_id === null) {
          return yield* bad("load_weights needs model_id and seq_id (create the model first; create-via-load is not supported)")
        }
        // only checkpoints named by this protocol: a client never names a file on this machine
        const parsed = /^tinker:\/\/([^/]+)\/weights\/([^/]+)$/.exec(req.path)
        if (parsed === null) return yield* bad(`path ${JSON.stringify(req.path.slice(0, 200))} is not a training checkpoint: expected tinker://<model_id>/weights/<name>`)
        yield* checkName(parsed[2]!, "path's checkpoint name")
        // a checkpoint saved by this server process, else the backend looks the name up (e.g. after a restart)
        const target = checkpoints.get(req.path) ?? parsed[2]!
        const modelId = req.model_id
        return yield* trainingFuture(
          "LoadWeights",
          modelId,
          req.seq_id,
          Effect.as(trainer.loadState(target, { withOptimizer: req.optimizer ?? false }), {
            type: "load_weights",
            path: req.path,
            model_id: modelId,
          }),
        )
      }),
    create_sampling_session: (body) =>
      Effect.gen(function* () {
        const req = yield* decodeOr400(Wire.CreateSamplingSessionRequest)(body)
        if (!sessions.has(req.session_id)) return yield* new Reject({ status: 404, message: `session_id ${JSON.stringify(req.session_id)} is unknown` })
        let version = 0
        if (req.model_path !== undefined && req.model_path !== null) {
          const v = samplerPaths.get(req.model_path)
          if (v === undefined) return yield* new Reject({ status: 404, message: `model_path ${JSON.stringify(req.model_path)} is not a sampler checkpoint of this server` })
          version = v
        } else if (req.base_model !== undefined && req.base_model !== null && req.base_model !== modelName) {
          return yield* bad(`base_model ${JSON.stringify(req.base_model)} is not served here; this server serves ${JSON.stringify(modelName)}`)
        }
        const id = `${req.session_id}:sample:${req.sampling_session_seq_id}`
        samplingSessions.set(id, { version, modelPath: req.model_path ?? undefined })
        return { type: "create_sampling_session", sampling_session_id: id }
      }),
    asample: (body, httpReq) =>
      Effect.gen(function* () {
        const req = yield* decodeOr400(Wire.SampleRequest)(body)
        const headers = yield* decodeOr400(Wire.SampleHeaders, "headers")({
          [Wire.Headers.minPolicyVersion]: httpReq.headers[Wire.Headers.minPolicyVersion],
          [Wire.Headers.affinityKey]: httpReq.headers[Wire.Headers.affinityKey],
        })
        const numSamples = req.num_samples ?? 1
        if (numSamples < 1 || numSamples > maxSamples) return yield* bad(`num_samples is ${numSamples}; it must be in [1, ${maxSamples}]`)
        if ((req.topk_prompt_logprobs ?? 0) !== 0) return yield* bad("topk_prompt_logprobs is not supported by this server; send 0")
        const params = samplingParamsFromWire(req.sampling_params, maxLength)
        if (Result.isFailure(params)) return yield* bad(params.failure)
        const tokens = req.prompt.chunks.flatMap((c) => c.tokens)
        if (tokens.length === 0) return yield* bad("prompt is empty")
        if (tokens.length > maxLength) return yield* bad(`prompt has ${tokens.length} tokens, more than the context length ${maxLength}`)
        for (let i = 0; i < tokens.length; i++) {
          const t = tokens[i]!
          if (t < 0 || (options.vocabSize !== undefined && t >= options.vocabSize)) {
            return yield* bad(`prompt token ${i} is ${t}, outside the vocabulary [0, ${options.vocabSize ?? "?"})`)
          }
        }
        let minVersion = headers[Wire.Headers.minPolicyVersion]
        if (req.sampling_session_id !== undefined && req.sampling_session_id !== null) {
          const s = samplingSessions.get(req.sampling_session_id)
          if (s === undefined) return yield* new Reject({ status: 404, message: `sampling_session_id ${JSON.stringify(req.sampling_session_id)} is unknown` })
          minVersion = Math.max(minVersion ?? 0, s.version)
        } else if (req.model_path !== undefined && req.model_path !== null) {
          const v = samplerPaths.get(req.model_path)
          if (v === undefined) return yield* new Reject({ status: 404, message: `model_path ${JSON.stringify(req.model_path)} is not a sampler checkpoint of this server` })
          minVersion = Math.max(minVersion ?? 0, v)
        } else if (req.base_model !== undefined && req.base_model !== null) {
          if (req.base_model !== modelName) {
            return yield* bad(`base_model ${JSON.stringify(req.base_model)} is not served here; this server serves ${JSON.stringify(modelName)}`)
          }
        } else {
          return yield* bad("asample needs sampling_session_id, model_path or base_model")
        }
        const key = headers[Wire.Headers.affinityKey]
        const index = key !== undefined ? route(key) : roundRobin++ % replicas.length
        stats.replicaRequests[index]!++
        const replica = replicas[index]!
        const promptLogprobs = req.prompt_logprobs === true
        const work = Effect.map(
          Effect.andThen(gather(index), replica.sample({ chunks: [{ type: "encoded_text", tokens }] }, params.success, {
            numSamples,
            ...(key !== undefined ? { affinityKey: key } : {}),
            ...(minVersion !== undefined ? { minPolicyVersion: minVersion } : {}),
            ...(promptLogprobs ? { includePromptLogprobs: true } : {}),
          })),
          (r) => ({
            type: "sample",
            sequences: r.sequences.map((s) => ({ stop_reason: s.stopReason, tokens: s.tokens, logprobs: s.logprobs })),
            ...(promptLogprobs && r.promptLogprobs !== undefined ? { prompt_logprobs: Alignment.promptLogprobsToWire(r.promptLogprobs) } : {}),
            policy_version: r.policyVersion,
          }),
        )
        const id = yield* startFuture("Sample", work)
        return { request_id: id }
      }),
    retrieve_future: (body) =>
      Effect.gen(function* () {
        const req = yield* decodeOr400(Wire.RetrieveFutureRequest)(body)
        const entry = futures.get(req.request_id)
        if (entry === undefined) {
          return yield* new Reject({ status: 410, message: `request_id ${JSON.stringify(req.request_id.slice(0, 100))} is unknown or expired; resubmit the request` })
        }
        const reply = yield* Deferred.await(entry.result).pipe(Effect.timeoutOption(pollWait))
        return Option.isSome(reply) ? reply.value.body : { type: "try_again", request_id: req.request_id, queue_state: "active" }
      }),
  }

  const get: Record<string, (path: string) => Effect.Effect<unknown, Reject>> = {
    healthz: () => Effect.succeed({ status: "ok" }),
    get_server_capabilities: () => Effect.succeed({ supported_models: [{ model_name: modelName, max_context_length: info0.maxSequenceLength }] }),
  }

  const samplerInfo = (id: string) =>
    Effect.gen(function* () {
      const s = samplingSessions.get(id)
      if (s === undefined && id !== modelName) return yield* new Reject({ status: 404, message: `sampler ${JSON.stringify(id.slice(0, 100))} is unknown` })
      const version = yield* minReplicaVersion.pipe(Effect.mapError((e) => new Reject({ status: 503, message: e.message })))
      return { sampler_id: id, base_model: modelName, ...(s?.modelPath ? { model_path: s.modelPath } : {}), policy_version: version }
    })

  const json = (status: number, body: unknown) => HttpServerResponse.jsonUnsafe(body, { status })

  const readJson = (req: HttpServerRequest.HttpServerRequest) =>
    Effect.gen(function* () {
      const length = Number(req.headers["content-length"] ?? "0")
      if (length > maxBody) return yield* new Reject({ status: 413, message: `the body has ${length} bytes; at most ${maxBody}` })
      const text = yield* req.text.pipe(
        Effect.provideService(HttpIncomingMessage.MaxBodySize, ByteSize.bytes(maxBody)),
        Effect.mapError((e) =>
          e.reason._tag === "RequestParseError" && e.reason.reason === "BodyTooLarge"
            ? new Reject({ status: 413, message: `the body is larger than ${maxBody} bytes` })
            : new Reject({ status: 400, message: "the body could not be read" }),
        ),
      )
      if (text.trim() === "") return { text, value: {} as unknown }
      const parsed = Result.try(() => JSON.parse(text) as unknown)
      if (Result.isFailure(parsed)) {
        return yield* bad(`the body is not valid JSON: ${parsed.failure instanceof Error ? parsed.failure.message : String(parsed.failure)}`)
      }
      return { text, value: parsed.success }
    })

  /** Runs a POST handler once per idempotency key; a repeat gets the first reply. */
  const withIdempotency = (key: string | undefined, bodyText: string, run: Effect.Effect<Reply>) =>
    Effect.gen(function* () {
      if (key === undefined || key === "") return yield* run
      if (key.length > 256) return { status: 400, body: { detail: "X-Idempotency-Key is longer than 256 characters" } }
      const hash = sha256(bodyText)
      const existing = idempotency.get(key)
      if (existing !== undefined) {
        if (existing.hash !== hash) {
          return { status: 422, body: { detail: "X-Idempotency-Key was already used with a different body" } }
        }
        stats.deduplicated++
        return yield* Deferred.await(existing.reply)
      }
      const entry: IdempotencyEntry = { hash, reply: yield* Deferred.make<Reply>(), at: yield* now, requestId: undefined }
      idempotency.set(key, entry)
      // uninterruptible: a client that hangs up must not leave started work without a cached reply
      const reply = yield* Effect.uninterruptible(run)
      const b = reply.body
      if (reply.status === 200 && typeof b === "object" && b !== null && "request_id" in b && typeof b.request_id === "string") {
        entry.requestId = b.request_id
      }
      // a rejected request may be fixed and sent again with the same key
      if (reply.status >= 400) idempotency.delete(key)
      yield* Deferred.succeed(entry.reply, reply)
      return reply
    })

  /** With `X-Gyre-Wait-Ms`: holds a submission's answer until its future is done (or the wait ends) and puts the outcome in it. */
  const withResult = (reply: Reply, waitMillis: number): Effect.Effect<Reply> =>
    Effect.gen(function* () {
      const b = reply.body
      if (waitMillis <= 0 || reply.status !== 200 || typeof b !== "object" || b === null || !("request_id" in b) || typeof b.request_id !== "string") {
        return reply
      }
      const entry = futures.get(b.request_id)
      if (entry === undefined) return reply
      const done = yield* Deferred.await(entry.result).pipe(Effect.timeoutOption(Duration.millis(waitMillis)))
      return Option.isSome(done) ? { status: 200, body: { ...b, result: done.value.body } } : reply
    })

  const authorized = (req: HttpServerRequest.HttpServerRequest) =>
    options.apiKey === undefined || sameKey(String(req.headers[Wire.Headers.apiKey] ?? ""), Redacted.value(options.apiKey))

  const toReply = (e: Effect.Effect<unknown, Reject>): Effect.Effect<Reply> =>
    e.pipe(
      Effect.map((body): Reply => ({ status: 200, body })),
      Effect.catchTag("Reject", (r) => Effect.succeed<Reply>({ status: r.status, body: { detail: r.message } })),
    )

  const app = Effect.gen(function* () {
    const req = yield* HttpServerRequest.HttpServerRequest
    const started = yield* now
    stats.requests++
    const parsedUrl = Result.try(() => new URL(req.url, "http://localhost"))
    const path = Result.isSuccess(parsedUrl) ? parsedUrl.success.pathname : ""
    const reply: Reply = yield* Effect.gen(function* () {
      if (Result.isFailure(parsedUrl)) return { status: 400, body: { detail: "the request URL does not parse" } }
      if (!path.startsWith(`${Wire.API_PREFIX}/`)) return { status: 404, body: { detail: `no endpoint ${req.method} ${path.slice(0, 200)}` } }
      const name = path.slice(Wire.API_PREFIX.length + 1)
      if (name !== "healthz" && !authorized(req)) return { status: 401, body: { detail: "missing or wrong X-API-Key" } }
      if (req.method === "GET") {
        const g = get[name]
        if (g !== undefined) return yield* toReply(g(name))
        if (name.startsWith("samplers/")) {
          const id = Result.try(() => decodeURIComponent(name.slice("samplers/".length)))
          if (Result.isFailure(id)) return { status: 400, body: { detail: "the sampler id in the path is not valid percent-encoding" } }
          return yield* toReply(samplerInfo(id.success))
        }
        return { status: post[name] !== undefined ? 405 : 404, body: { detail: `no endpoint GET ${path.slice(0, 200)}` } }
      }
      if (req.method !== "POST") return { status: 405, body: { detail: `${req.method} is not allowed on ${path.slice(0, 200)}` } }
      const handler = post[name]
      if (handler === undefined) return { status: get[name] !== undefined ? 405 : 404, body: { detail: `no endpoint POST ${path.slice(0, 200)}` } }
      const body = yield* readJson(req).pipe(Effect.result)
      if (Result.isFailure(body)) return { status: body.failure.status, body: { detail: body.failure.message } }
      const key = req.headers[Wire.Headers.idempotencyKey]
      const wait = yield* decodeOr400(Wire.WaitHeader, "headers")({ [Wire.Headers.waitMillis]: req.headers[Wire.Headers.waitMillis] }).pipe(Effect.result)
      if (Result.isFailure(wait)) return { status: 400, body: { detail: wait.failure.message } }
      const waitMillis = Math.min(wait.success[Wire.Headers.waitMillis] ?? 0, Duration.toMillis(pollWait))
      const run = toReply(handler(body.success.value, req))
      const reply = name === "retrieve_future" || name === "session_heartbeat" ? yield* run : yield* withIdempotency(key, body.success.text, run)
      return yield* withResult(reply, waitMillis)
    }).pipe(
      Effect.catchCause((cause) =>
        Effect.as(Effect.logError(`${req.method} ${path.slice(0, 200)} failed`, cause), { status: 500, body: { detail: "internal error" } } as Reply),
      ),
    )
    const elapsed = (yield* now) - started
    yield* Effect.logDebug(`${req.method} ${path.slice(0, 200)} ${reply.status} (${elapsed} ms)`)
    return json(reply.status, reply.body)
  })

  const server = yield* NodeHttpServer.make(() => createServer(), { port: options.port ?? 0, host: options.host ?? "127.0.0.1" })
  yield* server.serve(app)
  const address = server.address
  const port = address._tag === "UnixPathAddress" ? 0 : address.port
  const host = options.host ?? "127.0.0.1"
  const shown = host === "0.0.0.0" || host === "::" ? "127.0.0.1" : host
  const url = `http://${shown.includes(":") ? `[${shown}]` : shown}:${port}`
  yield* Effect.logInfo(`serving ${modelName} on ${url} (${replicas.length} sampler replica${replicas.length === 1 ? "" : "s"})`)
  return { url, port, stats, route } satisfies Handle
})

/** The running server, for tests and the CLI. @since 0.1.0 @category services */
export class Running extends Context.Service<Running, Handle>()("gyre/http/Server") {}

/**
 * The server as a layer on the `Trainer | Sampler` it is given: starts when built,
 * stops when released.
 * @since 0.1.0 @category layers
 */
export const layer = (options: Options = {}) => Layer.effect(Running, make(options))

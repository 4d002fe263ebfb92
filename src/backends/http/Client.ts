/**
 * A `Trainer` and a `Sampler` over the Tinker wire protocol (JSON), on undici.
 *
 * Building the layer opens a session (`create_session`, then a heartbeat every 10 s
 * while the layer lives) and creates the LoRA model (`create_model`). Every
 * long operation is a future: a submission POST answered with a `request_id`, then
 * `retrieve_future` polls until the result (retries: `Retry.ts`). Submissions ask with
 * `X-Gyre-Wait-Ms` for the result to come with the answer; a server that does so (gyre's)
 * spares the poll, others are polled as usual.
 *
 * - Training calls take consecutive `seq_id`s from 1 and are submitted strictly in
 *   that order (one submission at a time; the polls may overlap).
 * - Every submission carries an `X-Idempotency-Key`, reused by every retry and
 *   resubmission of that call, so the server applies it at most once.
 * - Sampling sends `X-Min-Policy-Version` (the version the caller pins) and
 *   `X-Affinity-Key`, and samples from the sampler weights last published by
 *   `saveWeightsForSampler`. The policy version of a result is the server's
 *   `policy_version` (an extension of this server); against a server without it, the
 *   client counts optimizer steps itself.
 * - The API key (`TINKER_API_KEY`, else `BASETEN_API_KEY`) is sent as `X-API-Key`
 *   and never written to a log or an error.
 *
 * Datums cross the wire through `Alignment.ts` (gyre's full sequences <-> Tinker's
 * shifted targets).
 *
 * @since 0.1.0
 */
import { NodeHttpClient } from "@effect/platform-node"
import { Config, Context, Duration, Effect, Layer, Option, Redacted, Result, Schedule, Schema, Semaphore } from "effect"
import { HttpClient, HttpClientRequest } from "effect/http"
import {
  type AdamParams,
  BackendError,
  type Datum,
  type ForwardBackwardResult,
  type ForwardOptions,
  type LossFn,
  type ModelInput,
  type SampleOptions,
  type SampleResult,
  type SamplingParams,
  modelInputTokens,
} from "../../Contract.ts"
import { resolveLoss } from "../../Loss.ts"
import { Sampler, type SamplerShape } from "../../Sampler.ts"
import { Trainer, type TrainerInfo, type TrainerShape } from "../../Trainer.ts"
import * as Alignment from "./Alignment.ts"
import * as Retry from "./Retry.ts"
import * as Wire from "./Wire.ts"

/** Tinker's production endpoint, used when neither `baseUrl` nor `TINKER_BASE_URL` is set. @since 0.1.0 @category constants */
export const DEFAULT_BASE_URL = "https://tinker.thinkingmachines.dev/services/tinker-prod"

/** @since 0.1.0 @category constants */
export const CLIENT_VERSION = "gyre/0.1.0"

/** @since 0.1.0 @category models */
export interface Options {
  /** the server, e.g. `http://127.0.0.1:8080`; default `TINKER_BASE_URL`, then Tinker's */
  readonly baseUrl?: string | URL | undefined
  /** the base model to train; default the first model the server lists */
  readonly baseModel?: string | undefined
  /** LoRA rank; default the server's */
  readonly loraRank?: number | undefined
  /** overrides `TINKER_API_KEY` / `BASETEN_API_KEY` */
  readonly apiKey?: Redacted.Redacted<string> | undefined
  /** retry delays and limits (default `Retry.standard`) */
  readonly retry?: Retry.Policy | undefined
  /** session heartbeat period (default 10 s) */
  readonly heartbeatInterval?: Duration.Input | undefined
  /** timeout of one submission or direct request (default 60 s) */
  readonly requestTimeout?: Duration.Input | undefined
  /** timeout of one `retrieve_future` long poll (default 45 s) */
  readonly pollTimeout?: Duration.Input | undefined
  /**
   * how long a submission may wait for its own result (the `X-Gyre-Wait-Ms` extension:
   * a server that knows it answers with the result and spares the poll; others
   * ignore it). Default 20 s; 0 turns it off.
   */
  readonly submitWait?: Duration.Input | undefined
  /** tags sent with `create_session` */
  readonly tags?: ReadonlyArray<string> | undefined
}

/**
 * The API key: `TINKER_API_KEY`, else `BASETEN_API_KEY`, else none (a local server
 * needs none).
 * @since 0.1.0 @category config
 */
export const apiKeyConfig: Config.Config<Option.Option<Redacted.Redacted<string>>> = Config.Redacted("TINKER_API_KEY").pipe(
  Config.orElse(() => Config.Redacted("BASETEN_API_KEY")),
  Config.option,
)

/** `TINKER_BASE_URL`, else Tinker's production endpoint. @since 0.1.0 @category config */
export const baseUrlConfig: Config.Config<URL> = Config.URL("TINKER_BASE_URL").pipe(Config.withDefault(new URL(DEFAULT_BASE_URL)))

interface Exchange {
  readonly status: number
  readonly headers: Readonly<Record<string, string | undefined>>
  readonly body: unknown
}

type Outcome = { readonly _tag: "Done"; readonly value: unknown } | { readonly _tag: "Failed"; readonly error: Wire.FutureError }

/** The server's message in an error body, else the start of the raw text. */
const messageOf = (text: string): string => {
  const json = Result.try(() => JSON.parse(text) as unknown)
  const parsed = Result.isSuccess(json) ? Schema.decodeUnknownOption(Wire.ErrorBody)(json.success) : Option.none()
  const m = Option.isSome(parsed) ? (parsed.value.detail ?? parsed.value.error ?? parsed.value.message) : undefined
  if (m !== undefined) return m.length > 2000 ? `${m.slice(0, 2000)}...` : m
  const t = text.trim()
  return t.length === 0 ? "(empty body)" : t.length > 500 ? `${t.slice(0, 500)}...` : t
}

const describeCause = (cause: unknown): string => {
  if (cause instanceof Error) {
    const inner = (cause as { cause?: unknown }).cause
    const code = typeof inner === "object" && inner !== null && "code" in inner ? String((inner as { code: unknown }).code) : undefined
    return code === undefined ? cause.message : `${cause.message} (${code})`
  }
  return String(cause)
}

const reasonOfStatus = (status: number | undefined): BackendError["reason"] =>
  status === 400 || status === 404 || status === 413 || status === 422 ? "InvalidInput" : "Rejected"

/** HttpFailure -> BackendError, once retrying is over. */
const toBackendError = (operation: string, f: Retry.HttpFailure): BackendError => {
  switch (f.kind) {
    case "Fatal":
    case "Expired":
      return new BackendError({
        reason: f.kind === "Expired" ? "Unavailable" : reasonOfStatus(f.status),
        operation,
        message: `HTTP ${f.status}: ${f.message}`,
      })
    case "Transport":
      return new BackendError({ reason: "Transport", operation, message: f.message })
    case "Decode":
      return new BackendError({ reason: "Internal", operation, message: f.message })
    default:
      return new BackendError({
        reason: "Unavailable",
        operation,
        message: f.status === undefined ? f.message : `HTTP ${f.status}: ${f.message}`,
      })
  }
}

const futureErrorToBackend = (operation: string, e: Wire.FutureError): BackendError =>
  new BackendError({
    reason: e.reason ?? (e.category === "user" ? "InvalidInput" : "Internal"),
    operation,
    message: e.error,
  })

const decodeWith = <S extends Schema.Top>(schema: S, what: string) => {
  const decode = Schema.decodeUnknownResult(schema as unknown as Schema.Codec<S["Type"], unknown>)
  return (value: unknown): Effect.Effect<S["Type"], Retry.HttpFailure> => {
    const r = decode(value)
    return Result.isSuccess(r)
      ? Effect.succeed(r.success)
      : Effect.fail(new Retry.HttpFailure({ kind: "Decode", message: `the answer to ${what} does not match the protocol: ${r.failure.message}` }))
  }
}

/** Logs each retry of a schedule (its metadata carries the failure and the delay). */
const withRetryLog =
  (f: (meta: { readonly input: Retry.HttpFailure; readonly duration: Duration.Duration; readonly attempt: number }) => Effect.Effect<void>) =>
  (s: Schedule.Schedule<Duration.Duration, Retry.HttpFailure>) =>
    Schedule.tap(s, (meta) => f({ input: meta.input, duration: meta.output, attempt: meta.attempt }))

const isObject = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)

const samplingParamsToWire = (p: SamplingParams): Result.Result<Wire.SamplingParams, string> => {
  let stop: Wire.SamplingParams["stop"] = undefined
  if (p.stop !== undefined) {
    const strings = p.stop.filter((s): s is string => typeof s === "string")
    const ids = p.stop.filter((s): s is number => typeof s === "number")
    if (strings.length > 0 && ids.length > 0) {
      return Result.fail("sampling stop mixes strings and token ids; the protocol takes one kind per request")
    }
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

const modelInputToWire = (input: ModelInput): Wire.ModelInput => ({ chunks: [{ type: "encoded_text", tokens: modelInputTokens(input) }] })

/**
 * Connects to a server and returns the two services. Needs an `HttpClient` and a
 * `Scope` (the session's heartbeat runs until the scope closes).
 * @since 0.1.0 @category constructors
 */
export const make = Effect.fn("Http.make")(function* (options: Options = {}) {
  const http = yield* HttpClient.HttpClient
  const policy = options.retry ?? Retry.standard
  const apiKey = options.apiKey !== undefined ? Option.some(options.apiKey) : yield* apiKeyConfig
  const base = options.baseUrl !== undefined ? new URL(String(options.baseUrl)) : yield* baseUrlConfig
  const root = `${base.origin}${base.pathname.replace(/\/+$/, "")}${Wire.API_PREFIX}`
  const where = `${base.origin}${base.pathname.replace(/\/+$/, "")}`
  const requestTimeout = options.requestTimeout ?? "60 seconds"
  const pollTimeout = options.pollTimeout ?? "45 seconds"
  const submitWaitMillis = Math.min(Duration.toMillis(options.submitWait ?? "20 seconds"), Duration.toMillis(requestTimeout) / 2)

  const withAuth = (req: HttpClientRequest.HttpClientRequest) =>
    Option.match(apiKey, {
      onNone: () => req,
      onSome: (key) => HttpClientRequest.setHeader(req, Wire.Headers.apiKey, Redacted.value(key)),
    })

  /** One HTTP exchange: a 2xx answer with its JSON body, or an HttpFailure. */
  const send = (
    method: "GET" | "POST",
    path: string,
    body: unknown,
    headers: Record<string, string>,
    timeout: Duration.Input,
  ): Effect.Effect<Exchange, Retry.HttpFailure> =>
    Effect.gen(function* () {
      const url = `${root}${path}`
      let req = method === "GET" ? HttpClientRequest.get(url) : HttpClientRequest.post(url)
      req = HttpClientRequest.setHeaders(req, { accept: "application/json", "user-agent": CLIENT_VERSION, ...headers })
      if (method === "POST") req = HttpClientRequest.bodyText(req, JSON.stringify(body), "application/json")
      const res = yield* http.execute(withAuth(req)).pipe(
        // one span per operation (Effect.fn) is enough; a span per HTTP exchange costs more than it tells
        Effect.provideService(HttpClient.TracerDisabledWhen, () => true),
        Effect.flatMap((r) => Effect.map(r.text, (text) => ({ status: r.status, headers: r.headers as Record<string, string | undefined>, text }))),
        Effect.timeoutOrElse({
          duration: timeout,
          orElse: () =>
            Effect.fail(new Retry.HttpFailure({ kind: "Transport", message: `no answer from ${where}${Wire.API_PREFIX}${path} within ${Duration.format(Duration.fromInputUnsafe(timeout))}` })),
        }),
        Effect.catchTag("HttpClientError", (e) =>
          Effect.fail(
            new Retry.HttpFailure({
              kind: "Transport",
              message: `no answer from ${where}${Wire.API_PREFIX}${path}: ${e.reason._tag === "TransportError" ? describeCause(e.reason.cause ?? e.reason.description) : e.reason._tag}`,
            }),
          ),
        ),
      )
      const kind = Retry.kindOfStatus(res.status)
      if (kind !== undefined) {
        const now = yield* Effect.clockWith((c) => c.currentTimeMillis)
        return yield* new Retry.HttpFailure({
          kind,
          status: res.status,
          message: messageOf(res.text),
          retryAfterMillis: res.status === 429 || res.status === 503 ? Retry.parseRetryAfter(res.headers, Number(now)) : undefined,
        })
      }
      const parsed = Result.try(() => (res.text.length === 0 ? {} : (JSON.parse(res.text) as unknown)))
      if (Result.isFailure(parsed)) {
        return yield* new Retry.HttpFailure({ kind: "Decode", status: res.status, message: `${path} answered ${res.status} with a body that is not JSON` })
      }
      return { status: res.status, headers: res.headers, body: parsed.success }
    })

  const logRetry = (what: string) => (meta: { readonly input: Retry.HttpFailure; readonly duration: Duration.Duration; readonly attempt: number }) =>
    meta.input.kind === "TryAgain"
      ? Effect.void
      : Effect.logDebug(`${what}: ${meta.input.kind}${meta.input.status ? ` ${meta.input.status}` : ""} (${meta.input.message}); retry ${meta.attempt} in ${Duration.format(meta.duration)}`)

  /** A direct (non-future) call with submission retries. */
  const direct = <S extends Schema.Top>(method: "GET" | "POST", path: string, body: unknown, schema: S, operation: string) =>
    Effect.suspend(() => {
      // one key per call, shared by its retries
      const headers: Record<string, string> = method === "POST" ? { [Wire.Headers.idempotencyKey]: newKey() } : {}
      return send(method, path, body, headers, requestTimeout).pipe(Effect.retry(Retry.submission(policy).pipe(withRetryLog(logRetry(operation)))))
    }).pipe(
      Effect.flatMap((x) => decodeWith(schema, operation)(x.body)),
      Effect.mapError((f) => toBackendError(operation, f)),
    )

  const newKey = () => `gyre-${globalThis.crypto.randomUUID()}`

  /** A future's answer (a poll's, or the result a submission carried): done, failed, or not yet. */
  const outcomeOf = (b: unknown, operation: string): Effect.Effect<Outcome, Retry.HttpFailure> => {
    if (isObject(b) && (b["type"] === "try_again" || b["status"] === "complete_metadata")) {
      return Effect.fail(new Retry.HttpFailure({ kind: "TryAgain", message: "not done yet" }))
    }
    if (isObject(b) && typeof b["error"] === "string") {
      return Effect.map(decodeWith(Wire.FutureError, operation)(b), (error) => ({ _tag: "Failed", error }) as const)
    }
    return Effect.succeed({ _tag: "Done", value: b } as const)
  }

  const waitHeader: Record<string, string> = submitWaitMillis > 0 ? { [Wire.Headers.waitMillis]: String(submitWaitMillis) } : {}

  /** POSTs a submission (with retries); returns its request id and, if the server finished in time, its outcome. */
  const submit = (path: string, body: unknown, key: string, extraHeaders: Record<string, string>, operation: string) =>
    send("POST", path, body, { [Wire.Headers.idempotencyKey]: key, ...waitHeader, ...extraHeaders }, requestTimeout).pipe(
      Effect.retry(Retry.submission(policy).pipe(withRetryLog(logRetry(operation)))),
      Effect.flatMap((x) => decodeWith(Wire.SubmitResponse, operation)(x.body)),
      Effect.flatMap((f) =>
        f.result === undefined
          ? Effect.succeed({ requestId: f.request_id, early: Option.none<Outcome>() })
          : outcomeOf(f.result, operation).pipe(
              Effect.map((o) => ({ requestId: f.request_id, early: Option.some(o) })),
              Effect.catchIf(
                (e) => e.kind === "TryAgain",
                () => Effect.succeed({ requestId: f.request_id, early: Option.none<Outcome>() }),
              ),
            ),
      ),
    )

  const pollUntilDone = (requestId: string, type: Wire.RequestType, operation: string) =>
    Effect.suspend(() => {
      let iteration = 0
      const once = Effect.suspend(() =>
        send(
          "POST",
          "/retrieve_future",
          { request_id: requestId, allow_metadata_only: false },
          { [Wire.Headers.requestType]: type, [Wire.Headers.requestIteration]: String(iteration++) },
          pollTimeout,
        ),
      ).pipe(Effect.flatMap((x) => outcomeOf(x.body, operation)))
      return once.pipe(Effect.retry(Retry.polling(policy).pipe(withRetryLog(logRetry(`${operation} (polling)`)))))
    })

  interface Submitted {
    readonly requestId: string
    readonly early: Option.Option<Outcome>
  }

  /** Polls a submitted future (unless its submission carried the outcome); on 410 resubmits the same body with the same key. */
  const awaitFuture = <S extends Schema.Top>(
    path: string,
    body: unknown,
    key: string,
    extraHeaders: Record<string, string>,
    first: Submitted,
    type: Wire.RequestType,
    schema: S,
    operation: string,
  ): Effect.Effect<S["Type"], BackendError> =>
    Effect.gen(function* () {
      let submitted = first
      for (let resubmits = 0; ; resubmits++) {
        const requestId = submitted.requestId
        const outcome = Option.isSome(submitted.early)
          ? submitted.early
          : yield* pollUntilDone(requestId, type, operation).pipe(
              Effect.map((o) => Option.some(o)),
              Effect.catchIf(
                (f) => f.kind === "Expired" && resubmits < policy.maxResubmits,
                (f) => Effect.as(Effect.logDebug(`${operation}: future ${requestId} expired (${f.message}); resubmitting`), Option.none<Outcome>()),
              ),
              Effect.mapError((f) => toBackendError(operation, f)),
            )
        if (Option.isNone(outcome)) {
          submitted = yield* submit(path, body, key, extraHeaders, operation).pipe(Effect.mapError((f) => toBackendError(operation, f)))
          continue
        }
        if (outcome.value._tag === "Failed") return yield* futureErrorToBackend(operation, outcome.value.error)
        return yield* decodeWith(schema, operation)(outcome.value.value).pipe(Effect.mapError((f) => toBackendError(operation, f)))
      }
    })

  /** A future-returning call that is not ordered (sampling, create_model). */
  const futureCall = <S extends Schema.Top>(
    path: string,
    body: unknown,
    type: Wire.RequestType,
    schema: S,
    operation: string,
    extraHeaders: Record<string, string> = {},
  ) =>
    Effect.gen(function* () {
      const key = newKey()
      const submitted = yield* submit(path, body, key, extraHeaders, operation).pipe(Effect.mapError((f) => toBackendError(operation, f)))
      return yield* awaitFuture(path, body, key, extraHeaders, submitted, type, schema, operation)
    })

  // --- session -------------------------------------------------------------
  const session = yield* direct(
    "POST",
    "/create_session",
    { tags: [...(options.tags ?? [])], sdk_version: CLIENT_VERSION, type: "create_session" },
    Wire.CreateSessionResponse,
    "create_session",
  )
  const sessionId = session.session_id
  if (session.warning_message) yield* Effect.logWarning(`server: ${session.warning_message}`)
  if (session.error_message) yield* Effect.logError(`server: ${session.error_message}`)

  const heartbeat = send("POST", "/session_heartbeat", { session_id: sessionId, type: "session_heartbeat" }, {}, "10 seconds").pipe(
    Effect.matchEffect({
      onFailure: (f) => Effect.logWarning(`session heartbeat failed: ${f.kind} ${f.status ?? ""} ${f.message}`),
      onSuccess: () => Effect.void,
    }),
    Effect.delay(options.heartbeatInterval ?? "10 seconds"),
    Effect.forever,
  )
  yield* Effect.forkScoped(heartbeat)

  // --- model ---------------------------------------------------------------
  const capabilities = yield* direct("GET", "/get_server_capabilities", undefined, Wire.ServerCapabilities, "get_server_capabilities").pipe(
    Effect.option,
  )
  const firstModel = Option.flatMap(capabilities, (c) => Option.fromNullishOr(c.supported_models[0]))
  const baseModel = options.baseModel ?? Option.getOrUndefined(Option.flatMap(firstModel, (m) => Option.fromNullishOr(m.model_name)))
  if (baseModel === undefined) {
    return yield* new BackendError({
      reason: "InvalidInput",
      operation: "create_model",
      message: `no base model given and ${where} lists none; pass baseModel`,
    })
  }
  const maxContext = Option.getOrUndefined(Option.flatMap(firstModel, (m) => Option.fromNullishOr(m.max_context_length)))
  const created = yield* futureCall(
    "/create_model",
    {
      session_id: sessionId,
      model_seq_id: 0,
      base_model: baseModel,
      ...(options.loraRank !== undefined
        ? { lora_config: { rank: options.loraRank, train_unembed: true, train_mlp: true, train_attn: true } }
        : {}),
      type: "create_model",
    },
    "CreateModel",
    Wire.CreateModelResponse,
    "create_model",
  )
  const modelId = created.model_id

  const getInfo = direct("POST", "/get_info", { model_id: modelId, type: "get_info" }, Wire.GetInfoResponse, "get_info")
  const firstInfo = yield* getInfo

  // --- state ---------------------------------------------------------------
  let nextSeq = 1
  let trainerVersion = firstInfo.policy_version ?? 0
  let published: { readonly version: number; readonly samplingSessionId?: string | undefined; readonly modelPath?: string | undefined } | undefined =
    undefined
  let samplerSeq = 0
  const turn = yield* Semaphore.make(1)

  /** An ordered training call: takes the next seq id and submits in order; polls outside the turn. */
  const trainingCall = <S extends Schema.Top>(
    path: string,
    makeBody: (seq: number) => unknown,
    type: Wire.RequestType,
    schema: S,
    operation: string,
  ) =>
    Effect.gen(function* () {
      const key = newKey()
      const { submitted, body } = yield* Semaphore.withPermits(
        turn,
        1,
      )(
        Effect.gen(function* () {
          const seq = nextSeq
          const body = makeBody(seq)
          const submitted = yield* submit(path, body, key, {}, operation).pipe(Effect.mapError((f) => toBackendError(operation, f)))
          nextSeq = seq + 1
          return { submitted, body }
        }),
      )
      return yield* awaitFuture(path, body, key, {}, submitted, type, schema, operation)
    })

  const invalid = (operation: string, message: string) => new BackendError({ reason: "InvalidInput", operation, message })

  const forwardLike = (kind: "forward_backward" | "forward") =>
    Effect.fn(kind === "forward" ? "Http.forward" : "Http.forwardBackward")(function* (
      data: ReadonlyArray<Datum>,
      lossFn: LossFn,
      opts?: ForwardOptions,
    ) {
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
        (seq) => ({ [kind === "forward" ? "forward_input" : "forward_backward_input"]: input, model_id: modelId, seq_id: seq }),
        kind === "forward" ? "Forward" : "ForwardBackward",
        Wire.ForwardBackwardOutput,
        kind,
      )
      if (out.loss_fn_outputs.length !== data.length) {
        return yield* new BackendError({
          reason: "Internal",
          operation: kind,
          message: `the server returned ${out.loss_fn_outputs.length} outputs for ${data.length} datums`,
        })
      }
      const outputs = []
      for (let i = 0; i < out.loss_fn_outputs.length; i++) {
        const r = Alignment.outputFromWire(out.loss_fn_outputs[i]!, `loss_fn_outputs[${i}]`)
        if (Result.isFailure(r)) return yield* new BackendError({ reason: "Internal", operation: kind, message: r.failure })
        outputs.push(r.success)
      }
      return { lossFnOutputs: outputs, metrics: Wire.metricsFromWire(out.metrics) } satisfies ForwardBackwardResult
    })

  const trainer: TrainerShape = {
    forwardBackward: forwardLike("forward_backward"),
    forward: forwardLike("forward"),
    optimStep: Effect.fn("Http.optimStep")(function* (adam: AdamParams) {
      const out = yield* trainingCall(
        "/optim_step",
        (seq) => ({ adam_params: adam, model_id: modelId, seq_id: seq, type: "optim_step" }),
        "OptimStep",
        Wire.OptimStepResponse,
        "optim_step",
      )
      trainerVersion = out.policy_version ?? trainerVersion + 1
      return { version: trainerVersion, metrics: Wire.metricsFromWire(out.metrics) }
    }),
    saveWeightsForSampler: Effect.fn("Http.saveWeightsForSampler")(function* (name: string) {
      const out = yield* trainingCall(
        "/save_weights_for_sampler",
        (seq) => ({ model_id: modelId, path: name, seq_id: seq, type: "save_weights_for_sampler" }),
        "SaveWeightsForSampler",
        Wire.SaveWeightsForSamplerResponse,
        "save_weights_for_sampler",
      )
      const version = out.policy_version ?? trainerVersion
      published = { version, samplingSessionId: out.sampling_session_id ?? undefined, modelPath: out.path ?? undefined }
      samplerSeq = 0
      return { version, path: out.path ?? out.sampling_session_id ?? name }
    }),
    saveState: Effect.fn("Http.saveState")(function* (name: string) {
      const out = yield* trainingCall(
        "/save_weights",
        (seq) => ({ model_id: modelId, path: name, seq_id: seq, type: "save_weights" }),
        "SaveWeights",
        Wire.SaveWeightsResponse,
        "save_weights",
      )
      return { path: out.path }
    }),
    loadState: Effect.fn("Http.loadState")(function* (path: string, opts?: { readonly withOptimizer?: boolean }) {
      yield* trainingCall(
        "/load_weights",
        (seq) => ({ model_id: modelId, seq_id: seq, path, optimizer: opts?.withOptimizer ?? false, type: "load_weights" }),
        "LoadWeights",
        Wire.LoadWeightsResponse,
        "load_weights",
      )
      const info = yield* getInfo
      if (info.policy_version !== undefined) trainerVersion = info.policy_version
    }),
    info: Effect.gen(function* () {
      const info = yield* getInfo
      if (info.policy_version !== undefined) trainerVersion = info.policy_version
      return {
        modelName: info.model_name ?? info.model_data.model_name ?? baseModel,
        loraRank: info.lora_rank ?? options.loraRank ?? 0,
        version: trainerVersion,
        maxSequenceLength: info.max_sequence_length ?? maxContext ?? 0,
      } satisfies TrainerInfo
    }).pipe(Effect.withSpan("Http.info")),
  }

  const sampleTarget = () =>
    published?.samplingSessionId !== undefined
      ? { sampling_session_id: published.samplingSessionId, seq_id: samplerSeq++ }
      : published?.modelPath !== undefined
        ? { model_path: published.modelPath }
        : { base_model: baseModel }

  const asample = (
    prompt: ModelInput,
    params: Wire.SamplingParams,
    numSamples: number,
    promptLogprobs: boolean,
    minPolicyVersion: number | undefined,
    affinityKey: string | undefined,
    operation: string,
  ) => {
    const headers: Record<string, string> = {}
    if (minPolicyVersion !== undefined) headers[Wire.Headers.minPolicyVersion] = String(minPolicyVersion)
    if (affinityKey !== undefined) headers[Wire.Headers.affinityKey] = affinityKey
    const versionUsed = published?.version
    const body = {
      num_samples: numSamples,
      prompt: modelInputToWire(prompt),
      sampling_params: params,
      ...sampleTarget(),
      ...(promptLogprobs ? { prompt_logprobs: true } : {}),
      type: "sample",
    }
    return Effect.map(futureCall("/asample", body, "Sample", Wire.SampleResponse, operation, headers), (r) => ({
      response: r,
      version: r.policy_version ?? versionUsed ?? trainerVersion,
    }))
  }

  const sampler: SamplerShape = {
    sample: Effect.fn("Http.sample")(function* (prompt: ModelInput, params: SamplingParams, opts: SampleOptions) {
      const wireParams = samplingParamsToWire(params)
      if (Result.isFailure(wireParams)) return yield* invalid("sample", wireParams.failure)
      const { response, version } = yield* asample(
        prompt,
        wireParams.success,
        opts.numSamples,
        opts.includePromptLogprobs ?? false,
        opts.minPolicyVersion,
        opts.affinityKey,
        "sample",
      )
      const sequences = []
      for (let i = 0; i < response.sequences.length; i++) {
        const s = response.sequences[i]!
        if (s.logprobs === undefined || s.logprobs === null || s.logprobs.length !== s.tokens.length) {
          return yield* new BackendError({
            reason: "Internal",
            operation: "sample",
            message: `sequences[${i}] has ${s.logprobs?.length ?? "no"} logprobs for ${s.tokens.length} tokens`,
          })
        }
        sequences.push({ tokens: [...s.tokens], logprobs: [...s.logprobs], stopReason: s.stop_reason })
      }
      const result: { -readonly [K in keyof SampleResult]: SampleResult[K] } = { sequences, policyVersion: version }
      if (opts.includePromptLogprobs && response.prompt_logprobs !== undefined && response.prompt_logprobs !== null) {
        const lps = Alignment.promptLogprobsFromWire(response.prompt_logprobs)
        if (Result.isFailure(lps)) return yield* new BackendError({ reason: "Internal", operation: "sample", message: lps.failure })
        result.promptLogprobs = lps.success
      }
      return result as SampleResult
    }),
    computeLogprobs: Effect.fn("Http.computeLogprobs")(function* (input: ModelInput, opts?: { readonly minPolicyVersion?: number }) {
      const { response } = yield* asample(
        input,
        { max_tokens: 1, temperature: 1, top_p: 1, top_k: -1 },
        1,
        true,
        opts?.minPolicyVersion,
        undefined,
        "compute_logprobs",
      )
      if (response.prompt_logprobs === undefined || response.prompt_logprobs === null) {
        return yield* new BackendError({ reason: "Internal", operation: "compute_logprobs", message: "the server returned no prompt_logprobs" })
      }
      const lps = Alignment.promptLogprobsFromWire(response.prompt_logprobs)
      if (Result.isFailure(lps)) return yield* new BackendError({ reason: "Internal", operation: "compute_logprobs", message: lps.failure })
      return lps.success
    }),
    version: Effect.suspend(() => {
      const id = published?.samplingSessionId ?? baseModel
      return direct("GET", `/samplers/${encodeURIComponent(id)}`, undefined, Wire.SamplerInfo, "sampler_version").pipe(
        Effect.map((s) => s.policy_version ?? published?.version ?? trainerVersion),
      )
    }).pipe(Effect.withSpan("Http.version")),
  }

  yield* Effect.logDebug(`connected to ${where}: session ${sessionId}, model ${modelId} (${baseModel})`)
  return { trainer, sampler, sessionId, modelId, baseModel }
})

/**
 * `Trainer | Sampler` over HTTP, given an `HttpClient`.
 * @since 0.1.0 @category layers
 */
export const layerNoDeps = (options: Options = {}) =>
  Layer.effectContext(
    Effect.map(make(options), ({ trainer, sampler }) => Context.make(Trainer, trainer).pipe(Context.add(Sampler, sampler))),
  )

/**
 * `Trainer | Sampler` over HTTP on undici. The API key comes from `options.apiKey`,
 * else `TINKER_API_KEY`, else `BASETEN_API_KEY`; the URL from `options.baseUrl`,
 * else `TINKER_BASE_URL`.
 *
 * @example
 * ```ts
 * import * as Http from "./src/backends/http/index.ts"
 * const backend = Http.layer({ baseUrl: "http://127.0.0.1:8080" })
 * // => Layer<Trainer | Sampler, BackendError | ConfigError>
 * ```
 * @since 0.1.0 @category layers
 */
export const layer = (options: Options = {}) => layerNoDeps(options).pipe(Layer.provide(NodeHttpClient.layerUndici))

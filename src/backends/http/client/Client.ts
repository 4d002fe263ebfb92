/**
 * A `Trainer`, a `Sampler` and a `Reference` over the Tinker wire protocol (JSON, and
 * protobuf where the server takes it), on undici.
 *
 * Building the layer opens a session (`create_session`, then a heartbeat every 10 s
 * while the layer lives) and creates the LoRA model (`create_model`). Every long
 * operation is a future (`Calls.ts`: idempotency keys, `seq_id` order, polling;
 * retries: `Retry.ts`, each logged at warning level with what is retried and until
 * when). The trainer is `ClientTrainer.ts`, the sampler `ClientSampler.ts` (a sample
 * pinned to a policy version waits at most `readyTimeout`). The reference log-probs of
 * the KL penalty come from a sampling session of the base model (`ClientReference.ts`),
 * created on first use.
 *
 * - Sampling sends `X-Min-Policy-Version` (the version the caller pins) and
 *   `X-Affinity-Key`, and samples from the sampler weights last published by
 *   `saveWeightsForSampler`. The policy version of a result is the server's
 *   `policy_version` (an extension of this server); against a server without it, the
 *   client counts optimizer steps itself.
 * - `forward_backward` and `forward` go as Tinker's protobuf when the server's client
 *   config says it takes them (`ClientTrainer.negotiateWire`, option `wire`), JSON
 *   otherwise; results of those and of `asample` are read as protobuf or JSON,
 *   whichever the server answers (`Transport.ts`, `Proto.ts`).
 * - The API key (`TINKER_API_KEY`, else `BASETEN_API_KEY`) is sent as `X-API-Key`.
 *   It is never written to a log or an error: gyre's own texts never hold it, and
 *   any text from the server is redacted (`Transport.ts`) before gyre prints it. A key
 *   that cannot travel in a header (a line break, a control character) is refused at
 *   once, naming where it came from.
 *
 * @since 0.1.0
 */
import { Config, Context, Duration, Effect, Layer, Option, Redacted } from "effect"
import { HttpClient } from "effect/http"
import { BackendError } from "../../../contract/Contract.ts"
import { Reference } from "../../../services/Reference.ts"
import { DEFAULT_READY_TIMEOUT, Sampler } from "../../../services/Sampler.ts"
import { Trainer } from "../../../services/Trainer.ts"
import * as PlatformHttpClient from "../../../platform/HttpClient.ts"
import * as Calls from "./Calls.ts"
import * as ClientReference from "./ClientReference.ts"
import * as ClientSampler from "./ClientSampler.ts"
import * as ClientTrainer from "./ClientTrainer.ts"
import * as FuturesPoller from "./FuturesPoller.ts"
import * as Retry from "./Retry.ts"
import * as Transport from "./Transport.ts"
import * as Wire from "../wire/Wire.ts"

export { CLIENT_VERSION } from "./Transport.ts"

/** Tinker's production endpoint, used when neither `baseUrl` nor `TINKER_BASE_URL` is set. @since 0.1.0 @category constants */
export const DEFAULT_BASE_URL = "https://tinker.thinkingmachines.dev/services/tinker-prod"

/** @since 0.1.0 @category models */
export interface Options {
  /** the server, e.g. `http://127.0.0.1:8080`; default `TINKER_BASE_URL`, then Tinker's */
  readonly baseUrl?: string | URL | undefined
  /**
   * the sampler's server when it is not `baseUrl` (a Loops run's paired sampler has its
   * own base URL): sampling, sampler versions and the reference's sampling session go
   * there, everything else to `baseUrl`; default `baseUrl`
   */
  readonly samplerBaseUrl?: string | URL | undefined
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
  /**
   * batched retrieval of sample futures (`retrieve_futures`, one long poll per sampling
   * session) where the server's client config offers it (`sample_use_retrieve_futures`);
   * default true. false: every sample polls its own future
   */
  readonly batchedRetrieval?: boolean | undefined
  /** how long a sample pinned to a policy version waits for it (default 1 hour, as Loops' ready timeout) */
  readonly readyTimeout?: Duration.Input | undefined
  /**
   * the most connections `layer` keeps to each server; requests beyond them wait for a
   * free one (default: none, as many as requests in flight: about one per sample in
   * flight, plus the session's polls)
   */
  readonly connections?: number | undefined
  /** tags sent with `create_session` */
  readonly tags?: ReadonlyArray<string> | undefined
  /**
   * how training data travels: `auto` (default) asks the server's client config and
   * sends protobuf where it says so, JSON otherwise; `protobuf` always (as the official
   * SDK 0.25 does); `json` always, and results are asked for as JSON only. The client
   * config (`POST /client/config`) is asked once, before the first `forward_backward`
   * or `forward`
   */
  readonly wire?: "auto" | "protobuf" | "json" | undefined
  /**
   * the model the `Reference` scores with (a distillation teacher): a sampler path the
   * server saved (`modelPath`, `tinker://…`) or another base model it serves; default the
   * base model being trained, the KL penalty's reference
   */
  readonly reference?: ClientReference.ScoredModel | undefined
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

/** Where the key came from, for messages (never the key). */
const apiKeySource = Config.Redacted("TINKER_API_KEY").pipe(
  Config.map(() => "TINKER_API_KEY"),
  Config.orElse(() => Config.map(Config.Redacted("BASETEN_API_KEY"), () => "BASETEN_API_KEY")),
  Config.withDefault("the API key"),
)

/** `TINKER_BASE_URL`, else Tinker's production endpoint. @since 0.1.0 @category config */
export const baseUrlConfig: Config.Config<URL> = Config.URL("TINKER_BASE_URL").pipe(Config.withDefault(new URL(DEFAULT_BASE_URL)))

/** The API key of the options or the environment; one that cannot travel in a header is refused, naming where it came from. */
const apiKeyOf = (options: Options) =>
  Effect.gen(function* () {
    const apiKey = options.apiKey !== undefined ? Option.some(options.apiKey) : yield* apiKeyConfig
    if (Option.isSome(apiKey)) {
      const problem = Transport.headerValueProblem(Redacted.value(apiKey.value))
      if (problem !== undefined) {
        const source = options.apiKey !== undefined ? "options.apiKey" : yield* apiKeySource
        return yield* new BackendError({
          reason: "InvalidInput",
          operation: "create_session",
          message: `${source} has ${problem}; an HTTP header cannot carry it, so no request can be sent (a key read from a file often keeps its trailing newline)`,
        })
      }
    }
    return apiKey
  })

/** What connecting shares: the options, the transport to `baseUrl`, and the calls to it and to the sampler's server. */
interface Context {
  readonly options: Options
  readonly transport: Transport.Transport
  readonly calls: Calls.Calls
  /** the calls of sampling: to `samplerBaseUrl`, else the same as `calls` */
  readonly samplerCalls: Calls.Calls
}

const connect = (options: Options) =>
  Effect.gen(function* () {
    const http = yield* HttpClient.HttpClient
    const policy = options.retry ?? Retry.standard
    const apiKey = yield* apiKeyOf(options)
    const base = options.baseUrl !== undefined ? new URL(String(options.baseUrl)) : yield* baseUrlConfig
    const requestTimeout = options.requestTimeout ?? "60 seconds"
    const protobufResults = options.wire !== "json"
    const transport = Transport.make({ http, base, apiKey, protobufResults })
    const callOptions: Calls.Options = {
      policy,
      requestTimeout,
      pollTimeout: options.pollTimeout ?? "45 seconds",
      submitWaitMillis: Math.min(Duration.toMillis(Duration.fromInputUnsafe(options.submitWait ?? "20 seconds")), Duration.toMillis(Duration.fromInputUnsafe(requestTimeout)) / 2),
    }
    const calls = yield* Calls.make(transport, callOptions)
    const samplerCalls = options.samplerBaseUrl === undefined
      ? calls
      : yield* Calls.make(Transport.make({ http, base: new URL(String(options.samplerBaseUrl)), apiKey, protobufResults }), callOptions)
    return { options, transport, calls, samplerCalls } satisfies Context
  })

/** `create_session`, then a heartbeat every `heartbeatInterval` until the scope closes; returns the session id. */
const openSession = (ctx: Context) =>
  Effect.gen(function* () {
    const { options, transport } = ctx
    const session = yield* ctx.calls.direct(
      "POST",
      "/create_session",
      { tags: [...(options.tags ?? [])], sdk_version: Transport.CLIENT_VERSION, type: "create_session" },
      Wire.CreateSessionResponse,
      "create_session",
    )
    const sessionId = session.session_id
    if (session.warning_message) yield* Effect.logWarning(`server: ${transport.redact(session.warning_message)}`)
    if (session.error_message) yield* Effect.logError(`server: ${transport.redact(session.error_message)}`)

    const heartbeat = transport.send("POST", "/session_heartbeat", { session_id: sessionId, type: "session_heartbeat" }, {}, "10 seconds").pipe(
      Effect.matchEffect({
        onFailure: (f) => Effect.logWarning(`session heartbeat failed: ${f.kind} ${f.status ?? ""} ${f.message}`),
        onSuccess: () => Effect.void,
      }),
      Effect.delay(options.heartbeatInterval ?? "10 seconds"),
      Effect.forever,
    )
    yield* Effect.forkScoped(heartbeat)
    return sessionId
  })

/** `create_model` of the base model (the options', else the first the server lists); returns the state the trainer and sampler share. */
const createModel = (ctx: Context, sessionId: string) =>
  Effect.gen(function* () {
    const { options } = ctx
    const { direct, futureCall } = ctx.calls
    const capabilities = yield* direct("GET", "/get_server_capabilities", undefined, Wire.ServerCapabilities, "get_server_capabilities").pipe(Effect.option)
    const firstModel = Option.flatMap(capabilities, (c) => Option.fromNullishOr(c.supported_models[0]))
    const baseModel = options.baseModel ?? Option.getOrUndefined(Option.flatMap(firstModel, (m) => Option.fromNullishOr(m.model_name)))
    if (baseModel === undefined) {
      return yield* new BackendError({ reason: "InvalidInput", operation: "create_model", message: `no base model given and ${ctx.transport.where} lists none; pass baseModel` })
    }
    const created = yield* futureCall(
      "/create_model",
      {
        session_id: sessionId,
        model_seq_id: 0,
        base_model: baseModel,
        ...(options.loraRank !== undefined ? { lora_config: { rank: options.loraRank, train_unembed: true, train_mlp: true, train_attn: true } } : {}),
        type: "create_model",
      },
      "CreateModel",
      Wire.CreateModelResponse,
      "create_model",
    )
    const firstInfo = yield* direct("POST", "/get_info", { model_id: created.model_id, type: "get_info" }, Wire.GetInfoResponse, "get_info")
    const state: ClientTrainer.State = {
      modelId: created.model_id,
      baseModel,
      loraRank: options.loraRank,
      maxContext: Option.getOrUndefined(Option.flatMap(firstModel, (m) => Option.fromNullishOr(m.max_context_length))),
      trainerVersion: firstInfo.policy_version ?? 0,
      published: undefined,
      samplerSeq: 0,
      samplerIds: 0,
    }
    return state
  })

/**
 * Batched retrieval (`FuturesPoller.ts`), used once the sampler's server says in its
 * client config that it serves `retrieve_futures` (asked once, at the first sample that
 * could use it); until then, and on a server that does not, samples poll their own futures.
 */
const batchedRetrieval = (calls: Calls.Calls) =>
  Effect.gen(function* () {
    // the server holds a poll at most half the client's poll timeout, and at most 20 s (the SDK's)
    const holdSeconds = Math.min(20, Duration.toMillis(Duration.fromInputUnsafe(calls.pollTimeout)) / 2000)
    const poller = FuturesPoller.make((body) => calls.once("/retrieve_futures", body, Wire.RetrieveFuturesResponse, "retrieve_futures"), yield* Effect.scope, { holdSeconds })
    const offered = yield* Effect.cached(
      calls.direct("POST", "/client/config", { sdk_version: Transport.CLIENT_VERSION }, ClientTrainer.ClientConfig, "client_config").pipe(
        Effect.map((c) => c.sample_use_retrieve_futures === true),
        Effect.orElseSucceed(() => false),
      ),
    )
    return (samplingSessionId: string, requestId: string) => Effect.flatMap(offered, (on) => (on ? poller.finished(samplingSessionId, requestId) : Effect.void))
  })

/**
 * Connects to a server and returns the two services. Needs an `HttpClient` and a
 * `Scope` (the session's heartbeat runs until the scope closes).
 * @since 0.1.0 @category constructors
 */
export const make = Effect.fn("Http.make")(function* (options: Options = {}) {
  const ctx = yield* connect(options)
  const sessionId = yield* openSession(ctx)
  const state = yield* createModel(ctx, sessionId)
  const trainer = ClientTrainer.make(ctx.calls, state, { wire: options.wire ?? "auto" })
  const finished = options.batchedRetrieval === false ? undefined : yield* batchedRetrieval(ctx.samplerCalls)
  const sampler = ClientSampler.make(ctx.samplerCalls, state, { readyTimeout: options.readyTimeout ?? DEFAULT_READY_TIMEOUT, finished })
  const reference = yield* ClientReference.make(ctx.samplerCalls, state, sessionId, options.reference)
  yield* Effect.logDebug(`connected to ${ctx.transport.where}: session ${sessionId}, model ${state.modelId} (${state.baseModel})`)
  return { trainer, sampler, reference, sessionId, modelId: state.modelId, baseModel: state.baseModel }
})

/**
 * `Trainer | Sampler | Reference` over HTTP, given an `HttpClient`.
 * @since 0.1.0 @category layers
 */
export const layerNoDeps = (options: Options = {}) =>
  Layer.effectContext(
    Effect.map(make(options), ({ trainer, sampler, reference }) =>
      Context.make(Trainer, trainer).pipe(Context.add(Sampler, sampler), Context.add(Reference, reference))
    ),
  )

/**
 * `Trainer | Sampler | Reference` over HTTP on undici. The API key comes from `options.apiKey`,
 * else `TINKER_API_KEY`, else `BASETEN_API_KEY`; the URL from `options.baseUrl`,
 * else `TINKER_BASE_URL`.
 *
 * @example
 * ```ts
 * import * as Http from "../src/backends/http/index.ts"
 * const backend = Http.layer({ baseUrl: "http://127.0.0.1:8080" })
 * // => Layer<Trainer | Sampler | Reference, BackendError | ConfigError>
 * ```
 * @since 0.1.0 @category layers
 */
export const layer = (options: Options = {}) => layerNoDeps(options).pipe(Layer.provide(PlatformHttpClient.layerWith({ connections: options.connections })))

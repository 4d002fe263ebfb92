/**
 * The Loops control plane as a service: sessions, runs with their paired sampler,
 * deployments, checkpoints and their files, capabilities (routes and schemas:
 * `Api.ts`).
 *
 * - Authentication: `Authorization: Bearer <key>`, the key from `options.apiKey`, else
 *   `BASETEN_API_KEY`. The key is a `Redacted` value: it is never logged, and every text
 *   the server sends back passes through `redact` before gyre shows it.
 * - The URL: `options.url`, else `LOOPS_API_URL`, else Baseten's API
 *   (`https://api.baseten.co`).
 * - Retries follow the Loops SDK's error model: a 503 is a server shutting down and is
 *   retried; so are 408, 429, the other 5xx and requests that got no answer, with
 *   exponential back-off and `Retry-After` (`Retry.submission` of the HTTP backend).
 *   Any other 4xx fails at once with the server's message. Creating a run is not
 *   idempotent: after an answer that leaves it open whether the run was created (no
 *   answer, 408, any 5xx, 503 included, or a 409: the session already holds a run), the
 *   session's runs are listed before anything is sent again, and a run found there is
 *   the one created, so a retry never starts a second run that would bill. A create
 *   that still fails names the session and the commands that list and stop its runs.
 * - Every answer is decoded with its Schema (liberally: `Api.ts`); a mismatch names the
 *   route and the field. A created run's id is read before anything else of its
 *   answer, so that a caller can record the run before a mismatch can stop it.
 *
 * @since 0.1.0
 */
import { Config, Context, Duration, Effect, Layer, Option, Redacted, Result, Schedule, type Schema } from "effect"
import { HttpClient, HttpClientRequest } from "effect/http"
import { decode } from "../../util/Decode.ts"
import * as PlatformHttpClient from "../../platform/HttpClient.ts"
import * as Retry from "../http/client/Retry.ts"
import { headerValueProblem, redactor } from "../http/client/Transport.ts"
import * as Api from "./Api.ts"
import { LoopsError } from "./Errors.ts"

/** Baseten's API, used when neither `options.url` nor `LOOPS_API_URL` is set. @since 0.1.0 @category constants */
export const DEFAULT_URL = "https://api.baseten.co"

/** @since 0.1.0 @category models */
export interface Options {
  /** the control plane; default `LOOPS_API_URL`, then Baseten's API */
  readonly url?: string | URL | undefined
  /** overrides `BASETEN_API_KEY` */
  readonly apiKey?: Redacted.Redacted<string> | undefined
  /** retry delays and limits (default `Retry.standard`: back-off up to 30 s, giving up after 5 minutes) */
  readonly retry?: Retry.Policy | undefined
  /** timeout of one request (default 30 s) */
  readonly requestTimeout?: Duration.Input | undefined
}

/** @since 0.1.0 @category models */
export interface ControlPlaneShape {
  /** the control plane's URL, as shown in messages */
  readonly url: string
  /** removes the API key from a text */
  readonly redact: (text: string) => string
  readonly capabilities: Effect.Effect<Api.CapabilitiesResponse, LoopsError>
  readonly createSession: Effect.Effect<Api.Session, LoopsError>
  readonly getSession: (sessionId: string) => Effect.Effect<Api.Session, LoopsError>
  /** creates a run and its paired sampler; its id comes first (see `Created`, and the module doc for how a retry avoids a second run) */
  readonly createRun: (request: Api.CreateRunRequest) => Effect.Effect<Created, LoopsError>
  readonly getRun: (runId: string) => Effect.Effect<Api.Run, LoopsError>
  readonly listRuns: (query?: Api.ListRunsQuery) => Effect.Effect<ReadonlyArray<Api.Run>, LoopsError>
  /** tears down the run and its paired sampler; checkpoints remain */
  readonly deactivateRun: (runId: string) => Effect.Effect<Api.DeactivateRunResponse, LoopsError>
  readonly getDeployment: (deploymentId: string) => Effect.Effect<Api.Deployment, LoopsError>
  readonly listCheckpoints: (query: Api.CheckpointsQuery) => Effect.Effect<ReadonlyArray<Api.Checkpoint>, LoopsError>
  /** one page of a checkpoint's files (presigned URLs) */
  readonly checkpointFiles: (checkpointId: string, page?: Api.FilesPage) => Effect.Effect<Api.CheckpointFilesResponse, LoopsError>
}

/** The API key: `BASETEN_API_KEY`. @since 0.1.0 @category config */
export const apiKeyConfig: Config.Config<Redacted.Redacted<string>> = Config.Redacted("BASETEN_API_KEY")

/** `LOOPS_API_URL`, else Baseten's API. @since 0.1.0 @category config */
export const urlConfig: Config.Config<URL> = Config.URL("LOOPS_API_URL").pipe(Config.withDefault(new URL(DEFAULT_URL)))

const UNREACHABLE = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_NONAME", "EHOSTUNREACH", "ENETUNREACH"])

const codeOf = (cause: unknown): string | undefined => {
  for (let c: unknown = cause, depth = 0; typeof c === "object" && c !== null && depth < 4; c = (c as { cause?: unknown }).cause, depth++) {
    if ("code" in c && typeof c.code === "string") return c.code
  }
  return undefined
}

/** The server's message in an error body (`detail`, `message` or `error`), else the start of the text. */
const messageOf = (text: string): string => {
  const json = Result.try(() => JSON.parse(text) as unknown)
  if (Result.isSuccess(json) && typeof json.success === "object" && json.success !== null) {
    const body = json.success as Record<string, unknown>
    for (const key of ["detail", "message", "error"]) {
      const v = body[key]
      if (typeof v === "string") return v.length > 1000 ? `${v.slice(0, 1000)}...` : v
      if (v !== undefined && v !== null) return JSON.stringify(v).slice(0, 1000)
    }
  }
  const t = text.trim()
  return t === "" ? "(empty body)" : t.length > 500 ? `${t.slice(0, 500)}...` : t
}

const reasonOf = (f: Retry.HttpFailure): LoopsError["reason"] =>
  f.status === 401 || f.status === 403
    ? "Auth"
    : f.status === 404
      ? "NotFound"
      : f.kind === "Decode"
        ? "Decode"
        : f.kind === "Fatal" && f.status !== undefined
          ? "InvalidInput"
          : "Unavailable"

const describe = (f: Retry.HttpFailure) => `${f.status !== undefined ? `HTTP ${f.status}: ` : ""}${f.message}`

/**
 * Whether a failed create may have created the run anyway: the server may have acted
 * before its answer was lost or it failed (a 503 from a server shutting down included),
 * and a 409 says the session already holds a run.
 */
const ambiguous = (f: Retry.HttpFailure) => f.kind === "Transport" || f.kind === "ServerError" || f.kind === "RequestTimeout" || f.kind === "Conflict"

const queryString = (query: Readonly<Record<string, string | number | undefined>>) => {
  const params = new URLSearchParams()
  for (const [k, v] of Object.entries(query)) if (v !== undefined) params.set(k, String(v))
  const s = params.toString()
  return s === "" ? "" : `?${s}`
}

/** The key (`options.apiKey`, else `BASETEN_API_KEY`) and the URL (`options.url`, else `LOOPS_API_URL`, else Baseten's). */
const settings = Effect.fnUntraced(function* (options: Options) {
  const apiKey = options.apiKey ?? (yield* apiKeyConfig.pipe(
    Effect.mapError(() =>
      new LoopsError({
        reason: "Config",
        route: "BASETEN_API_KEY",
        message: "BASETEN_API_KEY is not set: every Loops call is authenticated with a Baseten API key (export BASETEN_API_KEY=...)",
      })
    ),
  ))
  const problem = headerValueProblem(Redacted.value(apiKey))
  if (problem !== undefined) {
    const source = options.apiKey !== undefined ? "the API key" : "BASETEN_API_KEY"
    return yield* new LoopsError({ reason: "Config", route: source, message: `${source} has ${problem}; an HTTP header cannot carry it (a key read from a file often keeps its trailing newline)` })
  }
  const base = options.url !== undefined ? new URL(String(options.url)) : yield* urlConfig.pipe(
    Effect.mapError((e) => new LoopsError({ reason: "Config", route: "LOOPS_API_URL", message: `LOOPS_API_URL is not a URL: ${String(e)}` })),
  )
  return { apiKey, url: `${base.origin}${base.pathname.replace(/\/+$/, "")}` }
})

/** One exchange: the JSON body of a 2xx answer, or an HttpFailure (messages redacted). */
const makeExchange = (http: HttpClient.HttpClient, url: string, apiKey: Redacted.Redacted<string>, redact: (text: string) => string, timeout: Duration.Input) => {
  /** once the server has answered, a refused connection is a restart, not a wrong address */
  let answered = false
  return (method: "GET" | "POST", path: string, body: unknown) =>
    Effect.gen(function* () {
      let req = method === "GET" ? HttpClientRequest.get(`${url}${path}`) : HttpClientRequest.post(`${url}${path}`)
      req = HttpClientRequest.setHeaders(req, { accept: "application/json", authorization: `Bearer ${Redacted.value(apiKey)}`, "user-agent": "gyre/0.1.0" })
      if (body !== undefined) req = HttpClientRequest.bodyText(req, JSON.stringify(body), "application/json")
      const res = yield* http.execute(req).pipe(
        Effect.provideService(HttpClient.TracerDisabledWhen, () => true),
        Effect.flatMap((r) => Effect.map(r.text, (text) => ({ status: r.status, headers: r.headers as Record<string, string | undefined>, text }))),
        Effect.timeoutOrElse({
          duration: timeout,
          orElse: () => Effect.fail(new Retry.HttpFailure({ kind: "Transport", message: `no answer from ${url}${path} within ${Duration.format(Duration.fromInputUnsafe(timeout))}` })),
        }),
        Effect.catchTag("HttpClientError", (e) => {
          const cause = e.reason._tag === "TransportError" ? e.reason.cause : undefined
          const code = codeOf(cause)
          const text = redact(cause instanceof Error ? cause.message : e.reason._tag)
          return Effect.fail(
            code !== undefined && UNREACHABLE.has(code) && !answered
              ? new Retry.HttpFailure({ kind: "Unreachable", message: `nothing answers at ${url}: ${text}; check --loops-url / LOOPS_API_URL` })
              : new Retry.HttpFailure({ kind: "Transport", message: `no answer from ${url}${path}: ${text}` }),
          )
        }),
      )
      answered = true
      const kind = Retry.kindOfStatus(res.status)
      if (kind !== undefined) {
        const now = yield* Effect.clockWith((c) => c.currentTimeMillis)
        return yield* new Retry.HttpFailure({
          kind,
          status: res.status,
          message: redact(messageOf(res.text)),
          retryAfterMillis: res.status === 429 || res.status === 503 ? Retry.parseRetryAfter(res.headers, Number(now)) : undefined,
        })
      }
      const parsed = Result.try(() => (res.text.trim() === "" ? {} : (JSON.parse(res.text) as unknown)))
      if (Result.isFailure(parsed)) return yield* new Retry.HttpFailure({ kind: "Decode", status: res.status, message: `the answer (HTTP ${res.status}) is not JSON` })
      return parsed.success
    })
}

type Exchange = ReturnType<typeof makeExchange>

/** Retries, errors and decoding around an exchange. */
const makeCalls = (exchange: Exchange, url: string, redact: (text: string) => string, policy: Retry.Policy) => {
  /** The retry schedule, logging each retry at warning level with its reason and when it gives up. */
  const retrying = (route: string) =>
    Schedule.tap(Retry.submission(policy), (meta) =>
      Effect.logWarning(
        `${route}: ${describe(meta.input)}; retry ${meta.attempt} in ${Duration.format(meta.output.delay)}, giving up at ${new Date(meta.output.giveUpAt).toISOString()}`,
      ))
  const toError = (route: string) => (f: Retry.HttpFailure) => new LoopsError({ reason: reasonOf(f), route, message: `${route} at ${url}: ${describe(f)}` })
  /** An answer decoded with `schema`; a mismatch names the route and the field. */
  const decodeWith = <S extends Schema.ConstraintDecoder<unknown>>(route: string, schema: S) => {
    const run = decode(schema)
    return (body: unknown): Effect.Effect<S["Type"], LoopsError> => {
      const r = run(body)
      return Result.isSuccess(r)
        ? Effect.succeed(r.success)
        : Effect.fail(new LoopsError({ reason: "Decode", route, message: `${route} at ${url} answered with a body that does not match the Loops API reference: ${redact(r.failure)}` }))
    }
  }
  /** A call with retries, decoded. `route` is the documented path template, for messages. */
  const call = <S extends Schema.ConstraintDecoder<unknown>>(method: "GET" | "POST", route: string, path: string, schema: S, body?: unknown) =>
    exchange(method, path, body).pipe(
      Effect.retry(retrying(`${method} ${route}`)),
      Effect.mapError(toError(`${method} ${route}`)),
      Effect.flatMap(decodeWith(`${method} ${route}`, schema)),
    )
  return { exchange, retrying, toError, decodeWith, call }
}

type Calls = ReturnType<typeof makeCalls>

/** The command that stops a run (naming the control plane unless it is Baseten's API). @since 0.1.0 @category constants */
export const stopCommand = (runId: string, url?: string) => `gyre loops deactivate ${runId}${urlFlag(url)}`

/** The command that lists a session's runs. @since 0.1.0 @category constants */
export const sessionRunsCommand = (sessionId: string, url?: string) => `gyre loops runs --session ${sessionId}${urlFlag(url)}`

const urlFlag = (url: string | undefined) => (url === undefined || url === DEFAULT_URL ? "" : ` --loops-url ${url}`)

/**
 * A run just created: its `id`, read with the smallest decoder (`Api.RunId`) so that it
 * can be recorded and deactivated whatever else the answer holds, and `run`, the whole
 * answer decoded (it fails, naming the field, when the answer does not match).
 * @since 0.1.0 @category models
 */
export interface Created {
  readonly id: string
  readonly run: Effect.Effect<Api.Run, LoopsError>
}

/**
 * `POST /v1/loops/runs`. After an answer that leaves open whether the run was made
 * (`ambiguous`) or one with no readable run id, the session's runs are listed and the
 * newest one found there is the run created, so a retry never starts a second run and
 * a run the answer does not name can still be deactivated.
 */
const makeCreateRun = (c: Calls, url: string, listRuns: (query?: Api.ListRunsQuery) => Effect.Effect<ReadonlyArray<Api.Run>, LoopsError>) => {
  const route = "POST /v1/loops/runs"
  /** the run this session got, if any (the newest) */
  const reconcile = (request: Api.CreateRunRequest) =>
    listRuns({ base_model: request.base_model }).pipe(
      Effect.map((runs) =>
        Option.fromNullishOr([...runs].filter((r) => r.session_id === request.session_id).sort((a, b) => (b.created_at ?? "").localeCompare(a.created_at ?? ""))[0])
      ),
      Effect.orElseSucceed(() => Option.none<Api.Run>()),
    )
  const readId = decode(Api.RunId)
  return Effect.fn("Loops.createRun")(function* (request: Api.CreateRunRequest): Effect.fn.Return<Created, LoopsError> {
    const once = c.exchange("POST", "/v1/loops/runs", request).pipe(
      Effect.catchIf(ambiguous, (f) =>
        Effect.flatMap(reconcile(request), (found) =>
          Option.match(found, {
            onNone: () => Effect.fail(f),
            onSome: (run) => Effect.as(Effect.logWarning(`${route}: ${describe(f)}; the session already holds run ${run.id}, so that is the run created`), { run }),
          }))),
    )
    const body = yield* once.pipe(
      Effect.retry(c.retrying(route)),
      Effect.mapError((f) => {
        const e = c.toError(route)(f)
        if (!ambiguous(f)) return e
        const stop = `list the session's runs with \`${sessionRunsCommand(request.session_id, url)}\` and stop any with \`gyre loops deactivate <run_id>\``
        return new LoopsError({ reason: e.reason, route, message: `${e.message}. A run may have been created in session ${request.session_id} and may bill: ${stop}` })
      }),
    )
    const id = readId(body)
    if (Result.isSuccess(id)) return { id: id.success.run.id, run: Effect.map(c.decodeWith(route, Api.RunResponse)(body), (r) => r.run) }
    // the run may exist all the same: find it so that it can be deactivated
    const problem = `${route} at ${url} answered with no run id (${id.failure})`
    const found = yield* reconcile(request)
    if (Option.isNone(found)) {
      return yield* new LoopsError({
        reason: "Decode",
        route,
        message: `${problem}, and session ${request.session_id} lists no run. A run may have been created and may bill: ` +
          `list the session's runs with \`${sessionRunsCommand(request.session_id, url)}\` and stop any with \`gyre loops deactivate <run_id>\``,
      })
    }
    yield* Effect.logWarning(`${problem}; session ${request.session_id} holds run ${found.value.id}, so that is the run created`)
    return { id: found.value.id, run: Effect.fail(new LoopsError({ reason: "Decode", route, message: `${problem}; the run it created is ${found.value.id}` })) }
  })
}

/** Every route of the service. */
const routes = (c: Calls, url: string, redact: (text: string) => string): ControlPlaneShape => {
  const { call } = c
  const id = encodeURIComponent
  const listRuns = Effect.fn("Loops.listRuns")(function* (query: Api.ListRunsQuery = {}) {
    return (yield* call("GET", "/v1/loops/runs", `/v1/loops/runs${queryString(query)}`, Api.ListRunsResponse)).runs
  })
  return {
    url,
    redact,
    capabilities: call("GET", "/v1/loops/capabilities", "/v1/loops/capabilities", Api.CapabilitiesResponse).pipe(Effect.withSpan("Loops.capabilities")),
    createSession: call("POST", "/v1/loops/sessions", "/v1/loops/sessions", Api.SessionResponse).pipe(Effect.map((r) => r.session), Effect.withSpan("Loops.createSession")),
    getSession: Effect.fn("Loops.getSession")(function* (sessionId: string) {
      return (yield* call("GET", "/v1/loops/sessions/{session_id}", `/v1/loops/sessions/${id(sessionId)}`, Api.SessionResponse)).session
    }),
    createRun: makeCreateRun(c, url, listRuns),
    getRun: Effect.fn("Loops.getRun")(function* (runId: string) {
      return (yield* call("GET", "/v1/loops/runs/{run_id}", `/v1/loops/runs/${id(runId)}`, Api.RunResponse)).run
    }),
    listRuns,
    deactivateRun: Effect.fn("Loops.deactivateRun")(function* (runId: string) {
      return yield* call("POST", "/v1/loops/runs/{run_id}/deactivate", `/v1/loops/runs/${id(runId)}/deactivate`, Api.DeactivateRunResponse)
    }),
    getDeployment: Effect.fn("Loops.getDeployment")(function* (deploymentId: string) {
      return (yield* call("GET", "/v1/loops/deployments/{deployment_id}", `/v1/loops/deployments/${id(deploymentId)}`, Api.DeploymentResponse)).deployment
    }),
    listCheckpoints: Effect.fn("Loops.listCheckpoints")(function* (query: Api.CheckpointsQuery) {
      return (yield* call("GET", "/v1/loops/checkpoints", `/v1/loops/checkpoints${queryString(query)}`, Api.ListCheckpointsResponse)).checkpoints
    }),
    checkpointFiles: Effect.fn("Loops.checkpointFiles")(function* (checkpointId: string, page: Api.FilesPage = {}) {
      const path = `/v1/loops/checkpoints/${id(checkpointId)}/files${queryString({ page_size: page.page_size, page_token: page.page_token })}`
      return yield* call("GET", "/v1/loops/checkpoints/{checkpoint_id}/files", path, Api.CheckpointFilesResponse)
    }),
  }
}

/**
 * The control plane over `HttpClient`. Reads `BASETEN_API_KEY` and `LOOPS_API_URL`
 * unless `options` gives them.
 * @since 0.1.0 @category constructors
 */
export const make = Effect.fn("Loops.ControlPlane.make")(function* (options: Options = {}) {
  const http = yield* HttpClient.HttpClient
  const { apiKey, url } = yield* settings(options)
  const redact = redactor(Option.some(apiKey))
  const exchange = makeExchange(http, url, apiKey, redact, options.requestTimeout ?? "30 seconds")
  return ControlPlane.of(routes(makeCalls(exchange, url, redact, options.retry ?? Retry.standard), url, redact))
})

/**
 * The Loops control plane.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { ControlPlane } from "./src/backends/loops/ControlPlane.ts"
 * const runs = Effect.gen(function* () {
 *   const cp = yield* ControlPlane
 *   return yield* cp.listRuns()
 * }).pipe(Effect.provide(ControlPlane.layer()))
 * // => Effect<ReadonlyArray<Run>, LoopsError>
 * ```
 * @since 0.1.0 @category services
 */
export class ControlPlane extends Context.Service<ControlPlane, ControlPlaneShape>()("gyre/loops/ControlPlane") {
  /** Over a given `HttpClient`; key and URL from `options`, else `BASETEN_API_KEY` and `LOOPS_API_URL`. */
  static readonly layerNoDeps = (options: Options = {}): Layer.Layer<ControlPlane, LoopsError, HttpClient.HttpClient> => Layer.effect(ControlPlane, make(options))
  /** On gyre's undici client. */
  static readonly layer = (options: Options = {}): Layer.Layer<ControlPlane, LoopsError> => ControlPlane.layerNoDeps(options).pipe(Layer.provide(PlatformHttpClient.layer))
}

/**
 * The run's OpenAI-compatible endpoint: agents written with the AI SDK, the `openai`
 * client or any other OpenAI-compatible client call it as they would call a hosted model,
 * and every answer is sampled from the run's policy through its `Sampler`.
 *
 * Routes (under `/v1`): `GET /models`, `POST /chat/completions`, `POST /completions`.
 * Each request names its episode by its API key (`Authorization: Bearer <key>`), which the
 * runner makes per episode (`open`) and retires when the episode ends (`close`); a
 * request with a key of no open episode is answered 401. Errors are OpenAI's shape,
 * `{ error: { message, type, code, param } }`, with a message that says what to do.
 *
 * @since 0.1.0
 */
import { Config, Context, Effect, Result, Schema } from "effect"
import { HttpServerRequest, HttpServerResponse } from "effect/http"
import { randomBytes } from "node:crypto"
import { decode } from "../util/Decode.ts"
import * as PlatformHttpServer from "../platform/HttpServer.ts"
import { Sampler } from "../services/Sampler.ts"
import { Tokenizer } from "../services/Tokenizer.ts"
import { forTokenizer } from "./ChatFormat.ts"
import * as Completions from "./Completions.ts"
import { ChatRequest, CompletionRequest, refusedField } from "./Protocol.ts"
import { Pieces } from "./SegmentedEncoding.ts"

/** The model name the endpoint serves (what `GET /v1/models` lists). @since 0.1.0 @category constants */
export const MODEL = "gyre-policy"

/** What opening an episode settles. @since 0.1.0 @category models */
export type SessionSpec = Omit<Completions.Session, "completions" | "limit" | "rewritten" | "refused">

/** @since 0.1.0 @category models */
export interface EndpointShape {
  /** the base URL an OpenAI client is given, ending in `/v1` */
  readonly baseURL: string
  readonly model: string
  /** opens an episode: its API key and its record, which the endpoint fills */
  readonly open: (spec: SessionSpec) => Effect.Effect<{ readonly apiKey: string; readonly session: Completions.Session }>
  /** retires an episode's key: later requests with it are answered 401 */
  readonly close: (apiKey: string) => Effect.Effect<void>
}

/** The run's agent endpoint. @since 0.1.0 @category services */
export class Endpoint extends Context.Service<Endpoint, EndpointShape>()("gyre/agent/Endpoint") {}

const ERROR_TYPE: Record<number, string> = { 400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error", 405: "invalid_request_error" }

const refuse = (r: Completions.Refusal) =>
  HttpServerResponse.jsonUnsafe({ error: { message: r.message, type: ERROR_TYPE[r.status] ?? "server_error", code: r.code, param: null } }, { status: r.status })

const sse = (events: ReadonlyArray<unknown>) =>
  HttpServerResponse.text(`${events.map((e) => `data: ${JSON.stringify(e)}\n\n`).join("")}data: [DONE]\n\n`, {
    contentType: "text/event-stream",
    headers: { "cache-control": "no-cache" },
  })

/** The body as `schema` reads it, or a refusal naming the field that is wrong or refused. */
const readBody = <S extends Schema.ConstraintDecoder<unknown>>(schema: S, text: string) => {
  const parsed = Result.try(() => JSON.parse(text) as unknown)
  if (Result.isFailure(parsed)) return Effect.fail(new Completions.Refusal({ status: 400, code: "invalid_json", message: "the body is not JSON" }))
  const refused = refusedField(parsed.success)
  if (refused !== undefined) return Effect.fail(new Completions.Refusal({ status: 400, code: "unsupported_field", message: refused }))
  const decoded = decode(schema)(parsed.success)
  return Result.isSuccess(decoded)
    ? Effect.succeed(decoded.success)
    : Effect.fail(new Completions.Refusal({ status: 400, code: "invalid_field", message: decoded.failure }))
}

interface State {
  readonly served: Completions.Served
  readonly sessions: Map<string, Completions.Session>
  readonly retired: Set<string>
  /** requests answered so far: the serial number of the next completion's id */
  answered: number
}

/** A completion route: the episode of the key, then its request answered; a refusal is kept in the episode's record. */
const completion = (state: State, req: HttpServerRequest.HttpServerRequest, chat: boolean): Effect.Effect<Answer, Completions.Refusal> =>
  Effect.gen(function* () {
    const key = /^Bearer\s+(.+)$/i.exec(req.headers["authorization"] ?? "")?.[1]?.trim() ?? ""
    const session = state.sessions.get(key)
    if (session === undefined) {
      const message = state.retired.has(key) ? "this episode is over: its key is retired" : "missing or unknown API key: each episode's agent gets its own key (AgentContext.apiKey)"
      return yield* new Completions.Refusal({ status: 401, code: "invalid_api_key", message })
    }
    return yield* answer(state, session, req, chat).pipe(
      // the episode's record keeps its first refusal: the cause when it ends with no completion
      Effect.tapError((r) => Effect.sync(() => void (session.refused ??= { code: r.code, message: r.message }))),
    )
  })

/** An episode's request answered: the body read, the model checked, the handler run under an id of the endpoint's own. */
const answer = (state: State, session: Completions.Session, req: HttpServerRequest.HttpServerRequest, chat: boolean): Effect.Effect<Answer, Completions.Refusal> =>
  Effect.gen(function* () {
    const text = yield* req.text.pipe(Effect.mapError(() => new Completions.Refusal({ status: 400, code: "invalid_body", message: "the body could not be read" })))
    const body = chat ? yield* readBody(ChatRequest, text) : yield* readBody(CompletionRequest, text)
    if (body.model !== state.served.model) {
      return yield* new Completions.Refusal({ status: 404, code: "model_not_found", message: `model ${JSON.stringify(body.model)} is not served here: this run serves ${JSON.stringify(state.served.model)} (GET /v1/models lists it)` })
    }
    // a serial number: an id that names nothing of the episode or its key
    const id = String(++state.answered)
    return chat ? yield* Completions.chat(state.served, session, body as ChatRequest, id) : yield* Completions.text(state.served, session, body as CompletionRequest, id)
  })

/** An answer: one JSON body, or the events of a stream. */
type Answer = { readonly json: unknown } | { readonly events: ReadonlyArray<unknown> }

const route = (state: State, req: HttpServerRequest.HttpServerRequest, path: string): Effect.Effect<Answer, Completions.Refusal> => {
  if (path === "/v1/models") {
    return req.method === "GET"
      ? Effect.succeed({ json: { object: "list", data: [{ id: state.served.model, object: "model", created: 0, owned_by: "gyre" }] } })
      : Effect.fail(new Completions.Refusal({ status: 405, code: "method_not_allowed", message: "/v1/models takes GET" }))
  }
  if (path !== "/v1/chat/completions" && path !== "/v1/completions") {
    return Effect.fail(new Completions.Refusal({ status: 404, code: "not_found", message: `no route ${req.method} ${path.slice(0, 200)}: this endpoint serves GET /v1/models, POST /v1/chat/completions and POST /v1/completions` }))
  }
  if (req.method !== "POST") return Effect.fail(new Completions.Refusal({ status: 405, code: "method_not_allowed", message: `${path} takes POST` }))
  return completion(state, req, path === "/v1/chat/completions")
}

/** Where the endpoint listens, and the largest request body it reads. @since 0.1.0 @category models */
export interface ListenOptions {
  readonly port?: number
  readonly host?: string
  /** bytes a request body may hold (default `GYRE_AGENT_MAX_BODY_MB`, 8 MiB): a larger one gets 413 */
  readonly maxBodyBytes?: number
  /** whose endpoint it is, for the log line that announces it (an episode worker's: `episode worker 1`) */
  readonly owner?: string
}

/** The endpoint's body limit in MiB, a setting: far above any prompt a context holds, far below what stalls the run's thread. @since 0.1.0 @category config */
export const maxBodyMbConfig = Config.Int("GYRE_AGENT_MAX_BODY_MB").pipe(Config.withDefault(8))

/** A body over the limit as OpenAI's error shape, naming the limit and the setting that raises it. */
const bodyLimitOf = (maxBytes: number): PlatformHttpServer.BodyLimit => ({
  maxBytes,
  raiseWith: "the GYRE_AGENT_MAX_BODY_MB setting (MiB)",
  answer: (message) => ({ error: { message, type: "invalid_request_error", code: "body_too_large", param: null } }),
})

/**
 * Starts the endpoint on the run's `Sampler` and `Tokenizer` for the length of the scope
 * (loopback, a free port unless one is given).
 * @since 0.1.0 @category constructors
 */
export const make = Effect.fn("Agent.Endpoint.make")(function* (options: ListenOptions = {}) {
  const tokenizer = yield* Tokenizer
  const state: State = {
    served: { model: MODEL, tokenizer, sampler: yield* Sampler, format: forTokenizer(tokenizer), pieces: new Pieces() },
    sessions: new Map(),
    retired: new Set(),
    answered: 0,
  }
  const app = Effect.gen(function* () {
    const req = yield* HttpServerRequest.HttpServerRequest
    const path = Result.getOrElse(Result.try(() => new URL(req.url, "http://localhost").pathname), () => "")
    return yield* route(state, req, path).pipe(
      Effect.map((answer) => ("json" in answer ? HttpServerResponse.jsonUnsafe(answer.json) : sse(answer.events))),
      Effect.catchTag("Refusal", (r) => Effect.succeed(refuse(r))),
      Effect.catchCause((cause) =>
        Effect.as(Effect.logError(`agent endpoint: ${req.method} ${path} failed`, cause), refuse(new Completions.Refusal({ status: 500, code: "internal_error", message: "internal error" })))
      ),
    )
  })
  const host = options.host ?? "127.0.0.1"
  const maxBodyBytes = options.maxBodyBytes ?? (yield* maxBodyMbConfig) * 2 ** 20
  const server = yield* PlatformHttpServer.make({ port: options.port ?? 0, host, gracefulShutdown: "1 second", bodyLimit: bodyLimitOf(maxBodyBytes) })
  yield* server.serve(app)
  const port = server.address._tag === "UnixPathAddress" ? 0 : server.address.port
  const baseURL = `http://${host}:${port}/v1`
  yield* Effect.logInfo(`agent endpoint${options.owner === undefined ? "" : ` of ${options.owner}`}: serving ${MODEL} (${state.served.format.name} format) on ${baseURL}`)
  return Endpoint.of({
    baseURL,
    model: MODEL,
    open: (spec) =>
      Effect.sync(() => {
        const apiKey = `gyre-episode-${randomBytes(12).toString("hex")}`
        const session: Completions.Session = { ...spec, completions: [], rewritten: 0 }
        state.sessions.set(apiKey, session)
        return { apiKey, session }
      }),
    close: (apiKey) =>
      Effect.sync(() => {
        state.sessions.delete(apiKey)
        state.retired.add(apiKey)
      }),
  })
})

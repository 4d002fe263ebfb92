/**
 * gyre's Loops data-plane server: an embedded trainer and sampler behind the wire of
 * `DataWire.ts`, so that `--backend loops` runs with no account (`gyre serve --protocol
 * loops` behind a control plane that names it), and so that gyre's Loops client is
 * tested against a real server.
 *
 * | route | answer |
 * |---|---|
 * | `POST /{op}` (`DataWire.OPERATIONS`) | 202 `{operation_id}`; 400 without `Idempotency-Key`; 422 naming a field the wire does not have or a bad value |
 * | `GET /operations/{id}` | held up to `pollWait`: 408 while running; 200 `{status: "done", result}` or `{status: "error", error, error_class}`; 404 once forgotten |
 * | `GET /health`, `GET /policy_version` | 200 `{status: "ok"}`, `{policy_version}` |
 * | `GET /v1/models`, `POST /v1/completions` | the sampler (`SamplerRoutes.ts`) |
 *
 * Every other route is a 404 naming it, a known route with another method a 405. With
 * an API key, every request needs `Authorization: Api-Key <key>` (or `Bearer <key>`). A body
 * over `maxBodyBytes` (64 MiB) is a 413 naming the limit and `serve --max-body-mb`; bodies are
 * read as they stream in, and a large one's datums are checked with turns for other requests.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Option, Redacted, Result } from "effect"
import { HttpServerRequest, HttpServerResponse } from "effect/http"
import type { SamplerShape } from "../../../services/Sampler.ts"
import type { TrainerShape } from "../../../services/Trainer.ts"
import * as PlatformHttpServer from "../../../platform/HttpServer.ts"
import { sameKey } from "../../http/server/Dispatch.ts"
import * as DataWire from "../DataWire.ts"
import * as OperationQueue from "./OperationQueue.ts"
import * as SamplerRoutes from "./SamplerRoutes.ts"
import * as TrainerRoutes from "./TrainerRoutes.ts"

/** @since 0.1.0 @category models */
export interface Options {
  readonly trainer: TrainerShape
  readonly sampler: SamplerShape
  /** the base model's name (`GET /v1/models`) */
  readonly modelName: string
  /** the run this data plane serves: names its `bt://loops:<run>/...` checkpoints (default: the `run_id` a save names) and its adapter */
  readonly runId?: string | undefined
  readonly port?: number | undefined
  readonly host?: string | undefined
  readonly apiKey?: Redacted.Redacted<string> | undefined
  /** how long a poll is held before 408 (default 30 s, as a Loops trainer holds it) */
  readonly pollWait?: Duration.Input | undefined
  /** how long a finished operation's outcome is kept (default 10 minutes) */
  readonly resultTtl?: Duration.Input | undefined
  /** token ids must be below it (checked at submission when given) */
  readonly vocabSize?: number | undefined
  /** largest request body (default 64 MiB); beyond it a 413 names `serve --max-body-mb` */
  readonly maxBodyBytes?: number | undefined
  /** most datums in one forward(_backward) (default 4096) */
  readonly maxDatums?: number | undefined
}

/** @since 0.1.0 @category constants */
export const DEFAULT_MAX_BODY_BYTES = 64 * 2 ** 20

interface Reply {
  readonly status: number
  readonly body: unknown
}

const reply = (status: number, body: unknown): Reply => ({ status, body })
const detail = (status: number, message: string): Reply => reply(status, { detail: message })

const authorized = (o: Options, header: string | undefined) => {
  if (o.apiKey === undefined) return true
  const key = Redacted.value(o.apiKey)
  return header !== undefined && (sameKey(header, `${DataWire.AUTH_SCHEME} ${key}`) || sameKey(header, `Bearer ${key}`))
}

const refusal = (r: TrainerRoutes.Refusal) => detail(r.status, r.message)

/** The app's routes over the services. */
const makeRoutes = Effect.fnUntraced(function* (o: Options) {
  const runId = o.runId ?? "local"
  const queue = yield* OperationQueue.make({ ttl: o.resultTtl ?? "10 minutes" })
  const info = yield* Effect.orElseSucceed(o.trainer.info, () => ({ maxSequenceLength: 0 }))
  const ops = TrainerRoutes.make(o.trainer, o.runId, {
    vocabSize: o.vocabSize,
    maxLength: info.maxSequenceLength > 0 ? info.maxSequenceLength : Number.MAX_SAFE_INTEGER,
    maxDatums: o.maxDatums ?? 4096,
  })
  const published = Effect.map(o.trainer.info, (i) => i.version)
  const sampling = SamplerRoutes.make({ sampler: o.sampler, modelName: o.modelName, runId, published })
  const wait = o.pollWait ?? "30 seconds"

  const submit = (op: DataWire.Operation, text: string, body: unknown, key: string | undefined) =>
    Effect.gen(function* () {
      if (key === undefined || key === "") return detail(400, "header Idempotency-Key is missing: every submission carries one (the same key when it is sent again)")
      const work = yield* ops[op](body)
      const id = yield* queue.submit(op, key, text, work).pipe(Effect.mapError((c) => new TrainerRoutes.Refusal({ status: 409, message: c.message })))
      return reply(202, { operation_id: id })
    }).pipe(Effect.catchTag("Refusal", (r) => Effect.succeed(refusal(r))))

  const poll = (id: string) =>
    Effect.gen(function* () {
      const outcome = yield* queue.await(id, wait)
      if (outcome === undefined) return detail(404, `operation ${id.slice(0, 100)} is unknown here (never submitted, or its result expired): submit it again with its Idempotency-Key`)
      if (Option.isNone(outcome)) return detail(408, "the operation is still running: poll again")
      const o = outcome.value
      return o.status === "done" ? reply(200, { status: "done", result: o.result }) : reply(200, TrainerRoutes.errorBody(o.error))
    })

  return { queue, submit, poll, sampling, published }
})

type Routes = Effect.Success<ReturnType<typeof makeRoutes>>

/** Bodies longer than this get a turn for other requests before they are parsed. */
const LARGE_BODY = 2 ** 20

const GETS = new Set(["/health", "/policy_version", "/v1/models"])
const POSTS = new Set<string>([...DataWire.OPERATIONS.map((op) => `/${op}`), "/v1/completions"])

/** One request's answer. */
const route = (r: Routes, method: string, path: string, text: string, headers: Readonly<Record<string, string | undefined>>): Effect.Effect<Reply> =>
  Effect.gen(function* () {
    if (method === "GET") {
      if (path === "/health") return reply(200, { status: "ok" })
      if (path === "/policy_version") return yield* Effect.match(r.published, { onSuccess: (v) => reply(200, { policy_version: v }), onFailure: (e) => detail(503, e.message) })
      if (path === "/v1/models") return yield* Effect.match(r.sampling.models, { onSuccess: (b) => reply(200, b), onFailure: refusal })
      if (path.startsWith("/operations/")) return yield* r.poll(path.slice("/operations/".length))
      return POSTS.has(path) ? detail(405, `${path} takes POST`) : detail(404, `no route GET ${path.slice(0, 200)} on this Loops data plane`)
    }
    if (method !== "POST" || !POSTS.has(path)) return GETS.has(path) ? detail(405, `${path} takes GET`) : detail(404, `no route ${method} ${path.slice(0, 200)} on this Loops data plane`)
    // a large body is parsed in one piece: let the requests that came in meanwhile go first
    if (text.length > LARGE_BODY) yield* PlatformHttpServer.yieldToOthers
    const parsed = Result.try(() => (text.trim() === "" ? {} : (JSON.parse(text) as unknown)))
    if (Result.isFailure(parsed)) return detail(400, "the body is not JSON")
    if (path === "/v1/completions") return yield* Effect.match(r.sampling.completions(parsed.success, headers), { onSuccess: (b) => reply(200, b), onFailure: refusal })
    return yield* r.submit(path.slice(1) as DataWire.Operation, text, parsed.success, headers[DataWire.Headers.idempotencyKey])
  })

/**
 * Serves the data plane on `options.host:options.port` for the length of the scope.
 * @since 0.1.0 @category constructors
 */
export const make = Effect.fn("Loops.DataPlaneServer.make")(function* (options: Options) {
  const routes = yield* makeRoutes(options)
  const app = Effect.gen(function* () {
    const req = yield* HttpServerRequest.HttpServerRequest
    const path = Result.try(() => decodeURIComponent(new URL(req.url, "http://localhost").pathname))
    const headers = req.headers as Readonly<Record<string, string | undefined>>
    const answer: Reply = Result.isFailure(path)
      ? detail(400, "the request URL does not parse")
      : !authorized(options, headers[DataWire.Headers.authorization])
      ? detail(401, "missing or wrong Authorization (send Authorization: Api-Key <key>)")
      : yield* Effect.flatMap(Effect.orElseSucceed(req.text, () => ""), (text) => route(routes, req.method, path.success, text, headers)).pipe(
        Effect.catchCause((cause) => Effect.as(Effect.logError(`${req.method} ${path.success} failed`, cause), detail(500, "internal error"))),
      )
    return HttpServerResponse.jsonUnsafe(answer.body, { status: answer.status })
  })
  const host = options.host ?? "127.0.0.1"
  const server = yield* PlatformHttpServer.make({
    port: options.port ?? 0,
    host,
    gracefulShutdown: "1 second",
    bodyLimit: { maxBytes: options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES, raiseWith: "serve --max-body-mb" },
  })
  yield* server.serve(app)
  const port = server.address._tag === "UnixPathAddress" ? 0 : server.address.port
  const url = `http://${host === "0.0.0.0" ? "127.0.0.1" : host}:${port}`
  yield* Effect.logInfo(`serving ${options.modelName} over the Loops data plane on ${url} (run ${options.runId ?? "local"}; trainer and sampler routes on one server)`)
  return {
    url,
    /** trainer operations run */
    operations: routes.queue.ran,
  }
})

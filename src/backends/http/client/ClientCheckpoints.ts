/**
 * Downloading a checkpoint's state file from a Tinker-protocol server: the archive route
 * (`GET /api/v1/training_runs/{model_id}/checkpoints/{checkpoint_id}/archive`) answers
 * a download URL, as JSON `{"url", "expires"}` or as a redirect (`Location`), and the URL
 * gives the bytes (a tar holding the state file, from gyre's `serve`). The API key goes to the archive route only, never to the download URL
 * (which carries its own credential and may lie on another host). Failures are retried
 * as submissions are (`Retry.ts`), each retry logged at warning level; a 4xx fails at
 * once with the server's message. A 503 from the archive route (an archive still being
 * built) is waited out: the official SDK sleeps 30 s between up to 6 tries
 * (`resources/weights.py`, `get_checkpoint_archive_url`); gyre waits the server's
 * `Retry-After` when it sends one (up to the policy's `maxRetryAfter`), else backs off
 * exponentially to 30 s, for up to the policy's `maxElapsed` (5 minutes).
 *
 * @since 0.1.0
 */
import { Clock, Duration, Effect, Option, Redacted, Result, Schedule, Schema } from "effect"
import { HttpClient, type HttpClientError, HttpClientRequest, type HttpClientResponse } from "effect/http"
import { BackendError } from "../../../contract/Contract.ts"
import { apiKeyConfig } from "./Client.ts"
import * as Retry from "./Retry.ts"
import * as Tar from "../wire/Tar.ts"
import { CLIENT_VERSION, failureOf, headerValueProblem, isUnreachable, redactor, toBackendError } from "./Transport.ts"
import * as Wire from "../wire/Wire.ts"

/** A `tinker://<model_id>/<kind>/<name>` path, taken apart. @since 0.1.0 @category models */
export interface TinkerPath {
  readonly modelId: string
  readonly kind: "weights" | "sampler_weights"
  readonly name: string
  /** `<kind>/<name>`, the protocol's `checkpoint_id` */
  readonly checkpointId: string
}

/**
 * Takes a `tinker://` checkpoint path apart (the SDK's rule: three parts after the
 * scheme, the second `weights` or `sampler_weights`), or says what is wrong with it.
 * @since 0.1.0 @category combinators
 */
export const parseTinkerPath = (path: string): Result.Result<TinkerPath, string> => {
  // every group of the pattern takes part in a match: they are missing only when it does not match
  const [, modelId, kind, name] = /^tinker:\/\/([^/]+)\/(weights|sampler_weights)\/([^/]+)$/.exec(path) ?? []
  if (modelId === undefined || kind === undefined || name === undefined) {
    return Result.fail(`${JSON.stringify(path.slice(0, 200))} is not a checkpoint path: expected tinker://<model_id>/weights/<name>`)
  }
  return Result.succeed({ modelId, kind: kind as TinkerPath["kind"], name, checkpointId: `${kind}/${name}` })
}

/** The archive route of a checkpoint, below the API prefix. @since 0.1.0 @category combinators */
export const archivePath = (p: TinkerPath): string =>
  `/training_runs/${encodeURIComponent(p.modelId)}/checkpoints/${p.kind}/${encodeURIComponent(p.name)}/archive`

/** @since 0.1.0 @category models */
export interface DownloadOptions {
  /** the server, e.g. `http://127.0.0.1:8080` */
  readonly baseUrl: string | URL
  /** overrides `TINKER_API_KEY` / `BASETEN_API_KEY` */
  readonly apiKey?: Redacted.Redacted<string> | undefined
  /** retry delays and limits (default `Retry.standard`) */
  readonly retry?: Retry.Policy | undefined
  /** timeout of each of the two requests (default 5 minutes) */
  readonly timeout?: Duration.Input | undefined
}

/** The archive route's JSON answer. @since 0.1.0 @category responses */
export const ArchiveResponse = Schema.Struct({
  url: Schema.String,
  expires: Schema.optional(Schema.NullOr(Schema.String)),
})

/**
 * The state file inside a downloaded archive (a tar whose one `.ckpt` file is gyre's
 * state, beside the PEFT adapter files), or the bytes as they are when they are not such
 * an archive (a server that hands out the state file itself).
 * @since 0.1.0 @category combinators
 */
export const stateOfArchive = (bytes: Uint8Array): Uint8Array => {
  const files = Tar.unpack(bytes)
  if (typeof files === "string") return bytes
  const states = files.filter((f) => f.name.endsWith(".ckpt"))
  return states.length === 1 ? states[0]!.bytes : bytes
}

/** What the two requests of a download share. */
interface Context {
  readonly http: HttpClient.HttpClient
  readonly apiKey: Option.Option<Redacted.Redacted<string>>
  readonly redact: (text: string) => string
  /** the server's base URL */
  readonly where: string
  readonly timeout: Duration.Input
  readonly policy: Retry.Policy
}

/** The operation its errors and logs name. */
const OPERATION = "download checkpoint"

/** One GET's answer; `location` is the redirect's target when one was followed. */
interface Answer {
  readonly res: HttpClientResponse.HttpClientResponse
  readonly location: string | undefined
}

/** No answer from `url`: unreachable (its host refused or is unknown) or a transport failure, redacted. */
const noAnswer = (ctx: Context, url: string, e: HttpClientError.HttpClientError): Retry.HttpFailure => {
  const cause = e.reason._tag === "TransportError" ? e.reason.cause : undefined
  const text = cause instanceof Error ? cause.message : e.reason._tag === "TransportError" ? (e.reason.description ?? e.reason._tag) : e.reason._tag
  return isUnreachable(cause)
    ? new Retry.HttpFailure({ kind: "Unreachable", message: ctx.redact(`nothing answers at ${new URL(url).origin}: ${text}; check the URL and that the server is running`) })
    : new Retry.HttpFailure({ kind: "Transport", message: ctx.redact(`no answer from ${new URL(url).origin}: ${text}`) })
}

/** One GET; a status of 300 and above is a failure of the kind `Retry.ts` gives it, unless `redirect` and a `Location` came with it. */
const get = (ctx: Context, url: string, headers: Record<string, string>, redirect: boolean) =>
  ctx.http.execute(HttpClientRequest.setHeaders(HttpClientRequest.get(url), { "user-agent": CLIENT_VERSION, ...headers })).pipe(
    Effect.provideService(HttpClient.TracerDisabledWhen, () => true),
    Effect.timeoutOrElse({ duration: ctx.timeout, orElse: () => Effect.fail(new Retry.HttpFailure({ kind: "Transport", message: `no answer from ${url} in time` })) }),
    Effect.catchTag("HttpClientError", (e) => Effect.fail(noAnswer(ctx, url, e))),
    Effect.flatMap((res: HttpClientResponse.HttpClientResponse): Effect.Effect<Answer, Retry.HttpFailure> => {
      const location = res.headers["location"]
      if (redirect && res.status >= 300 && res.status < 400 && typeof location === "string") return Effect.succeed({ res, location })
      if (Retry.kindOfStatus(res.status) === undefined) return Effect.succeed({ res, location: undefined })
      return Effect.flatMap(Effect.all([Effect.orElseSucceed(res.text, () => ""), Clock.currentTimeMillis]), ([text, now]) =>
        Effect.fail(failureOf(res.status, res.headers, text, now, ctx.redact)),
      )
    }),
  )

/** Retried as a submission is, each retry logged; the final failure as a `BackendError`. */
const retried = <A>(ctx: Context, what: string, e: Effect.Effect<A, Retry.HttpFailure>) =>
  e.pipe(
    Effect.retry(
      Schedule.tap(Retry.submission(ctx.policy), (meta) =>
        Effect.logWarning(
          `${OPERATION}: ${what}: ${meta.input.status !== undefined ? `HTTP ${meta.input.status}: ` : ""}${meta.input.message}` +
            `${meta.input.status === 503 && what === "the archive route" ? " (an archive still being built)" : ""}; retry ${meta.attempt} in ${Duration.format(meta.output.delay)}`,
        ),
      ),
    ),
    Effect.mapError((f) => toBackendError(OPERATION, f)),
  )

/** The download URL the archive route answers: its redirect's `Location`, or the `url` of its JSON. */
const downloadUrl = (ctx: Context, archiveUrl: string) =>
  retried(
    ctx,
    "the archive route",
    Effect.gen(function* () {
      const { location, res } = yield* get(
        ctx,
        archiveUrl,
        { accept: "application/json", ...(Option.isSome(ctx.apiKey) ? { [Wire.Headers.apiKey]: Redacted.value(ctx.apiKey.value) } : {}) },
        true,
      )
      if (location !== undefined) return location
      const text = yield* Effect.orElseSucceed(res.text, () => "")
      const body = Result.try(() => JSON.parse(text) as unknown)
      const answer = Result.isSuccess(body) ? Schema.decodeUnknownOption(ArchiveResponse)(body.success) : Option.none()
      if (Option.isNone(answer)) return yield* new Retry.HttpFailure({ kind: "Decode", message: `${archiveUrl} answered ${res.status} without a download URL ({"url", "expires"})` })
      return answer.value.url
    }),
  )

/** The state file at the download URL (without the API key: the URL carries its own credential). */
const downloadState = (ctx: Context, target: string, tinkerPath: string) =>
  retried(
    ctx,
    "the download",
    Effect.gen(function* () {
      const { res } = yield* get(ctx, target, { accept: "application/octet-stream" }, false)
      const bytes = yield* res.arrayBuffer.pipe(Effect.mapError(() => new Retry.HttpFailure({ kind: "Transport", message: `the download of ${tinkerPath} broke off` })))
      return stateOfArchive(new Uint8Array(bytes))
    }),
  )

/**
 * Downloads the file of a checkpoint (`tinker://<model_id>/weights/<name>`) from the
 * server at `baseUrl`. Fails with `BackendError`: `InvalidInput` for a path that is not a
 * checkpoint's or a checkpoint the server does not have (its message), `Unavailable` /
 * `Transport` for a server that cannot be reached.
 * @since 0.1.0 @category constructors
 */
export const download = Effect.fn("Http.downloadCheckpoint")(function* (tinkerPath: string, options: DownloadOptions) {
  const parsed = parseTinkerPath(tinkerPath)
  if (Result.isFailure(parsed)) return yield* new BackendError({ reason: "InvalidInput", operation: OPERATION, message: parsed.failure })
  const http = yield* HttpClient.HttpClient
  const apiKey = options.apiKey !== undefined ? Option.some(options.apiKey) : yield* apiKeyConfig
  const problem = Option.isSome(apiKey) ? headerValueProblem(Redacted.value(apiKey.value)) : undefined
  if (problem !== undefined) return yield* new BackendError({ reason: "InvalidInput", operation: OPERATION, message: `the API key has ${problem}; an HTTP header cannot carry it` })
  const base = new URL(String(options.baseUrl))
  const ctx: Context = {
    http,
    apiKey,
    redact: redactor(apiKey),
    where: `${base.origin}${base.pathname.replace(/\/+$/, "")}`,
    timeout: options.timeout ?? "5 minutes",
    policy: options.retry ?? Retry.standard,
  }
  const url = yield* downloadUrl(ctx, `${ctx.where}${Wire.API_PREFIX}${archivePath(parsed.success)}`)
  return yield* downloadState(ctx, new URL(url, `${ctx.where}/`).toString(), tinkerPath)
})

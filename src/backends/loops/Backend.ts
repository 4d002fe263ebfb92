/**
 * `--backend loops`: a `Trainer`, `Sampler` and `Reference` on a Loops run that lives
 * as long as the layer. Building the layer provisions (or, on `--resume`, finds) the
 * run and waits for it to be ready (`Provision.ts`), then connects to its data plane
 * (`DataPlane.ts`); closing it stops the data plane's session first and then
 * deactivates the run, exactly once, whether training ended, failed or was interrupted.
 * While training, failures of the run's data plane make gyre ask the control plane
 * whether the run has ended, and a run that has ended fails the training at once,
 * naming its status (`RunWatch.ts`).
 *
 * @since 0.1.0
 */
import { type Config, Context, Duration, Effect, Layer, Redacted } from "effect"
import { HttpClient } from "effect/http"
import { BackendError } from "../../contract/Contract.ts"
import * as PlatformHttpClient from "../../platform/HttpClient.ts"
import { Reference } from "../../services/Reference.ts"
import { Sampler } from "../../services/Sampler.ts"
import { Trainer } from "../../services/Trainer.ts"
import * as ClientReference from "../http/client/ClientReference.ts"
import type * as Retry from "../http/client/Retry.ts"
import * as ControlPlane from "./ControlPlane.ts"
import * as DataPlane from "./DataPlane.ts"
import { LoopsError } from "./Errors.ts"
import * as Provision from "./Provision.ts"
import * as RunRecord from "./RunRecord.ts"
import * as RunWatch from "./RunWatch.ts"

/** @since 0.1.0 @category models */
export interface Options extends Omit<Provision.Options, "baseModel"> {
  /** the base model; without it the layer fails listing the models Loops supports */
  readonly baseModel: string | undefined
  /** the control plane (default: the one the run folder's `loops.json` names, else `LOOPS_API_URL`, else Baseten's API) */
  readonly url?: string | undefined
  /** overrides `BASETEN_API_KEY` */
  readonly apiKey?: Redacted.Redacted<string> | undefined
  /** retry policy of the control plane and the data plane */
  readonly retry?: Retry.Policy | undefined
  /**
   * `--teacher`: `loops:<run id>`, a Loops run left up whose sampler scores the student's
   * tokens; or, when the run speaks Tinker's protocol, a sampler path or a base model
   */
  readonly teacher?: string | undefined
}

/** The run `--teacher loops:<id>` names, ready; or the model a Tinker-protocol server scores with. */
const teacherOf = (teacher: string | undefined, options: Options) =>
  Effect.gen(function* () {
    if (teacher === undefined) return undefined
    const id = /^loops:(.+)$/.exec(teacher)?.[1]
    if (id === undefined) return ClientReference.scoredModelOf(teacher)
    const run = yield* Provision.awaitReady(id, "", { readyTimeout: options.readyTimeout ?? "2 minutes" }).pipe(
      Effect.mapError((e) => new LoopsError({ reason: e.reason, route: "--teacher", message: `--teacher ${teacher}: ${e.message} (the teacher is a Loops run left up with --keep-run)` })),
    )
    yield* Effect.logInfo(`loops: the teacher is run ${run.id} (${run.baseModel}), scored by its sampler ${run.samplerUrl}`)
    if (options.baseModel !== undefined && run.baseModel !== options.baseModel) {
      yield* Effect.logWarning(`loops: the teacher's base model ${run.baseModel} is not the student's ${options.baseModel}: its log-probs are compared token by token, so their tokenizers must be the same`)
    }
    return { run }
  })

/** A run's services, with the control plane it was provisioned on, given an `HttpClient` and a `Scope`. */
const make = Effect.fn("Loops.Backend.make")(function* (options: Options) {
  const apiKey = options.apiKey ?? (yield* ControlPlane.apiKeyConfig.pipe(
    Effect.mapError(() => new LoopsError({ reason: "Config", route: "BASETEN_API_KEY", message: "--backend loops needs BASETEN_API_KEY (a Baseten API key with Loops access)" })),
  ))
  // a resumed folder goes back to the control plane its runs are on
  const recorded = options.url === undefined ? (yield* RunRecord.read(options.runDir).pipe(Effect.orElseSucceed(() => undefined)))?.controlPlane : undefined
  const cp = yield* ControlPlane.make({ apiKey, url: options.url ?? recorded, retry: options.retry })
  const baseModel = options.baseModel
  if (baseModel === undefined) {
    const models = yield* cp.capabilities.pipe(
      Effect.map((c) => c.supported_models.map((m) => m.model_name).join(", ")),
      Effect.orElseSucceed(() => "see GET /v1/loops/capabilities"),
    )
    return yield* new LoopsError({ reason: "InvalidInput", route: "--model", message: `--backend loops needs --model <base model>; Loops supports: ${models}` })
  }
  // the teacher first: a teacher run that is gone stops the start before a run is provisioned
  const teacher = yield* teacherOf(options.teacher, options).pipe(Effect.provideService(ControlPlane.ControlPlane, cp))
  const run = yield* Provision.acquire({ ...options, baseModel }).pipe(Effect.provideService(ControlPlane.ControlPlane, cp))
  // the documented context length of the base model, when the control plane lists it
  const context = yield* cp.capabilities.pipe(
    Effect.map((c) => c.supported_models.find((m) => m.model_name === run.baseModel)?.max_context_length ?? 0),
    Effect.orElseSucceed(() => 0),
  )
  // the data plane's failures make gyre ask the control plane whether the run has ended
  const watch = yield* RunWatch.make(cp, run, { runDir: options.runDir, checkInterval: options.pollInterval })
  const http = yield* HttpClient.HttpClient
  const services = yield* DataPlane.make(run, {
    teacher,
    apiKey,
    loraRank: options.loraRank,
    maxSequenceLength: context,
    ...(options.retry !== undefined ? { retry: options.retry } : {}),
    readyTimeout: options.readyTimeout ?? Provision.DEFAULT_READY_TIMEOUT,
  }).pipe(Effect.provideService(HttpClient.HttpClient, watch.client(http)))
  yield* watch.arm
  yield* RunRecord.update(options.runDir, run.id, (r) => ({ ...r, dataPlane: services.protocol })).pipe(Effect.ignore)
  yield* Effect.logInfo(
    `loops: training on run ${run.id} over the ${services.protocol === "loops" ? "Loops data plane (submit + operations)" : "Tinker HTTP protocol"}: trainer ${run.trainerUrl}, sampler ${run.samplerUrl}`,
  )
  return watch.services(services)
})

/** A `LoopsError` as the `BackendError` the runner reports (its message unchanged). */
const asBackendError = (e: LoopsError | BackendError | Config.ConfigError): BackendError =>
  e._tag === "BackendError"
    ? e
    : e._tag !== "LoopsError"
    ? new BackendError({ reason: "InvalidInput", operation: "loops", message: String(e) })
    : new BackendError({
      reason: e.reason === "NotReady" ? "Timeout" : e.reason === "Unavailable" ? "Unavailable" : e.reason === "InvalidInput" || e.reason === "Config" ? "InvalidInput" : "Rejected",
      operation: `loops ${e.route}`,
      message: e.message,
    })

/**
 * `Trainer | Sampler | Reference` on a Loops run, on gyre's undici client.
 *
 * @example
 * ```ts
 * import * as Loops from "./src/backends/loops/Backend.ts"
 * const backend = Loops.layer({ baseModel: "Qwen/Qwen3-8B", loraRank: 16, runDir: "runs/q", resume: false })
 * // => Layer<Trainer | Sampler | Reference, BackendError>
 * ```
 * @since 0.1.0 @category layers
 */
export const layer = (options: Options): Layer.Layer<Trainer | Sampler | Reference, BackendError> =>
  Layer.effectContext(
    Effect.map(make(options), (s) => Context.make(Trainer, s.trainer).pipe(Context.add(Sampler, s.sampler), Context.add(Reference, s.reference))).pipe(
      Effect.mapError(asBackendError),
    ),
  ).pipe(Layer.provide(PlatformHttpClient.layer))

/** The ready timeout from `--loops-ready-timeout` seconds. @since 0.1.0 @category combinators */
export const readyTimeoutOf = (seconds: number | undefined): Duration.Input => (seconds === undefined ? Provision.DEFAULT_READY_TIMEOUT : Duration.seconds(seconds))

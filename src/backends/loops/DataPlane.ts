/**
 * The Loops data plane: how gyre trains and samples on a provisioned run, whichever
 * protocol the run's trainer speaks.
 *
 * Loops documents its data plane only through its Python SDK; what gyre established
 * from public evidence, and what it assumes, is in `DataWire.ts`. A run's `base_url` is
 * probed before anything is sent to it:
 *
 * - `GET {base_url}/policy_version` answers a version: the Loops data plane (the trainer
 *   `LoopsTrainer.ts`, the sampler `LoopsSampler.ts` at the paired sampler's URL);
 * - else `GET {base_url}/api/v1/healthz` answers: Tinker's HTTP protocol, spoken by
 *   gyre's Tinker client (`backends/http/Client.ts`), the trainer at the run's URL and
 *   the sampler at the sampler's (a deployment that serves Tinker's wire);
 * - else the run is refused, naming both answers.
 *
 * The protocol is logged and written to the run folder's `loops.json` (`dataPlane`).
 * On the Loops protocol there is no reference (base-model) scoring route gyre could
 * find, so a KL penalty (`--kl-coef`) is refused there, saying so.
 *
 * @since 0.1.0
 */
import { type Duration, Effect, Option, Redacted, Result } from "effect"
import { HttpClient } from "effect/http"
import { BackendError, type ModelInput, modelInputFromTokens } from "../../contract/Contract.ts"
import { decode } from "../../util/Decode.ts"
import * as Reference from "../../services/Reference.ts"
import * as Http from "../http/client/Client.ts"
import * as Retry from "../http/client/Retry.ts"
import * as Transport from "../http/client/Transport.ts"
import * as DataWire from "./DataWire.ts"
import { LoopsError } from "./Errors.ts"
import * as LoopsSampler from "./LoopsSampler.ts"
import * as LoopsTrainer from "./LoopsTrainer.ts"
import * as Operations from "./Operations.ts"
import type { ReadyRun } from "./Provision.ts"

/** The protocols a run's data plane may speak. @since 0.1.0 @category models */
export type Protocol = "loops" | "tinker"

/** @since 0.1.0 @category models */
export interface Options {
  /** the Baseten API key; the data plane gets the same key as the control plane */
  readonly apiKey: Redacted.Redacted<string>
  /** LoRA rank of the trained adapter (the run's `lora_rank`) */
  readonly loraRank?: number | undefined
  /** the base model's context length (the control plane's capabilities); 0 when unknown */
  readonly maxSequenceLength?: number | undefined
  /** the data plane's retry policy (default the Tinker SDK's) */
  readonly retry?: Retry.Policy | undefined
  /** how long a sample pinned to a policy version waits for it */
  readonly readyTimeout?: Duration.Input | undefined
  /** skip the probe and speak this protocol */
  readonly protocol?: Protocol | undefined
  /**
   * a distillation teacher, the `Reference` in place of the base model: another Loops run
   * (left up) whose paired sampler scores the tokens, over the Loops protocol; or, on a
   * run that speaks Tinker's protocol, a sampler path or base model its server serves
   */
  readonly teacher?: { readonly run: ReadyRun } | Http.Options["reference"] | undefined
}

/** The Loops API's default LoRA rank. */
const DEFAULT_RANK = 64

const auth = (key: string) => [DataWire.Headers.authorization, `${DataWire.AUTH_SCHEME} ${key}`] as const

/** A transport to `url` with the data plane's authorization and no route prefix. */
const transportTo = (http: HttpClient.HttpClient, url: string, apiKey: Redacted.Redacted<string>) =>
  Transport.make({ http, base: new URL(url), apiKey: Option.some(apiKey), prefix: "", auth, protobufResults: false })

/**
 * The Tinker-protocol client options for a run: the trainer at `run.base_url`, the
 * sampler at the paired sampler's `base_url`.
 *
 * @example
 * ```ts
 * clientOptions(run, { apiKey })
 * // => { baseUrl: run.trainerUrl, samplerBaseUrl: run.samplerUrl, baseModel: run.baseModel, ... }
 * ```
 * @since 0.1.0 @category combinators
 */
export const clientOptions = (run: ReadyRun, options: Options): Http.Options => ({
  baseUrl: run.trainerUrl,
  samplerBaseUrl: run.samplerUrl,
  baseModel: run.baseModel,
  loraRank: options.loraRank,
  apiKey: options.apiKey,
  tags: [`loops-run:${run.id}`],
  ...(options.retry !== undefined ? { retry: options.retry } : {}),
  ...(options.readyTimeout !== undefined ? { readyTimeout: options.readyTimeout } : {}),
  ...(options.teacher !== undefined && !("run" in options.teacher) ? { reference: options.teacher } : {}),
})

/** One probe: the status of a GET and whether its body is what `check` wants. */
const probeGet = (http: HttpClient.HttpClient, url: string, apiKey: Redacted.Redacted<string>, check: (body: unknown) => boolean) =>
  transportTo(http, url, apiKey).send("GET", "", undefined, {}, "30 seconds").pipe(
    Effect.map((x) => (check(x.body) ? ("yes" as const) : `HTTP ${x.status} with another body`)),
    Effect.retry({ schedule: Retry.submission(Retry.policy({ maxElapsed: "2 minutes" })), while: (f) => f.kind !== "Fatal" }),
    Effect.catch((f) => Effect.succeed(f.status !== undefined ? `HTTP ${f.status}` : f.message)),
  )

/**
 * Which protocol the trainer at `url` speaks (see the module doc).
 * @since 0.1.0 @category combinators
 */
export const probe = Effect.fn("Loops.DataPlane.probe")(function* (url: string, apiKey: Redacted.Redacted<string>) {
  const http = yield* HttpClient.HttpClient
  const base = url.replace(/\/+$/, "")
  const loops = yield* probeGet(http, `${base}/policy_version`, apiKey, (b) => Result.isSuccess(decode(DataWire.PolicyVersion)(b)))
  if (loops === "yes") return "loops" as const
  const tinker = yield* probeGet(http, `${base}/api/v1/healthz`, apiKey, () => true)
  if (tinker === "yes") return "tinker" as const
  return yield* new LoopsError({
    reason: "Failed",
    route: "data plane",
    message: `the run's trainer at ${base} speaks neither the Loops data plane (GET /policy_version: ${loops}) nor Tinker's (GET /api/v1/healthz: ${tinker})`,
  })
})

/** The run's services on the Loops data plane. */
const loopsServices = (http: HttpClient.HttpClient, run: ReadyRun, options: Options) => {
  const retry = options.retry ?? Retry.standard
  const ops = Operations.make({ transport: transportTo(http, run.trainerUrl, options.apiKey), retry, pollTimeout: "60 seconds", requestTimeout: "60 seconds" })
  const trainer = LoopsTrainer.make(ops, { runId: run.id, baseModel: run.baseModel, loraRank: options.loraRank ?? DEFAULT_RANK, maxSequenceLength: options.maxSequenceLength ?? 0 })
  const sampler = LoopsSampler.make({
    transport: transportTo(http, run.samplerUrl, options.apiKey),
    retry,
    readyTimeout: options.readyTimeout ?? "10 minutes",
    trainerVersion: LoopsTrainer.policyVersion(ops),
  })
  // a teacher run's reference replaces this one (make)
  const reference = Reference.unavailable(
    options.teacher !== undefined
      ? "on the Loops data plane a teacher is another Loops run, left up (--keep-run), whose sampler scores the student's tokens: --teacher loops:<run id>"
      : "the Loops data plane has no base-model scoring route gyre knows of (its sampler serves the trained policy), so a KL penalty to the base model cannot run on --backend loops; use --kl-coef 0",
  )
  return { trainer, sampler, reference }
}

/** Sequences a teacher run scores at once. */
const TEACHER_CONCURRENCY = 8

/**
 * A teacher run's paired sampler as the `Reference`: `compute_logprobs` (prompt log-probs
 * of its newest policy) of every sequence, over the Loops sampler's wire.
 */
const teacherScorer = (http: HttpClient.HttpClient, run: ReadyRun, options: Options, retry: Retry.Policy): Reference.ReferenceShape => {
  const scorer = LoopsSampler.make({
    transport: transportTo(http, run.samplerUrl, options.apiKey),
    retry,
    readyTimeout: options.readyTimeout ?? "10 minutes",
    trainerVersion: Effect.succeed(0),
  })
  const named = <A>(effect: Effect.Effect<A, BackendError>) =>
    effect.pipe(Effect.mapError((e) => new BackendError({ reason: e.reason, operation: "teacher", message: `the teacher, Loops run ${run.id} (${run.baseModel}), at ${run.samplerUrl}: ${e.message}` })))
  const logprobs = (inputs: ReadonlyArray<ModelInput>) => named(Effect.forEach(inputs, (input) => scorer.computeLogprobs(input), { concurrency: TEACHER_CONCURRENCY }))
  // two tokens scored must give two log-probs: a sampler that sends none back is refused at the start
  const check = Effect.flatMap(logprobs([modelInputFromTokens([0, 0])]), ([lps]) =>
    lps?.length === 2 ? Effect.void : Effect.fail(new BackendError({ reason: "Unavailable", operation: "teacher", message: `the teacher, Loops run ${run.id}, sent no prompt log-probs back` })))
  return { logprobs, check }
}

/**
 * A teacher run's `Reference`, whichever protocol the student's run speaks: the teacher's
 * trainer is probed, and only a run on the Loops data plane is scored (its paired
 * sampler's prompt log-probs); a teacher on Tinker's protocol is refused, saying what to give.
 */
const teacherRunReference = Effect.fnUntraced(function* (http: HttpClient.HttpClient, run: ReadyRun, options: Options) {
  const protocol = yield* probe(run.trainerUrl, options.apiKey)
  if (protocol !== "loops") {
    return yield* new LoopsError({
      reason: "InvalidInput",
      route: "--teacher",
      message: `--teacher loops:${run.id}: that run speaks Tinker's protocol, whose sampler gyre does not score as a teacher; name one of its sampler checkpoints instead (--teacher <its sampler path>)`,
    })
  }
  return teacherScorer(http, run, options, options.retry ?? Retry.standard)
})

/**
 * The data plane's services for a ready run, in a scope, with the protocol it speaks
 * (given an `HttpClient`).
 * @since 0.1.0 @category constructors
 */
export const make = Effect.fn("Loops.DataPlane.make")(function* (run: ReadyRun, options: Options) {
  const http = yield* HttpClient.HttpClient
  const protocol = options.protocol ?? (yield* probe(run.trainerUrl, options.apiKey))
  const teacher = options.teacher !== undefined && "run" in options.teacher ? yield* teacherRunReference(http, options.teacher.run, options) : undefined
  if (protocol === "loops") {
    const services = loopsServices(http, run, options)
    return { protocol, ...services, reference: teacher ?? services.reference }
  }
  const s = yield* Http.make(clientOptions(run, options))
  return { protocol, trainer: s.trainer, sampler: s.sampler, reference: teacher ?? s.reference }
})

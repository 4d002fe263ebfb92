/**
 * A Loops run for the length of a scope: found or created, waited for until ready, and
 * deactivated when the scope closes (at the end, on failure, on interruption), exactly
 * once, unless it is kept on purpose.
 *
 * - A new run: `POST /v1/loops/sessions`, then `POST /v1/loops/runs` (the run and its
 *   paired sampler). Only the run's id is read from the answer before its deactivation
 *   is registered; then it is written to the run folder's `loops.json`, and only then
 *   is the rest of the answer decoded, so that an answer gyre does not understand, or a
 *   crash at any later point, deactivates the run and leaves a trace. An answer with no
 *   readable id is followed by a look at the session's runs (`ControlPlane.ts`).
 * - Ready: the run is `ACTIVE`, its trainer deployment (`GET
 *   /v1/loops/deployments/{id}`, when the run has one) is `RUNNING`, its sampler is
 *   `ACTIVE` (`SCALED_TO_ZERO` counts as ready for both: it wakes on the first
 *   request), and both URLs are assigned. A failed state (`FAILED`, `STOPPED`,
 *   `PREEMPTED`, `DEPLOY_FAILED`, ..., or a run that has ended: `INACTIVE`, `FAILED`,
 *   `TERMINATED`, ...) fails at once, naming the status and what the control plane says
 *   of it. Another status the reference does not list (`DEPLOYING` for a run, say) is
 *   "not ready yet", logged once by name; so is a `base_url` still `null`. The run is
 *   polled (every 0.5 s at first, then up to every 10 s), each change of state is
 *   logged, and a run not ready within the ready timeout fails naming the run and the
 *   state it was in.
 * - The record: a run of the folder that gyre did not deactivate is checked at the next
 *   start. Still `ACTIVE`: `--resume` trains on it; a fresh start is refused, naming the
 *   run and the command that stops it. No longer active: the record says so, and
 *   `--resume` fails saying the run is gone and how to continue from the folder's last
 *   checkpoint on a new run (`--loops-new-run`).
 * - Release: `POST /v1/loops/runs/{run_id}/deactivate` (with retries), then the record
 *   marks the run deactivated. A deactivation that fails is logged as an error with the
 *   command to run and noted in `UnreleasedRuns` (so that `gyre run` ends with an error,
 *   not `done`); the record keeps the run live so that the next start reports it.
 *   With `keepRun`, a run that became ready is left up and the log names it and the
 *   command that stops it; a run that never became ready is deactivated all the same.
 *
 * @since 0.1.0
 */
import { Cause, Duration, Effect, Exit, Option, type Scope } from "effect"
import * as Api from "./Api.ts"
import { ControlPlane, stopCommand } from "./ControlPlane.ts"
import { LoopsError } from "./Errors.ts"
import * as RunRecord from "./RunRecord.ts"
import { UnreleasedRuns } from "./UnreleasedRuns.ts"

/** @since 0.1.0 @category models */
export interface Options {
  /** the base model (a Hugging Face id that `GET /v1/loops/capabilities` lists) */
  readonly baseModel: string
  /** LoRA rank (default the API's, 64) */
  readonly loraRank?: number | undefined
  /** the run's display name (default the base model) */
  readonly name?: string | undefined
  /** the run folder, where `loops.json` records the run */
  readonly runDir: string
  /** a resumed run folder: train on its live run if it has one */
  readonly resume: boolean
  /** leave a run that became ready up when the scope closes */
  readonly keepRun?: boolean | undefined
  /** on resume, when the folder's run is gone, provision a new one */
  readonly newRun?: boolean | undefined
  /** how long provisioning may take (default 30 minutes) */
  readonly readyTimeout?: Duration.Input | undefined
  /** the longest wait between two status polls (default 10 s; the first ones are shorter) */
  readonly pollInterval?: Duration.Input | undefined
}

/** The default ready timeout: cold starts take minutes. @since 0.1.0 @category constants */
export const DEFAULT_READY_TIMEOUT: Duration.Input = "30 minutes"

const TRAINER_READY: ReadonlySet<string> = new Set(["RUNNING", "SCALED_TO_ZERO"])
const TRAINER_FAILED: ReadonlySet<string> = new Set(["FAILED", "STOPPED", "PREEMPTED"])
const SAMPLER_READY: ReadonlySet<string> = new Set(["ACTIVE", "SCALED_TO_ZERO"])
const SAMPLER_FAILED: ReadonlySet<string> = new Set(["DEPLOY_FAILED", "BUILD_FAILED", "BUILD_STOPPED", "DEACTIVATING", "INACTIVE", "FAILED"])

/** Where provisioning stands: ready, still coming up, or failed; `state` says it in words. @since 0.1.0 @category models */
export interface Phase {
  readonly phase: "Ready" | "Waiting" | "Failed"
  readonly state: string
  /** statuses the reference does not list (each is "not ready yet"), as `run status X` */
  readonly unknown: ReadonlyArray<string>
}

/** A run that is ready to train on, with the URLs of its trainer and its sampler. @since 0.1.0 @category models */
export interface ReadyRun {
  readonly id: string
  readonly baseModel: string
  readonly trainerUrl: string
  readonly samplerUrl: string
}

const present = (url: string | null | undefined): url is string => typeof url === "string" && url !== ""

/** The statuses of `run` and its trainer deployment that the reference does not list. */
const unknownStatuses = (run: Api.Run, trainer: string | undefined, sampler: string | undefined): ReadonlyArray<string> => [
  ...(run.status !== undefined && !Api.RUN_STATUS.includes(run.status.name) && !Api.RUN_ENDED.has(run.status.name) ? [`run status ${run.status.name}`] : []),
  ...(trainer !== undefined && !Api.DEPLOYMENT_STATUS.includes(trainer) ? [`trainer status ${trainer}`] : []),
  ...(sampler !== undefined && !Api.SAMPLER_STATUS.includes(sampler) ? [`sampler status ${sampler}`] : []),
]

/**
 * The phase of a run from its status and its trainer deployment's. A status the
 * reference does not list, a status not reported, and a URL not assigned yet are all
 * "not ready yet".
 * @since 0.1.0 @category combinators
 */
export const phaseOf = (run: Api.Run, deployment: Api.Deployment | undefined): Phase => {
  const status = run.status?.name ?? "not reported"
  const hasDeployment = run.deployment_id !== undefined && run.deployment_id !== null
  const trainer = !hasDeployment ? "no deployment" : deployment?.status?.name ?? "unknown"
  const sampler = run.sampler === undefined || run.sampler === null ? "not created yet" : run.sampler.status?.name ?? "not reported"
  const urls = !present(run.base_url) ? ", trainer URL not assigned yet" : run.sampler != null && !present(run.sampler.base_url) ? ", sampler URL not assigned yet" : ""
  const state = `run ${Api.describeStatus(run)}, trainer ${trainer}, sampler ${sampler}${urls}`
  const unknown = unknownStatuses(run, hasDeployment ? deployment?.status?.name : undefined, run.sampler?.status?.name)
  if (Api.RUN_ENDED.has(status) || TRAINER_FAILED.has(trainer) || SAMPLER_FAILED.has(sampler)) return { phase: "Failed", state, unknown }
  const trainerReady = trainer === "no deployment" || TRAINER_READY.has(trainer)
  const ready = status === "ACTIVE" && trainerReady && SAMPLER_READY.has(sampler) && urls === ""
  return { phase: ready ? "Ready" : "Waiting", state, unknown }
}

/** The URLs of a run that `phaseOf` found ready. */
const readyRun = (run: Api.Run, baseModel: string): ReadyRun => ({
  id: run.id,
  baseModel: run.base_model ?? baseModel,
  trainerUrl: run.base_url ?? "",
  samplerUrl: run.sampler?.base_url ?? "",
})

const now = () => new Date().toISOString()

/** The run's status and its trainer deployment's, as one phase. */
const poll = (cp: typeof ControlPlane.Service, runId: string) =>
  Effect.gen(function* () {
    const run = yield* cp.getRun(runId)
    // a deployment the control plane does not list yet is still coming up
    const deployment = run.deployment_id === undefined || run.deployment_id === null
      ? undefined
      : yield* cp.getDeployment(run.deployment_id).pipe(Effect.catchIf((e) => e.reason === "NotFound", () => Effect.succeed(undefined)))
    return { run, ...phaseOf(run, deployment) }
  })

/**
 * Waits until run `runId` is ready and returns it; fails with `NotReady` after the
 * ready timeout, or `Failed` when provisioning fails, naming the run and its state. A
 * status the reference does not list is logged once, by name.
 * @since 0.1.0 @category constructors
 */
export const awaitReady = Effect.fn("Loops.awaitReady")(function* (runId: string, baseModel: string, options: Pick<Options, "readyTimeout" | "pollInterval"> = {}) {
  const cp = yield* ControlPlane
  const timeout = Duration.fromInputUnsafe(options.readyTimeout ?? DEFAULT_READY_TIMEOUT)
  const cap = Duration.toMillis(Duration.fromInputUnsafe(options.pollInterval ?? "10 seconds"))
  const started = Date.now()
  const seen = new Set<string>()
  let last = "not polled yet"
  const loop = Effect.gen(function* () {
    for (let k = 0; ; k++) {
      const p = yield* poll(cp, runId)
      const seconds = Math.round((Date.now() - started) / 1000)
      const waited = seconds === 0 ? "0s" : Duration.format(Duration.seconds(seconds))
      for (const u of p.unknown.filter((x) => !seen.has(x))) {
        seen.add(u)
        yield* Effect.logWarning(`loops: run ${runId} reports ${u}, which the Loops API reference does not list; taken as not ready yet`)
      }
      if (p.phase === "Failed") return yield* new LoopsError({ reason: "Failed", route: "provision", message: `Loops run ${runId} failed while provisioning (${p.state})` })
      if (p.phase === "Ready") {
        yield* Effect.logInfo(`loops: run ${runId} is ready after ${waited} (${p.state})`)
        return readyRun(p.run, baseModel)
      }
      if (p.state !== last) yield* Effect.logInfo(`loops: waiting for run ${runId} (${waited} so far, ready timeout ${Duration.format(timeout)}): ${p.state}`)
      last = p.state
      yield* Effect.sleep(Duration.millis(Math.min(cap, 500 * 2 ** Math.min(k, 10))))
    }
  })
  return yield* loop.pipe(
    Effect.timeoutOrElse({
      duration: timeout,
      orElse: () =>
        Effect.fail(
          new LoopsError({
            reason: "NotReady",
            route: "provision",
            message: `Loops run ${runId} was not ready after ${Duration.format(timeout)} (last state: ${last}); raise --loops-ready-timeout if cold starts take longer`,
          }),
        ),
    }),
  )
})

/** Deactivates run `id` (or keeps it), then updates the record; never fails: a run it could not deactivate is noted in `unreleased`. */
const release = (cp: typeof ControlPlane.Service, id: string, options: Options, ready: () => boolean, unreleased: Option.Option<typeof UnreleasedRuns.Service>) =>
  Effect.gen(function* () {
    if (options.keepRun === true && ready()) {
      yield* RunRecord.update(options.runDir, id, (r) => ({ ...r, kept: true })).pipe(Effect.ignore)
      return yield* Effect.logWarning(`loops: kept run ${id} up (--keep-run); it bills until deactivated. Stop it with: ${stopCommand(id, cp.url)}`)
    }
    if (options.keepRun === true) yield* Effect.logWarning(`loops: run ${id} never became ready, so it is deactivated despite --keep-run`)
    const done = yield* Effect.exit(cp.deactivateRun(id))
    if (Exit.isFailure(done)) {
      // a run that something else ended (a preemption, the console) is not billing
      const status = yield* cp.getRun(id).pipe(Effect.map((r) => r.status?.name ?? "not reported"), Effect.orElseSucceed(() => "unknown"))
      if (status !== "INACTIVE") {
        yield* Effect.logError(`loops: could not deactivate run ${id}; it may still be billing. Stop it with: ${stopCommand(id, cp.url)}`, done.cause)
        const error = Cause.squash(done.cause)
        const why = error instanceof Error ? error.message : String(error)
        if (Option.isSome(unreleased)) yield* unreleased.value.note({ runId: id, why, stop: stopCommand(id, cp.url) })
        return
      }
      yield* Effect.logInfo(`loops: run ${id} was already INACTIVE`)
    }
    yield* RunRecord.update(options.runDir, id, (r) => ({ ...r, deactivatedAt: now(), kept: false })).pipe(Effect.ignore)
    yield* Effect.logInfo(`loops: deactivated run ${id} (its checkpoints remain: gyre loops checkpoints ${id})`)
  })

/** A session and a run; only the run's id is read here (`ControlPlane.Created`). */
const create = (cp: typeof ControlPlane.Service, options: Options) =>
  Effect.gen(function* () {
    const session = yield* cp.createSession
    const created = yield* cp.createRun({
      session_id: session.id,
      base_model: options.baseModel,
      ...(options.loraRank !== undefined ? { lora_rank: options.loraRank } : {}),
      ...(options.name !== undefined ? { name: options.name } : {}),
    })
    return { ...created, sessionId: session.id }
  })

/** Writes a new run to the folder's `loops.json`; a failure to write is logged, never fatal. */
const record = (cp: typeof ControlPlane.Service, created: { readonly id: string; readonly sessionId: string }, options: Options) =>
  Effect.gen(function* () {
    yield* RunRecord.add(options.runDir, cp.url, { id: created.id, sessionId: created.sessionId, baseModel: options.baseModel, createdAt: now(), deactivatedAt: null }).pipe(
      Effect.catch((e) => Effect.logError(`loops: run ${created.id} is up but could not be recorded in ${options.runDir}: ${e.message}`)),
    )
    yield* Effect.logInfo(`loops: created run ${created.id} (${options.baseModel}) in session ${created.sessionId} at ${cp.url}; waiting for it to be ready`)
  })

/**
 * The folder's live run to train on (`--resume`), or none when a new run is to be
 * created; fails when the folder's run is still up on a fresh start, or gone on a
 * resume without `newRun`. A run whose status is anything but `INACTIVE` may bill, so it
 * counts as live.
 */
const recorded = (cp: typeof ControlPlane.Service, options: Options) =>
  Effect.gen(function* () {
    const record = yield* RunRecord.read(options.runDir)
    let reuse: Api.Run | undefined = undefined
    for (const r of RunRecord.live(record)) {
      const run = yield* cp.getRun(r.id).pipe(Effect.catchIf((e) => e.reason === "NotFound", () => Effect.succeed(undefined)))
      const status = run?.status?.name ?? "not reported"
      if (run !== undefined && status !== "INACTIVE") {
        if (!options.resume) {
          return yield* new LoopsError({
            reason: "Failed",
            route: "provision",
            message: `${options.runDir} records Loops run ${r.id} (${r.baseModel}), still ${status} and billing: an earlier start did not deactivate it (a crash, or --keep-run). ` +
              `Continue on it with \`gyre run --resume ${options.runDir} --backend loops\`, or stop it with \`${stopCommand(r.id, cp.url)}\``,
          })
        }
        reuse = run
        continue
      }
      yield* RunRecord.update(options.runDir, r.id, (x) => ({ ...x, deactivatedAt: now() }))
      yield* Effect.logWarning(`loops: run ${r.id} recorded in ${options.runDir} is ${run === undefined ? "gone (not found)" : "INACTIVE"}: nothing of it bills any more`)
      if (options.resume && options.newRun !== true && r === RunRecord.live(record).at(-1)) {
        return yield* new LoopsError({
          reason: "Gone",
          route: "provision",
          message: `Loops run ${r.id} of ${options.runDir} is gone (${run === undefined ? "not found" : "INACTIVE"}), so --resume cannot continue on it. Its checkpoints remain ` +
            `(gyre loops checkpoints ${r.id}). To continue from the folder's last checkpoint on a new run (which bills until it ends): ` +
            `gyre run --resume ${options.runDir} --backend loops --loops-new-run`,
        })
      }
    }
    return reuse
  })

/**
 * A ready run for the length of the scope: the folder's live run on `--resume`, else a
 * new one; deactivated when the scope closes (see the module doc). Only the new run's
 * id is read before its deactivation is registered: recording it, decoding the rest of
 * the create answer and waiting for it all happen after, so that any failure or crash
 * there deactivates it.
 * @since 0.1.0 @category constructors
 */
export const acquire = Effect.fn("Loops.acquire")(function* (options: Options): Effect.fn.Return<ReadyRun, LoopsError, ControlPlane | Scope.Scope> {
  const cp = yield* ControlPlane
  const unreleased = yield* Effect.serviceOption(UnreleasedRuns)
  const reuse = yield* recorded(cp, options)
  let ready = false
  type Held = { readonly id: string; readonly created: Effect.Success<ReturnType<typeof create>> | undefined }
  const held = yield* Effect.acquireRelease<Held, LoopsError, never, never>(
    reuse !== undefined
      ? Effect.as(Effect.logInfo(`loops: resuming on run ${reuse.id} (${reuse.base_model ?? options.baseModel}), still ${reuse.status?.name ?? "not reported"}`), {
        id: reuse.id,
        created: undefined,
      })
      : Effect.map(create(cp, options), (c) => ({ id: c.id, created: c })),
    (h) => release(cp, h.id, options, () => ready, unreleased),
  )
  if (held.created !== undefined) {
    yield* record(cp, held.created, options)
    yield* held.created.run
  }
  const live = yield* awaitReady(held.id, options.baseModel, options)
  ready = true
  return live
})

/**
 * The end of a run noticed while training on it. The data plane of a run that the
 * control plane has ended (`TERMINATED`, `FAILED`, `INACTIVE`, ...) answers 503s, which
 * the clients retry for minutes, or a bare 404. So the run's data-plane answers are
 * watched, and the control plane is asked for the run's status:
 *
 * - after a 404 from the run's trainer or sampler, before the client sees it;
 * - after `failuresBeforeCheck` failures in a row (5xx, no answer), then at most once
 *   per `checkInterval` while they go on.
 *
 * A run that has ended fails every call on its trainer, sampler and reference at once,
 * in flight or to come, naming its status and what the control plane says of it; a run
 * still live (or a control plane that does not answer) leaves the clients to their
 * retries. A concurrent failure waits for the check in flight rather than asking again.
 *
 * @since 0.1.0
 */
import { Deferred, Duration, Effect, Option } from "effect"
import { HttpClient } from "effect/http"
import { BackendError } from "../../contract/Contract.ts"
import type { ReferenceShape } from "../../services/Reference.ts"
import type { SamplerShape } from "../../services/Sampler.ts"
import type { Pending, TrainerShape } from "../../services/Trainer.ts"
import * as Api from "./Api.ts"
import type { ControlPlaneShape } from "./ControlPlane.ts"
import type { ReadyRun } from "./Provision.ts"

/** @since 0.1.0 @category models */
export interface Options {
  /** the run folder, named in the message that says how to go on */
  readonly runDir?: string | undefined
  /** failures in a row (5xx, no answer) before the control plane is asked (default 2) */
  readonly failuresBeforeCheck?: number | undefined
  /** the shortest time between two checks while failures go on (default 10 s); a 404 is always checked */
  readonly checkInterval?: Duration.Input | undefined
  /** how long a check may take before it counts as no answer (default 10 s) */
  readonly checkTimeout?: Duration.Input | undefined
}

/** The services a watch guards. @since 0.1.0 @category models */
export type Services = { readonly trainer: TrainerShape; readonly sampler: SamplerShape; readonly reference: ReferenceShape }

/** @since 0.1.0 @category models */
export interface RunWatch {
  /** `http`, watching the answers of the run's trainer and sampler (once `arm`ed) */
  readonly client: (http: HttpClient.HttpClient) => HttpClient.HttpClient
  /** starts watching: failures before it (the protocol probe's 404) are not the run's end */
  readonly arm: Effect.Effect<void>
  /** the services, each call failing at once when the run has ended */
  readonly services: <S extends Services>(s: S) => S
}

/** The error every call gets once the run has ended. */
const endedError = (run: Api.Run, runDir: string | undefined) =>
  new BackendError({
    reason: "Unavailable",
    operation: "loops run",
    message: `Loops run ${run.id} is ${Api.describeStatus(run)}: the control plane ended it, so its trainer and sampler no longer answer. ` +
      `Its checkpoints remain (gyre loops checkpoints ${run.id}); continue from the run folder's last checkpoint on a new run with ` +
      `\`gyre run --resume ${runDir ?? "<run folder>"} --backend loops --loops-new-run\``,
  })

/** The calls of a trainer, each guarded (a submitted call's pending result too). */
const guardTrainer = (t: TrainerShape, g: <A>(e: Effect.Effect<A, BackendError>) => Effect.Effect<A, BackendError>): TrainerShape => {
  const pending = <A>(e: Effect.Effect<Pending<A>, BackendError>) => Effect.map(g(e), g)
  return {
    ...t,
    forwardBackward: (data, lossFn, options) => g(t.forwardBackward(data, lossFn, options)),
    forward: (data, lossFn, options) => g(t.forward(data, lossFn, options)),
    optimStep: (adam) => g(t.optimStep(adam)),
    saveWeightsForSampler: (name) => g(t.saveWeightsForSampler(name)),
    saveState: (name) => g(t.saveState(name)),
    loadState: (path, options) => g(t.loadState(path, options)),
    info: g(t.info),
    ...(t.submit !== undefined
      ? {
        submit: {
          forwardBackward: (data, lossFn, options) => pending(t.submit!.forwardBackward(data, lossFn, options)),
          optimStep: (adam) => pending(t.submit!.optimStep(adam)),
          saveWeightsForSampler: (name) => pending(t.submit!.saveWeightsForSampler(name)),
        },
      }
      : {}),
  }
}

/** A call that fails at once when the run has ended, and with the run's end when it failed because of it. */
const guardBy = (ended: Deferred.Deferred<never, BackendError>) => <A>(effect: Effect.Effect<A, BackendError>): Effect.Effect<A, BackendError> =>
  Effect.raceFirst(
    effect.pipe(Effect.catchCause((cause) => Effect.flatMap(Deferred.poll(ended), (done) => (Option.isSome(done) ? done.value : Effect.failCause(cause))))),
    Deferred.await(ended),
  )

/** The services with every call guarded. */
const guardServices = (g: <A>(e: Effect.Effect<A, BackendError>) => Effect.Effect<A, BackendError>) => <S extends Services>(s: S): S => ({
  ...s,
  trainer: guardTrainer(s.trainer, g),
  sampler: {
    ...s.sampler,
    sample: (prompt, params, o) => g(s.sampler.sample(prompt, params, o)),
    computeLogprobs: (input, o) => g(s.sampler.computeLogprobs(input, o)),
    version: g(s.sampler.version),
  },
  reference: { ...s.reference, logprobs: (inputs) => g(s.reference.logprobs(inputs)), check: g(s.reference.check) },
})

/**
 * A watch of `run` on control plane `cp`: `client` to build its data plane with, `arm`
 * once the protocol is probed, `services` to hand out.
 * @since 0.1.0 @category constructors
 */
export const make = Effect.fn("Loops.RunWatch.make")(function* (cp: ControlPlaneShape, run: ReadyRun, options: Options = {}) {
  const ended = yield* Deferred.make<never, BackendError>()
  const threshold = options.failuresBeforeCheck ?? 2
  const interval = Duration.toMillis(Duration.fromInputUnsafe(options.checkInterval ?? "10 seconds"))
  const roots = [run.trainerUrl, run.samplerUrl].map((u) => u.replace(/\/+$/, ""))
  let armed = false
  let failures = 0
  let lastCheck = Number.NEGATIVE_INFINITY
  let inFlight: Deferred.Deferred<void> | undefined = undefined

  /** Asks the control plane once; a run that has ended completes `ended`. */
  const ask = cp.getRun(run.id).pipe(
    Effect.timeoutOption(options.checkTimeout ?? "10 seconds"),
    Effect.flatMap(Option.match({
      onNone: () => Effect.logDebug(`loops: the control plane did not say in time whether run ${run.id} is still up`),
      onSome: (r) =>
        Api.RUN_ENDED.has(r.status?.name ?? "")
          ? Effect.andThen(Effect.logInfo(`loops: run ${run.id} is ${Api.describeStatus(r)}; every call on it fails`), Deferred.fail(ended, endedError(r, options.runDir)))
          : Effect.logDebug(`loops: run ${run.id} is still ${Api.describeStatus(r)}; its data plane's failures are retried`),
    })),
    Effect.catch((e) => Effect.logDebug(`loops: could not check run ${run.id}: ${e.message}`)),
    Effect.asVoid,
  )
  /** Waits for the check in flight, or runs one. */
  const check = Effect.suspend(() => {
    if (inFlight !== undefined) return Deferred.await(inFlight)
    const done = Deferred.makeUnsafe<void>()
    inFlight = done
    lastCheck = Date.now()
    return ask.pipe(Effect.ensuring(Effect.suspend(() => {
      inFlight = undefined
      return Deferred.succeed(done, undefined)
    })))
  })
  /** One answer of the run's data plane: its status, or undefined when none came. */
  const observe = (status: number | undefined) =>
    Effect.suspend(() => {
      if (!armed) return Effect.void
      if (status !== undefined && status < 400) {
        failures = 0
        return Effect.void
      }
      // a refusal of the request (422, 400) is not the run's end
      if (status !== undefined && status !== 404 && status < 500) return Effect.void
      failures++
      if (status === 404 || inFlight !== undefined) return check
      return failures >= threshold && Date.now() - lastCheck >= interval ? check : Effect.void
    })
  const ours = (url: string) => roots.some((root) => url.startsWith(root))
  const client = (http: HttpClient.HttpClient) =>
    HttpClient.transform(http, (effect, request) =>
      !ours(request.url) ? effect : effect.pipe(
        Effect.tap((res) => observe(res.status)),
        Effect.tapError(() => observe(undefined)),
      ))
  return { client, arm: Effect.sync(() => void (armed = true)), services: guardServices(guardBy(ended)) } satisfies RunWatch
})

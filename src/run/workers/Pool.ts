/**
 * Episodes on every core: a pool of worker threads (`Thread.ts`) that play groups for
 * `Collect.sampleGroup`. Each worker loads the env module and the tokenizer itself and
 * plays a group as the main thread would (prompt encoding, episodes, the samples' decoding,
 * rewards). On a Tinker-protocol service (`direct`) it samples the service itself: each job
 * carries the sampler weights the run published last (noted from the trainer the pool's
 * layer gives); elsewhere its samples come from the main thread's `Sampler` over the
 * message port. A group's seeds are its own (`seed/split/step/g`), so a run gives the same
 * groups on any number of cores.
 *
 * A job goes to the worker with the fewest in flight. A worker that dies fails the groups
 * it was playing with a `RunError` that says so (the step stops; `--resume` redoes it), and
 * later groups go to the workers left, or to the main thread when none is.
 *
 * @since 0.1.0
 */
import type { Worker } from "node:worker_threads"
import { Cause, Context, Effect, Exit, Fiber, Layer, Option, References, Schema, type Scope, type Tracer } from "effect"
import { PHASE, STEP } from "../RunSpans.ts"
import type { BackendError } from "../../contract/Contract.ts"
import { Sampler } from "../../services/Sampler.ts"
import { Tokenizer } from "../../services/Tokenizer.ts"
import { Trainer, type TrainerShape } from "../../services/Trainer.ts"
import type * as Env from "../../vocabulary/Env.ts"
import { EpisodeWorkers, type Group, type PoolShape, rolloutsOf } from "../Collect.ts"
import { ContextLength } from "../Rollout.ts"
import { RunError, type RunSettings } from "../Settings.ts"
import * as Outbox from "./Outbox.ts"
import type { Answer, Call, EnvModule, FromWorker, Job, JobFailure, PlayedGroup, SamplerCall, ToWorker, TokenizerSource } from "./Protocol.ts"
import type { DirectSampling, Target } from "./Direct.ts"
import { pack, unpack } from "./Pack.ts"
import { lengthen } from "./Turns.ts"
import { spawn, type Started } from "./Spawn.ts"
import { offWorkers, oversubscribed } from "./Cores.ts"

type Task = Env.Task<unknown> & { readonly envDef: Env.AnyEnv }
type Options = { readonly split: Env.Split; readonly numSamples: number; readonly temperature?: number }

export { EpisodeWorkers, type PoolShape } from "../Collect.ts"

/** What the pool is started with. @since 0.1.0 @category models */
export interface PoolOptions {
  /** worker threads (`--cores`); 1 or fewer starts none */
  readonly cores: number
  readonly env: EnvModule
  readonly tokenizer: TokenizerSource
  /** the run's Tinker-protocol service, which the workers then sample from themselves (`Direct.ts`) */
  readonly direct?: DirectSampling | undefined
  /** the run's OTLP collector (`--otlp`), which the workers send their own spans to */
  readonly otlp?: string | undefined
}

/** The sampler weights the run published last, as the trainer said. */
interface Published {
  latest: Target | undefined
}

/** The trainer, noting each publication's path and version for the workers that sample it themselves. */
const noting = (trainer: TrainerShape, published: Published): TrainerShape => {
  const note = (out: { readonly version: number; readonly path: string }) =>
    Effect.sync(() => {
      if (published.latest === undefined || out.version >= published.latest.version) published.latest = { version: out.version, path: out.path }
    })
  const submit = trainer.submit
  return {
    ...trainer,
    saveWeightsForSampler: (name) => Effect.tap(trainer.saveWeightsForSampler(name), note),
    ...(submit !== undefined ? { submit: { ...submit, saveWeightsForSampler: (name) => Effect.map(submit.saveWeightsForSampler(name), Effect.tap(note)) } } : {}),
  }
}

/** The run's attributes of a span (`gyre.step`, `gyre.phase`), for the spans a worker makes under it. */
const runAttributes = (span: Tracer.Span): Record<string, unknown> =>
  Object.fromEntries([STEP, PHASE].flatMap((key) => (span.attributes.has(key) ? [[key, span.attributes.get(key)]] : [])))

/** The target a job samples directly: the last publication, when it is a service's path and serves the group's version. */
const targetFor = (published: Published, version: number): Target | undefined => {
  const latest = published.latest
  return latest !== undefined && latest.version >= version && latest.path.startsWith("tinker://") ? latest : undefined
}

interface Pending {
  readonly resume: (outcome: { readonly ok: true; readonly group: PlayedGroup } | { readonly ok: false; readonly error: RunError | Error }) => void
  readonly what: string
  readonly step: number
  /** the main thread's sampler calls for this job, interrupted when it ends */
  readonly calls: Set<Fiber.Fiber<unknown, unknown>>
}

/** One worker seen from the main thread. */
interface Handle {
  readonly index: number
  readonly worker: Worker
  readonly envs: ReadonlySet<string>
  readonly pending: Map<number, Pending>
  /** queues an answer to one of the worker's sampler calls */
  readonly answer: (answer: Answer) => void
  down: string | undefined
}

const runErrorOf = (failure: JobFailure, step: number): RunError | Error =>
  failure.kind === "run"
    ? new RunError({ reason: failure.reason, message: failure.message, ...(failure.step !== undefined ? { step: failure.step } : {}) })
    : new Error(`a defect while a worker played a group of step ${step + 1}: ${failure.message}`)

/** Answers one sampler call of a worker with the main thread's sampler. */
const answer = (sampler: Context.Service.Shape<typeof Sampler>, call: SamplerCall): Effect.Effect<unknown, BackendError> =>
  call.op === "sample" ? sampler.sample(call.prompt, call.params, call.options) : call.op === "computeLogprobs" ? sampler.computeLogprobs(call.input, call.options) : sampler.version

/**
 * The answer to a sampler call whose group has ended (a call still open when the group
 * finished, as an agent's request it never awaited): every call gets an answer, so none
 * waits in the worker forever.
 */
const ended = (id: number, call: string): Answer => ({
  id,
  result: { ok: false, reason: "Unavailable", operation: call, message: "the group this sampler call belongs to has ended" },
})

/**
 * The answer to a worker's sampler call from how the main thread's call ended: its value,
 * its failure, `ended` when it was interrupted because its group ended, or an internal
 * failure for a defect. Every call gets an answer, so none waits in the worker forever.
 */
const answerOf = (id: number, call: SamplerCall, exit: Exit.Exit<unknown, BackendError>): Answer => {
  if (Exit.isSuccess(exit)) return { id, result: { ok: true, value: exit.value } }
  const failure = Cause.findErrorOption(exit.cause)
  if (failure._tag === "Some") return { id, result: { ok: false, reason: failure.value.reason, operation: failure.value.operation, message: failure.value.message } }
  if (Cause.hasInterruptsOnly(exit.cause)) return ended(id, call.op)
  return { id, result: { ok: false, reason: "Internal", operation: call.op, message: `the run's sampler failed: ${Cause.pretty(exit.cause)}` } }
}

/**
 * Answers go to a worker in batches, one message a turn of the event loop; a worker that
 * stopped has nothing left to answer. An answer that cannot be sent (a sampler's value
 * that does not clone) is answered with the failure instead.
 */
const answersTo = (handle: Omit<Handle, "answer">) => {
  const send = (answers: Array<Answer>) => {
    if (handle.down !== undefined) return
    const { packed, transfer } = pack(answers)
    handle.worker.postMessage({ type: "sampled", answers: packed } satisfies ToWorker, transfer)
  }
  return Outbox.make<Answer>(send, (a, e) =>
    send([{ id: a.id, result: { ok: false, reason: "Internal", operation: "sampler", message: `the sampler's answer cannot be sent to the episode worker: ${e instanceof Error ? e.message : String(e)}` } }]))
}

/** Answers one of a worker's sampler calls with the main thread's sampler. */
const call = (handle: Handle, run: <A, E>(effect: Effect.Effect<A, E>) => Fiber.Fiber<A, E>, sampler: Context.Service.Shape<typeof Sampler>, { id, job: jobId, call }: Call) => {
  const job = handle.pending.get(jobId)
  if (job === undefined) return handle.answer(ended(id, call.op))
  let fiber: Fiber.Fiber<void> | undefined
  fiber = run(answer(sampler, call).pipe(
    Effect.onExit((exit) =>
      Effect.sync(() => {
        handle.answer(answerOf(id, call, exit))
        if (fiber !== undefined) job.calls.delete(fiber)
      })
    ),
    Effect.asVoid,
    Effect.ignore,
  ))
  // a sampler that answers at once has finished already
  if (fiber.pollUnsafe() === undefined) job.calls.add(fiber)
}

/** Routes a worker's messages: sampler calls, log lines and the jobs' outcomes. */
const route = (handle: Handle, run: <A, E>(effect: Effect.Effect<A, E>) => Fiber.Fiber<A, E>, sampler: Context.Service.Shape<typeof Sampler>) => (message: FromWorker) => {
  switch (message.type) {
    case "sample":
      for (const c of unpack<ReadonlyArray<Call>>(message.calls)) call(handle, run, sampler, c)
      return
    case "log":
      run(Effect.logWithLevel(message.level)(message.message))
      return
    case "done":
    case "error": {
      const job = handle.pending.get(message.id)
      if (job === undefined) return
      handle.pending.delete(message.id)
      job.resume(message.type === "done" ? { ok: true, group: unpack<PlayedGroup>(message.group) } : { ok: false, error: runErrorOf(message.failure, job.step) })
      return
    }
  }
}

/** A worker that stopped: every group it was playing fails, naming it and why. */
const stopped = (handle: Handle, why: string) => {
  handle.down ??= why
  const jobs = [...handle.pending.values()]
  handle.pending.clear()
  for (const job of jobs) job.resume({ ok: false, error: new RunError({ reason: "Env", step: job.step, message: `episode worker ${handle.index} stopped (${why}) while it played ${job.what}: the step cannot finish; --resume redoes it` }) })
}

/** Starts the workers; undefined (with the reason logged) when they cannot play this run's groups. */
const start = (options: PoolOptions) =>
  Effect.gen(function* () {
    const tokenizer = yield* Tokenizer
    const logLevel = yield* References.MinimumLogLevel
    const many = oversubscribed(options.cores)
    if (many !== undefined) yield* Effect.logWarning(many)
    const started = yield* Effect.forEach(Array.from({ length: options.cores }, (_, index) => index), (index) => spawn({ index, env: options.env, tokenizer: options.tokenizer, logLevel, direct: options.direct, otlp: options.otlp }), { concurrency: "unbounded" }).pipe(
      Effect.result,
    )
    if (started._tag === "Failure") {
      yield* Effect.logWarning(`episodes run on the main thread only (--cores ${options.cores} asked for worker threads): ${started.failure}`)
      return undefined
    }
    const mismatch = started.success.find((s) => s.ready.tokenizer.name !== tokenizer.name || s.ready.tokenizer.vocabSize !== tokenizer.vocabSize || s.ready.tokenizer.eos !== tokenizer.eos)
    if (mismatch !== undefined) {
      const t = mismatch.ready.tokenizer
      yield* Effect.logWarning(
        `episodes run on the main thread only (--cores ${options.cores}): a worker's tokenizer (${t.name}, ${t.vocabSize} tokens) is not the run's (${tokenizer.name}, ${tokenizer.vocabSize} tokens)`,
      )
      return undefined
    }
    return started.success
  })

const handleOf = (s: Started, index: number): Handle => {
  const handle = { index, worker: s.worker, envs: new Set(s.ready.envs), pending: new Map<number, Pending>(), down: undefined as string | undefined }
  return Object.assign(handle, { answer: answersTo(handle) })
}

/**
 * Starts `options.cores` episode workers (none for 1 or fewer), for the current scope.
 * Undefined when there are none: groups are then played on the main thread.
 * @since 0.1.0 @category constructors
 */
export const make = Effect.fn("EpisodeWorkers.make")(function* (options: PoolOptions, published: Published = { latest: undefined }) {
  if (options.cores <= 1) return undefined
  const started = yield* start(options)
  if (started === undefined) return undefined
  const context = yield* Effect.context<Scope.Scope>()
  const run = <A, E>(effect: Effect.Effect<A, E>) => Effect.runForkWith(context)(effect)
  const sampler = yield* Sampler
  const handles = started.map(handleOf)
  for (const handle of handles) {
    handle.worker.on("message", route(handle, run, sampler))
    handle.worker.on("error", (e) => stopped(handle, e instanceof Error ? e.message : String(e)))
    handle.worker.on("exit", (code) => stopped(handle, `exit code ${code}`))
  }
  // with --otlp the workers first send the spans they have left
  const close = options.otlp === undefined ? Effect.void : closeAll(handles)
  yield* Effect.addFinalizer(() => Effect.andThen(close, Effect.sync(() => handles.forEach((h) => stopped(h, "the run ended")))))
  let nextJob = 0
  const told = new Set<string>()
  const takes = (env: Env.AnyEnv) =>
    Effect.suspend(() => {
      const live = handles.filter((h) => h.down === undefined)
      const why = live.length === 0 ? "every episode worker stopped" : offWorkers(env, live[0]!.envs)
      if (why === undefined) return Effect.succeed(true)
      if (told.has(env.name)) return Effect.succeed(false)
      told.add(env.name)
      return Effect.as(Effect.logInfo(`env ${env.name} plays its episodes on the main thread: ${why}`), false)
    })
  const play = (settings: RunSettings, runId: string, step: number, g: number, version: number, task: Task, opts: Options) =>
    Effect.gen(function* () {
      const problem = yield* Schema.encodeUnknownEffect(task.envDef.problem)(task.problem).pipe(
        Effect.mapError((e) => new RunError({ reason: "Env", step, message: `${task.env}: problem ${task.key} cannot be sent to an episode worker: ${e.message}` })),
      )
      const target = options.direct === undefined ? undefined : targetFor(published, version)
      const parent = options.otlp === undefined ? undefined : Option.getOrUndefined(yield* Effect.option(Effect.currentSpan))
      const job: Job = {
        settings,
        runId,
        step,
        g,
        version,
        env: task.env,
        key: task.key,
        problem,
        options: opts,
        contextLength: yield* ContextLength,
        ...(target !== undefined ? { target } : {}),
        ...(parent !== undefined ? { parent: { traceId: parent.traceId, spanId: parent.spanId, attributes: runAttributes(parent) } } : {}),
      }
      const played = yield* send(handles, nextJob++, job, `group ${g} of step ${step + 1} (problem ${task.key})`)
      const episodes = lengthen(played.episodes)
      return {
        task,
        index: played.index,
        promptTokens: played.promptTokens,
        ...(played.roles !== undefined ? { roles: played.roles } : {}),
        prompt: played.prompt,
        version: played.version,
        rollouts: rolloutsOf(task, played.prompt, { ...played, episodes }),
        episodes,
        scores: played.scores,
      } satisfies Group
    })
  return { threads: handles.length, takes, play } satisfies PoolShape
})

/**
 * Asks each live worker to send what it has left (its spans) and waits for its answer, at
 * most 5 seconds (a collector that cannot be reached takes about 3): then the workers are
 * terminated with the run's scope.
 */
const closeAll = (handles: ReadonlyArray<Handle>) =>
  Effect.forEach(
    handles.filter((h) => h.down === undefined),
    (h) =>
      Effect.callback<void>((resume) => {
        const stop = () => {
          h.worker.off("message", onMessage)
          h.worker.off("exit", done)
        }
        const done = () => {
          stop()
          resume(Effect.void)
        }
        const onMessage = (m: FromWorker) => m.type === "closed" && done()
        h.worker.on("message", onMessage)
        h.worker.once("exit", done)
        h.worker.postMessage({ type: "close" } satisfies ToWorker)
        return Effect.sync(stop)
      }).pipe(Effect.timeoutOption("5 seconds")),
    { concurrency: "unbounded", discard: true },
  )

/** Stops the main thread's sampler calls of a job that ended. */
const interrupt = (calls: Set<Fiber.Fiber<unknown, unknown>>) => {
  if (calls.size > 0) Effect.runFork(Fiber.interruptAll([...calls]))
  calls.clear()
}

/** Sends a job to the live worker with the fewest in flight and waits for its group; interrupted, the worker drops it. */
const send = (handles: ReadonlyArray<Handle>, id: number, job: Job, what: string) =>
  Effect.callback<PlayedGroup, RunError>((resume) => {
    const handle = handles.filter((h) => h.down === undefined).sort((a, b) => a.pending.size - b.pending.size)[0]
    if (handle === undefined) return resume(Effect.fail(new RunError({ reason: "Env", step: job.step, message: `no episode worker is left to play ${what}` })))
    const calls = new Set<Fiber.Fiber<unknown, unknown>>()
    handle.pending.set(id, {
      what,
      step: job.step,
      calls,
      resume: (outcome) => {
        interrupt(calls)
        resume(outcome.ok ? Effect.succeed(outcome.group) : outcome.error instanceof RunError ? Effect.fail(outcome.error) : Effect.die(outcome.error))
      },
    })
    handle.worker.postMessage({ type: "job", id, job } satisfies ToWorker)
    return Effect.sync(() => {
      if (!handle.pending.delete(id)) return
      interrupt(calls)
      if (handle.down === undefined) handle.worker.postMessage({ type: "cancel", id } satisfies ToWorker)
    })
  })

/**
 * The pool as a layer: `EpisodeWorkers` set to the workers started (none for `cores` 1),
 * which stop with the layer's scope. With `direct`, the `Trainer` it gives notes each
 * publication, which the workers then sample themselves.
 * @since 0.1.0 @category layers
 */
export const layer = (options: PoolOptions): Layer.Layer<Trainer, never, Sampler | Tokenizer | Trainer> =>
  Layer.effectContext(Effect.gen(function* () {
    const published: Published = { latest: undefined }
    const trainer = yield* Trainer
    const pool = yield* make(options, published)
    const noted = Context.make(Trainer, pool !== undefined && options.direct !== undefined ? noting(trainer, published) : trainer)
    return pool === undefined ? noted : Context.add(noted, EpisodeWorkers, pool)
  }))

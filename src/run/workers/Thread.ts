/**
 * The script of an episode worker thread: it loads the env module and the tokenizer the
 * main thread names (`Protocol.Init`), then plays the group jobs it is sent with
 * `Collect.sampleGroup`, as the main thread would: the prompt's encoding, the episodes,
 * the decoding of samples and the rewards all run here. On a Tinker-protocol service the
 * worker samples it itself (`Direct.ts`: the weights the job names); elsewhere sampling
 * goes to the main thread's `Sampler` over the message port. Log lines go to the main
 * thread's logger.
 *
 * @since 0.1.0
 */
import { pathToFileURL } from "node:url"
import { parentPort, workerData } from "node:worker_threads"
import { Cause, Context, Effect, Exit, FiberMap, Layer, Logger, Option, References, Schema, Scope, Semaphore, Tracer } from "effect"
import * as AgentEndpoint from "../../agent/Endpoint.ts"
import { BackendError } from "../../contract/Contract.ts"
import * as CharTokenizer from "../../backends/local/CharTokenizer.ts"
import { Sampler, type SamplerShape } from "../../services/Sampler.ts"
import { Tokenizer, type TokenizerShape } from "../../services/Tokenizer.ts"
import * as Tokenizers from "../../tokenizers/index.ts"
import * as Env from "../../vocabulary/Env.ts"
import * as Reward from "../../vocabulary/Reward.ts"
import { sampleGroup } from "../Collect.ts"
import { ContextLength } from "../Rollout.ts"
import { RunError } from "../Settings.ts"
import * as PlatformHttpClient from "../../platform/HttpClient.ts"
import * as OtlpSpans from "../../platform/OtlpSpans.ts"
import * as Direct from "./Direct.ts"
import type { Target } from "./Direct.ts"
import { pack, unpack } from "./Pack.ts"
import { shorten } from "./Turns.ts"
import * as Outbox from "./Outbox.ts"
import type { Answer, Call, FromWorker, Init, Job, JobFailure, PlayedGroup, SamplerCall, ToWorker } from "./Protocol.ts"

const port = parentPort!
const post = (message: FromWorker) => port.postMessage(message)
const messageOf = (e: unknown) => (e instanceof Error ? e.message : String(e))

/** The value at a dotted export path of a module (`envs.single`), else its default export (also CommonJS's `default.default`). */
const exported = (mod: Record<string, unknown>, name: string | undefined): unknown => {
  if (name !== undefined) return name.split(".").reduce<unknown>((v, k) => (typeof v === "object" && v !== null ? (v as Record<string, unknown>)[k] : undefined), mod)
  const value = mod["default"]
  if (Env.isEnv(value) || Env.isMixture(value)) return value
  return typeof value === "object" && value !== null ? (value as Record<string, unknown>)["default"] : undefined
}

/**
 * The env of `init.env`, imported as `gyre run` imports it: a TypeScript module through
 * tsx's loader when gyre itself is compiled JavaScript (source gyre runs under tsx already).
 */
const loadSource = (init: Init) =>
  Effect.tryPromise({
    try: async () => {
      if (/\.(ts|mts|cts)$/.test(init.env.module) && !import.meta.url.endsWith(".ts")) await import("tsx/esm/api").then((api) => void api.register())
      return exported(await import(pathToFileURL(init.env.module).href) as Record<string, unknown>, init.env.exportName)
    },
    catch: (e) => `${init.env.module} failed to load in a worker thread: ${messageOf(e)}`,
  }).pipe(
    Effect.flatMap((value) =>
      Env.isEnv(value) || Env.isMixture(value) ? Effect.succeed(value) : Effect.fail(`${init.env.module} has no env at ${init.env.exportName ?? "its default export"}`)
    ),
  )

const loadTokenizer = (init: Init): Effect.Effect<TokenizerShape, string> =>
  init.tokenizer.kind === "char" ? Effect.succeed(CharTokenizer.make()) : Tokenizers.fromDirectory(init.tokenizer.dir).pipe(Effect.mapError((e) => e.message))

/** Sampler calls waiting for the main thread's answer, by id. */
const waiting = new Map<number, (exit: Exit.Exit<unknown, BackendError>) => void>()
let nextCall = 0

/**
 * Sampler calls go to the main thread in batches, one message a turn of the event loop;
 * a call interrupted before its batch left is not sent, and one that cannot be sent fails.
 */
const toMain = Outbox.make<Call>(
  (calls) => {
    const open = calls.filter((c) => waiting.has(c.id))
    if (open.length === 0) return
    const { packed, transfer } = pack(open)
    port.postMessage({ type: "sample", calls: packed } satisfies FromWorker, transfer)
  },
  (c, e) => answered([{ id: c.id, result: { ok: false, reason: "InvalidInput", operation: c.call.op, message: `a sampler call cannot be sent to the main thread: ${messageOf(e)}` } }]),
)

/** The `Sampler` of job `job`: each call is answered by the main thread's sampler. */
const remoteSampler = (job: number): SamplerShape => {
  const call = <A>(c: SamplerCall) =>
    Effect.callback<A, BackendError>((resume) => {
      const id = nextCall++
      waiting.set(id, (exit) => resume(exit as Exit.Exit<A, BackendError>))
      toMain({ id, job, call: c })
      return Effect.sync(() => waiting.delete(id))
    })
  return {
    sample: (prompt, params, options) => call({ op: "sample", prompt, params, options }),
    computeLogprobs: (input, options) => call({ op: "computeLogprobs", input, options }),
    version: call({ op: "version" }),
  }
}

/** Resumes the sampler calls the main thread answered. */
const answered = (answers: ReadonlyArray<Answer>) => {
  for (const { id, result: r } of answers) {
    const resume = waiting.get(id)
    waiting.delete(id)
    resume?.(r.ok ? Exit.succeed(r.value) : Exit.fail(new BackendError({ reason: r.reason, operation: r.operation, message: r.message })))
  }
}

/** Samples straight from the service where the run's backend is one (`Direct.ts`), else through the main thread. */
let direct: ((target: Target) => SamplerShape) | undefined
const samplerOf = (id: number, job: Job): SamplerShape => {
  const remote = remoteSampler(id)
  if (direct === undefined || job.target === undefined) return remote
  // the version the service serves is the main client's to ask (its sampling session)
  return { ...direct(job.target), version: remote.version }
}

/** The endpoint's own sampler, which no request uses: each agent episode brings its group's (`AgentRollout.playAgent`). */
const noSampler: SamplerShape = (() => {
  const refuse = Effect.fail(new BackendError({ reason: "InvalidInput", operation: "sample", message: "an episode worker's agent endpoint samples with each episode's own sampler" }))
  return { sample: () => refuse, computeLogprobs: () => refuse, version: Effect.succeed(0) }
})()

/**
 * The worker's agent endpoint, started by its first agent group and kept for the worker's
 * life (`scope`): agents in this thread call it over loopback, and each episode's requests
 * are sampled with its group's sampler (direct or through the main thread). It renders
 * with the first agent group's tokenizer: a worker plays one run (or one evaluation), whose
 * template arguments are the same for every group. A start that is interrupted closes what
 * it opened, and the next agent group starts it again.
 */
const agentEndpoint = (scope: Scope.Scope, owner: string) => {
  let started: Effect.Effect<AgentEndpoint.EndpointShape, RunError> | undefined
  const start = (tokenizer: TokenizerShape) =>
    Effect.gen(function* () {
      const own = yield* Scope.fork(scope)
      return yield* AgentEndpoint.make({ owner }).pipe(
        Effect.provideService(Tokenizer, tokenizer),
        Effect.provideService(Sampler, noSampler),
        Scope.provide(own),
        Effect.onExit((exit) => (Exit.isSuccess(exit) ? Effect.void : Scope.close(own, exit))),
      )
    }).pipe(Effect.mapError((e) => new RunError({ reason: "Env", message: `an episode worker cannot start its agent endpoint: ${e.message}` })))
  return (tokenizer: TokenizerShape) => (started ??= Effect.runSync(Effect.cached(start(tokenizer))))
}

/** A played group as plain data: the task stays with the main thread, which makes the rollouts again. */
const plain = (group: Effect.Success<ReturnType<typeof sampleGroup>>): PlayedGroup => ({
  index: group.index,
  promptTokens: group.promptTokens,
  prompt: group.prompt,
  version: group.version,
  episodes: shorten(group.episodes),
  ...(group.roles !== undefined ? { roles: group.roles, outcomes: group.rollouts.map((r) => r.outcome ?? 0) } : {}),
  scores: group.scores,
})

const failureOf = (cause: Cause.Cause<RunError>): JobFailure => {
  const error = Cause.findErrorOption(cause)
  if (error._tag === "Some") return { kind: "run", reason: error.value.reason, message: error.value.message, step: error.value.step }
  return { kind: "defect", message: Cause.pretty(cause) }
}

/** What a worker plays its jobs with. */
interface Player {
  readonly source: Env.AnyEnv | Env.Mixture
  readonly tokenizer: TokenizerShape
  readonly permits: Semaphore.Semaphore
  readonly cache: ReturnType<typeof Reward.makeCache>
  readonly endpoint: (tokenizer: TokenizerShape) => Effect.Effect<AgentEndpoint.EndpointShape, RunError>
}

/** Plays one job with the worker's tokenizer, the job's own sampler and, for an agent env, the worker's agent endpoint. */
const play = ({ source, tokenizer: base, permits, cache, endpoint }: Player) => (id: number, job: Job) =>
  Effect.gen(function* () {
    const env = Env.members(source).map(([e]) => e).find((e) => e.name === job.env)
    if (env === undefined) return yield* new RunError({ reason: "Env", step: job.step, message: `the worker's env module has no env ${job.env}` })
    const problem = yield* Schema.decodeUnknownEffect(env.problem)(job.problem).pipe(
      Effect.mapError((e) => new RunError({ reason: "Env", step: job.step, message: `${env.name}: problem ${job.key} does not decode in the worker: ${e.message}` })),
    )
    const args = job.settings.templateArgs
    const tokenizer = args === undefined ? base : Tokenizers.withTemplateArgs(base, args)
    const group = sampleGroup(job.settings, job.runId, job.step, job.g, job.version, { key: job.key, env: env.name, problem, envDef: env }, job.options)
    const withEndpoint = env.agent === undefined
      ? group
      : Effect.provideService(group, AgentEndpoint.Endpoint, yield* Effect.mapError(endpoint(tokenizer), (e) => new RunError({ reason: e.reason, step: job.step, message: e.message })))
    // under the main thread's span that sent the group, when the run exports spans
    const parent = job.parent
    const traced = parent === undefined
      ? withEndpoint
      : withEndpoint.pipe(Effect.annotateSpans(parent.attributes), Effect.withParentSpan(Tracer.externalSpan({ traceId: parent.traceId, spanId: parent.spanId, sampled: true })))
    return yield* traced.pipe(
      Effect.provideService(Tokenizer, tokenizer),
      Effect.provideService(Sampler, samplerOf(id, job)),
      Effect.provideService(ContextLength, job.contextLength),
      Effect.provideService(Reward.RewardPermits, permits),
      Effect.provideService(Reward.RewardCache, cache),
    )
  }).pipe(
    Effect.onExit((exit) =>
      Effect.sync(() => {
        if (Exit.isSuccess(exit)) {
          const { packed, transfer } = pack(plain(exit.value))
          port.postMessage({ type: "done", id, group: packed } satisfies FromWorker, transfer)
        }
        else if (!Cause.hasInterruptsOnly(exit.cause)) post({ type: "error", id, failure: failureOf(exit.cause) })
      })
    ),
  )

/** Log lines go to the main thread, which writes them with its own logger. */
const logToMain = Logger.make<unknown, void>((options) => {
  const level = options.logLevel === "Warn" || options.logLevel === "Error" || options.logLevel === "Info" ? options.logLevel : options.logLevel === "Fatal" ? "Error" : "Debug"
  const text = Array.isArray(options.message) ? options.message.map((m) => (typeof m === "string" ? m : JSON.stringify(m))).join(" ") : String(options.message)
  post({ type: "log", level, message: text })
})

const main = Effect.gen(function* () {
  const init = workerData as Init
  const [source, tokenizer] = yield* Effect.all([loadSource(init), loadTokenizer(init)])
  if (init.direct !== undefined) direct = yield* Direct.make(init.direct).pipe(Effect.mapError((e) => `cannot connect to ${init.direct?.baseUrl}: ${e.message}`))
  const cache = Reward.makeCache()
  const endpoint = agentEndpoint(yield* Effect.scope, `episode worker ${init.index}`)
  const jobs = yield* FiberMap.make<number>()
  // --otlp: the worker's spans go to the collector itself, from an exporter with a scope of
  // its own, closed (a last export, awaited) when the run ends
  const spans = yield* Scope.make()
  const exporter = init.otlp === undefined ? Context.empty() : yield* Layer.buildWithScope(OtlpSpans.layer(init.otlp), spans)
  const context = Context.merge(yield* Effect.context<never>(), exporter)
  let player: ReturnType<typeof play> | undefined
  port.on("message", (message: ToWorker) => {
    if (message.type === "sampled") {
      answered(unpack<ReadonlyArray<Answer>>(message.answers))
    } else if (message.type === "job") {
      // rewards in flight: the run's --reward-concurrency, per worker
      player ??= play({ source, tokenizer, permits: Semaphore.makeUnsafe(message.job.settings.rewardConcurrency), cache, endpoint })
      Effect.runForkWith(context)(FiberMap.run(jobs, message.id, player(message.id, message.job)))
    } else if (message.type === "cancel") {
      Effect.runForkWith(context)(FiberMap.remove(jobs, message.id))
    } else {
      // the run is ending: the spans not sent yet go now, before the thread is terminated
      Effect.runForkWith(context)(Scope.close(spans, Exit.void).pipe(Effect.ensuring(Effect.sync(() => post({ type: "closed" })))))
    }
  })
  post({ type: "ready", envs: Env.members(source).map(([e]) => e.name), tokenizer: { name: tokenizer.name, vocabSize: tokenizer.vocabSize, eos: tokenizer.eos } })
  yield* Effect.never
})

// a worker that cannot start says why, and the main thread plays the run's episodes itself
Effect.runFork(main.pipe(
  Effect.catchCause((cause) => Effect.sync(() => post({ type: "failed", message: Option.getOrElse(Cause.findErrorOption(cause), () => Cause.pretty(cause)) }))),
  Effect.scoped,
  Effect.provide(PlatformHttpClient.layer),
  Effect.provide(Logger.layer([logToMain])),
  Effect.provideService(References.MinimumLogLevel, (workerData as Init).logLevel),
))

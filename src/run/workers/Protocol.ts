/**
 * The messages between the main thread and an episode worker thread (`Thread.ts`): the
 * main thread sends group jobs and the sampler's answers; a worker sends its sample
 * requests, its log lines and each group as plain data. Everything here survives the
 * structured clone of `postMessage`; sampler calls, their answers and played groups travel
 * packed (`Pack.ts`: their arrays of numbers as transferred buffers). Sampler calls and
 * answers go in batches, one message for those ready in one turn of the event loop: a
 * multi-turn group makes dozens of calls at once, and each message costs both threads.
 *
 * @since 0.1.0
 */
import type { LogLevel } from "effect"
import type { BackendError, ModelInput, SampleOptions, SamplingParams } from "../../contract/Contract.ts"
import type * as Env from "../../vocabulary/Env.ts"
import type * as Reward from "../../vocabulary/Reward.ts"
import type { EpisodeRecord } from "../Rollout.ts"
import type { RunError, RunSettings } from "../Settings.ts"
import type { Prompt } from "../../services/Tokenizer.ts"
import type { DirectSampling, Target } from "./Direct.ts"

/**
 * Where a worker finds the env: its module's absolute path and, when the env is not the
 * module's default export, the dotted path of the export that holds it (`envs.single`).
 * @since 0.1.0 @category models
 */
export interface EnvModule {
  readonly module: string
  readonly exportName?: string | undefined
}

/**
 * The tokenizer a worker builds for itself: gyre's character tokenizer (the embedded
 * models', and a remote backend's without `--tokenizer`), or the files of a model's own
 * (`--tokenizer <folder>`).
 * @since 0.1.0 @category models
 */
export type TokenizerSource = { readonly kind: "char" } | { readonly kind: "files"; readonly dir: string }

/** What a worker is started with. @since 0.1.0 @category models */
export interface Init {
  readonly index: number
  readonly env: EnvModule
  readonly tokenizer: TokenizerSource
  /** the main thread's least log level: a worker sends nothing below it */
  readonly logLevel: LogLevel.LogLevel
  /** a Tinker-protocol service the worker samples from itself (`Direct.ts`); else it samples through the main thread */
  readonly direct?: DirectSampling | undefined
  /** the OTLP collector the run's spans go to (`--otlp`): the worker sends its own spans there */
  readonly otlp?: string | undefined
}

/** One group to play: `sampleGroup`'s arguments, the task's problem in its Schema's encoded form. @since 0.1.0 @category models */
export interface Job {
  readonly settings: RunSettings
  readonly runId: string
  readonly step: number
  readonly g: number
  readonly version: number
  readonly env: string
  readonly key: string
  readonly problem: unknown
  readonly options: { readonly split: Env.Split; readonly numSamples: number; readonly temperature?: number }
  /** the model's context length (`Rollout.ContextLength`) */
  readonly contextLength: number
  /** the sampler weights to sample from directly (with `Init.direct`): the ones published last */
  readonly target?: Target | undefined
  /**
   * the main thread's span the group is played under, for the worker's own spans (with
   * `Init.otlp`), and the run's attributes it carries (`gyre.step`, `gyre.phase`)
   */
  readonly parent?: { readonly traceId: string; readonly spanId: string; readonly attributes: Readonly<Record<string, unknown>> } | undefined
}

/**
 * A played group without its task (the main thread holds it) and without its rollouts,
 * which the main thread makes again from the episodes (`Collect.rolloutsOf`): their texts
 * would cross twice.
 * @since 0.1.0 @category models
 */
export interface PlayedGroup {
  readonly index: number
  readonly promptTokens: Array<number>
  readonly prompt: Prompt
  readonly version: number
  readonly episodes: Array<EpisodeRecord>
  readonly roles?: ReadonlyArray<string>
  readonly outcomes?: ReadonlyArray<number>
  readonly scores: Array<Reward.Score>
}

/** How a job failed: a run error as its fields, or a defect as text. @since 0.1.0 @category models */
export type JobFailure =
  | { readonly kind: "run"; readonly reason: RunError["reason"]; readonly message: string; readonly step?: number | undefined }
  | { readonly kind: "defect"; readonly message: string }

/** Main thread -> worker. @since 0.1.0 @category models */
export type ToWorker =
  | { readonly type: "job"; readonly id: number; readonly job: Job }
  | { readonly type: "cancel"; readonly id: number }
  /** the run is ending: send what is left (spans), answer `closed`, then expect to be terminated */
  | { readonly type: "close" }
  /** answers to sampler calls (`Answer`s, packed): those ready in one turn of the main thread's event loop */
  | { readonly type: "sampled"; readonly answers: unknown }

/** The answer to sampler call `id`: its value, or how it failed. @since 0.1.0 @category models */
export interface Answer {
  readonly id: number
  readonly result: { readonly ok: true; readonly value: unknown } | { readonly ok: false; readonly reason: BackendError["reason"]; readonly operation: string; readonly message: string }
}

/** A sampler call `id` of job `job`, to answer with an `Answer` of the same `id`. @since 0.1.0 @category models */
export interface Call {
  readonly id: number
  readonly job: number
  readonly call: SamplerCall
}

/** A call of the worker's `Sampler`, answered by the main thread's. @since 0.1.0 @category models */
export type SamplerCall =
  | { readonly op: "sample"; readonly prompt: ModelInput; readonly params: SamplingParams; readonly options: SampleOptions }
  | { readonly op: "computeLogprobs"; readonly input: ModelInput; readonly options?: { readonly minPolicyVersion?: number } | undefined }
  | { readonly op: "version" }

/** Worker -> main thread. @since 0.1.0 @category models */
export type FromWorker =
  | { readonly type: "ready"; readonly envs: ReadonlyArray<string>; readonly tokenizer: { readonly name: string; readonly vocabSize: number; readonly eos: number } }
  | { readonly type: "failed"; readonly message: string }
  /** a `PlayedGroup`, packed */
  | { readonly type: "done"; readonly id: number; readonly group: unknown }
  | { readonly type: "error"; readonly id: number; readonly failure: JobFailure }
  /** sampler calls (`Call`s, packed): those made in one turn of the worker's event loop */
  | { readonly type: "sample"; readonly calls: unknown }
  | { readonly type: "log"; readonly level: "Debug" | "Info" | "Warn" | "Error"; readonly message: string }
  | { readonly type: "closed" }

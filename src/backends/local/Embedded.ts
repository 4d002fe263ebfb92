/**
 * The embedded `Trainer`, `Sampler` and `Reference` services, written once over the
 * engines wherever they run. `services` checks every request (the loss and its config,
 * top-k, the data against the model's limits, Adam's parameters, sampling parameters,
 * state names), gates pinned requests on the published version, and shapes the replies;
 * an `EngineCalls` says how each operation reaches the engines: `inProcess` calls engines
 * of this thread, `Workers.ts` sends messages to worker threads.
 *
 * @since 0.1.0
 */
import * as path from "node:path"
import { Array as Arr, type Duration, Effect, Option, type Scope, SubscriptionRef } from "effect"
import {
  type AdamParams,
  type BackendError,
  type Datum,
  type ForwardBackwardResult,
  type ForwardOptions,
  type LossFn,
  type ModelInput,
  modelInputTokens,
  type OptimStepResult,
  type SampleOptions,
  type SampleResult,
  type SamplingParams,
} from "../../contract/Contract.ts"
import { LOSS_NAMES, type ResolvedLoss, validateLoss } from "../../loss/Loss.ts"
import * as Files from "../../platform/FileSystem.ts"
import { Reference, type ReferenceShape } from "../../services/Reference.ts"
import { awaitVersion, Sampler, type SamplerShape } from "../../services/Sampler.ts"
import type { TokenizerShape } from "../../services/Tokenizer.ts"
import { Trainer, type TrainerShape } from "../../services/Trainer.ts"
import * as CharTokenizer from "./CharTokenizer.ts"
import * as Engines from "./Engines.ts"
import { fail, internal, messageOf } from "./Errors.ts"
import type { LocalModel, LoraConfig, ModelConfig } from "./Model.ts"
import type { LocalSamplerEngine, SampleRequestOptions } from "./SamplerEngine.ts"
import type { LocalTrainerEngine } from "./TrainerEngine.ts"
import { checkAdam, checkData, checkLogprobsInput, checkSample, checkTopK } from "./Validate.ts"

/** How one sampler engine is reached (each operation is named for its errors). @since 0.1.0 @category models */
export interface SamplerCalls {
  readonly sample: (operation: string, tokens: ReadonlyArray<number>, params: SamplingParams, options: SampleRequestOptions) => Effect.Effect<SampleResult, BackendError>
  readonly computeLogprobs: (operation: string, tokens: ReadonlyArray<number>) => Effect.Effect<Array<number>, BackendError>
}

/**
 * How a trainer engine, its sampler engines (replicas that all get every publication)
 * and the reference are reached; requests arrive here already checked.
 * @since 0.1.0 @category models
 */
export interface EngineCalls {
  readonly config: ModelConfig
  readonly loraRank: number
  /** the trainer's policy version now */
  readonly trainerVersion: () => number
  /** the version the samplers serve at the start */
  readonly samplerVersion: number
  readonly run: (
    operation: string,
    data: ReadonlyArray<Datum>,
    loss: ResolvedLoss,
    run: { readonly backward: boolean; readonly topK?: number },
  ) => Effect.Effect<ForwardBackwardResult, BackendError>
  readonly optimStep: (operation: string, adam: AdamParams) => Effect.Effect<OptimStepResult, BackendError>
  /** gives every sampler the trainer's adapter; the version they serve from now on */
  readonly publish: (operation: string) => Effect.Effect<number, BackendError>
  readonly saveState: (operation: string, file: string) => Effect.Effect<void, BackendError>
  /** loads a state file; a file that cannot be read fails with `InvalidInput` */
  readonly loadState: (operation: string, file: string, withOptimizer: boolean) => Effect.Effect<void, BackendError>
  readonly samplers: Arr.NonEmptyReadonlyArray<SamplerCalls>
  /** per sequence, its log-probs under the base model with the adapter off */
  readonly referenceLogprobs: (operation: string, seqs: ReadonlyArray<ReadonlyArray<number>>) => Effect.Effect<Array<Array<number>>, BackendError>
  /** whether the reference can be served */
  readonly referenceCheck: Effect.Effect<void, BackendError>
}

/** What the services are called and where they keep state. @since 0.1.0 @category models */
export interface ServiceInfo {
  /** the prefix of every operation name (`Local`, `LocalWorkers`) */
  readonly prefix: string
  readonly modelName: string
  readonly stateDir: string
  readonly readyTimeout?: Duration.Input | undefined
}

/** The services over one set of engines. @since 0.1.0 @category models */
export interface EmbeddedServices {
  readonly trainer: TrainerShape
  /** the first replica */
  readonly sampler: SamplerShape
  /** one sampler per sampler engine, each served the version the trainer last published */
  readonly replicas: ReadonlyArray<SamplerShape>
  readonly tokenizer: TokenizerShape
  readonly reference: ReferenceShape
}

const NAME = /^[A-Za-z0-9._-]+$/

/**
 * The reference policy's service: checks each sequence, then asks `logprobs`.
 * @since 0.1.0 @category constructors
 */
export const referenceOf = (
  operation: string,
  config: ModelConfig,
  logprobs: (operation: string, seqs: ReadonlyArray<ReadonlyArray<number>>) => Effect.Effect<Array<Array<number>>, BackendError>,
  check: Effect.Effect<void, BackendError>,
): ReferenceShape =>
  Reference.of({
    logprobs: Effect.fn(operation)(function* (inputs: ReadonlyArray<ModelInput>) {
      const seqs = inputs.map(modelInputTokens)
      for (let i = 0; i < seqs.length; i++) {
        const bad = checkLogprobsInput(seqs[i]!, config)
        if (bad) return yield* fail(operation, "InvalidInput", `inputs[${i}]: ${bad}`)
      }
      if (seqs.length === 0) return []
      return yield* logprobs(operation, seqs)
    }),
    check,
  })

const makeTrainer = (calls: EngineCalls, info: ServiceInfo, published: SubscriptionRef.SubscriptionRef<number>): TrainerShape => {
  const op = (name: string) => `${info.prefix}.${name}`
  const runLoss = (operation: string, backward: boolean) =>
    Effect.fn(operation)(function* (data: ReadonlyArray<Datum>, lossFn: LossFn, options?: ForwardOptions) {
      const loss = yield* validateLoss(operation, lossFn, options?.lossFnConfig)
      const topKError = checkTopK(options?.topKLogprobs)
      if (topKError) return yield* fail(operation, "InvalidInput", topKError)
      const dataError = checkData(data, lossFn, calls.config)
      if (dataError) return yield* fail(operation, "InvalidInput", dataError)
      const topK = options?.topKLogprobs
      return yield* calls.run(operation, data, loss, topK === undefined ? { backward } : { backward, topK })
    })
  return Trainer.of({
    // every loss, gspo included, is computed here
    losses: LOSS_NAMES,
    forwardBackward: runLoss(op("forwardBackward"), true),
    forward: runLoss(op("forward"), false),
    optimStep: Effect.fn(op("optimStep"))(function* (adam: AdamParams) {
      const bad = checkAdam(adam)
      if (bad) return yield* fail(op("optimStep"), "InvalidInput", bad)
      return yield* calls.optimStep(op("optimStep"), adam)
    }),
    saveWeightsForSampler: Effect.fn(op("saveWeightsForSampler"))(function* (name: string) {
      const version = yield* calls.publish(op("saveWeightsForSampler"))
      yield* SubscriptionRef.set(published, version)
      return { version, path: `local://sampler_weights/${name}` }
    }),
    saveState: Effect.fn(op("saveState"))(function* (name: string) {
      if (!NAME.test(name)) return yield* fail(op("saveState"), "InvalidInput", `state name ${JSON.stringify(name)} must match ${NAME.source}`)
      const file = path.join(info.stateDir, `${name}.ckpt`)
      yield* calls.saveState(op("saveState"), file)
      return { path: file }
    }),
    loadState: Effect.fn(op("loadState"))(function* (file: string, options?: { readonly withOptimizer?: boolean }) {
      const candidates = [file, path.join(info.stateDir, `${file}.ckpt`)]
      const found = Option.getOrUndefined(yield* Effect.findFirst(candidates, (c) => Files.exists(c)))
      if (!found) return yield* fail(op("loadState"), "InvalidInput", `no state file at ${candidates.join(" or ")}`)
      yield* calls.loadState(op("loadState"), found, options?.withOptimizer ?? false)
    }),
    info: Effect.sync(() => ({
      modelName: info.modelName,
      loraRank: calls.loraRank,
      version: calls.trainerVersion(),
      maxSequenceLength: calls.config.contextLength,
      vocabSize: calls.config.vocabSize,
    })),
  })
}

const makeSampler = (s: SamplerCalls, calls: EngineCalls, info: ServiceInfo, published: SubscriptionRef.SubscriptionRef<number>): SamplerShape => {
  const sample = `${info.prefix}.sample`
  const computeLogprobs = `${info.prefix}.computeLogprobs`
  return Sampler.of({
    sample: Effect.fn(sample)(function* (prompt: ModelInput, params: SamplingParams, options: SampleOptions) {
      const tokens = modelInputTokens(prompt)
      const bad = checkSample(tokens, params, options.numSamples, calls.config)
      if (bad) return yield* fail(sample, "InvalidInput", bad)
      yield* awaitVersion(published, sample, options.minPolicyVersion, info.readyTimeout)
      return yield* s.sample(sample, tokens, params, {
        numSamples: options.numSamples,
        ...(options.includePromptLogprobs ? { includePromptLogprobs: true } : {}),
      })
    }),
    computeLogprobs: Effect.fn(computeLogprobs)(function* (input: ModelInput, options?: { readonly minPolicyVersion?: number }) {
      const tokens = modelInputTokens(input)
      const bad = checkLogprobsInput(tokens, calls.config)
      if (bad) return yield* fail(computeLogprobs, "InvalidInput", bad)
      yield* awaitVersion(published, computeLogprobs, options?.minPolicyVersion, info.readyTimeout)
      return yield* s.computeLogprobs(computeLogprobs, tokens)
    }),
    version: SubscriptionRef.get(published),
  })
}

/**
 * The embedded services over `calls`: every request checked here, then passed on.
 * @since 0.1.0 @category constructors
 */
export const services = Effect.fnUntraced(function* (calls: EngineCalls, info: ServiceInfo) {
  const published = yield* SubscriptionRef.make(calls.samplerVersion)
  const replicas = Arr.map(calls.samplers, (s) => makeSampler(s, calls, info, published))
  return {
    trainer: makeTrainer(calls, info, published),
    sampler: replicas[0],
    replicas,
    tokenizer: CharTokenizer.make(),
    reference: referenceOf(`${info.prefix}.reference`, calls.config, calls.referenceLogprobs, calls.referenceCheck),
  } satisfies EmbeddedServices
})

/**
 * Log-probs under the frozen base of `model`, on its reference engine
 * (`Engines.referenceEngine`), built on first use.
 * @since 0.1.0 @category constructors
 */
export const baseLogprobs = (model: LocalModel): EngineCalls["referenceLogprobs"] => {
  let engine: LocalSamplerEngine | undefined
  return (operation, seqs) =>
    Effect.try({
      try: () => {
        const reference = (engine ??= Engines.referenceEngine(model))
        return seqs.map((tokens) => reference.computeLogprobs(tokens))
      },
      catch: internal(operation),
    })
}

/**
 * Calls to engines of this thread: one trainer engine and its sampler engines.
 * @since 0.1.0 @category constructors
 */
export const inProcess = (trainer: LocalTrainerEngine, samplers: Arr.NonEmptyReadonlyArray<LocalSamplerEngine>): EngineCalls => ({
  config: trainer.model.config,
  loraRank: trainer.lora?.rank ?? 0,
  trainerVersion: () => trainer.version,
  samplerVersion: samplers[0].version,
  run: (operation, data, loss, run) => Effect.try({ try: () => trainer.run(data, loss, run), catch: internal(operation) }),
  optimStep: (operation, adam) => Effect.try({ try: () => trainer.optimStep(adam), catch: internal(operation) }),
  publish: (operation) =>
    Effect.try({
      try: () => {
        const adapter = trainer.publish()
        for (const s of samplers) s.setAdapter(adapter)
        return adapter.version
      },
      catch: internal(operation),
    }),
  saveState: (operation, file) => Effect.tryPromise({ try: () => trainer.saveState(file), catch: internal(operation) }),
  loadState: (operation, file, withOptimizer) =>
    Effect.tryPromise({ try: () => trainer.loadState(file, withOptimizer), catch: (e) => fail(operation, "InvalidInput", messageOf(e)) }),
  samplers: Arr.map(samplers, (engine) => ({
    sample: (operation, tokens, params, options) => Effect.tryPromise({ try: () => engine.sample(tokens, params, options), catch: internal(operation) }),
    computeLogprobs: (operation, tokens) => Effect.try({ try: () => engine.computeLogprobs(tokens), catch: internal(operation) }),
  })),
  referenceLogprobs: baseLogprobs(trainer.model),
  referenceCheck: Effect.void,
})

/**
 * Builds the engines of one adapter over `model` in this thread: its trainer and
 * `replicas` samplers (at least one), disposed with the scope.
 * @since 0.1.0 @category constructors
 */
export const acquireEngines = Effect.fnUntraced(function* (
  operation: string,
  model: LocalModel,
  options: { readonly lora: LoraConfig; readonly seed: number; readonly prefixCacheSize?: number | undefined; readonly replicas?: number | undefined },
): Effect.fn.Return<{ readonly trainer: LocalTrainerEngine; readonly samplers: Arr.NonEmptyReadonlyArray<LocalSamplerEngine> }, BackendError, Scope.Scope> {
  const acquire = <E extends { dispose(): void }>(build: () => E) =>
    Effect.acquireRelease(Effect.try({ try: build, catch: internal(operation) }), (e) => Effect.sync(() => e.dispose()))
  const trainer = yield* acquire(() => Engines.trainerEngine(model, options.lora, options.seed))
  const sampler = (i: number) => acquire(() => Engines.samplerEngine(model, options.seed, options.prefixCacheSize, i))
  const samplers: Arr.NonEmptyArray<LocalSamplerEngine> = [yield* sampler(0)]
  for (let i = 1; i < (options.replicas ?? 1); i++) samplers.push(yield* sampler(i))
  return { trainer, samplers }
})

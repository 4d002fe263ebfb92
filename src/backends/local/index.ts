/**
 * The embedded backend: a small character-level transformer with LoRA, trained and
 * sampled in-process on tfjs + wasm. `Local.layer(options)` provides the `Trainer`,
 * `Sampler` and `Tokenizer` services.
 *
 * The numeric work lives in plain classes (`LocalModel`, `LocalTrainerEngine`,
 * `LocalSamplerEngine`); this module only validates, wraps and connects them. The
 * trainer publishes an adapter to the sampler as plain Float32Arrays plus a version,
 * so the two engines can later live in separate threads.
 *
 * @since 0.1.0
 */
import * as fs from "node:fs"
import * as path from "node:path"
import * as tf from "@tensorflow/tfjs"
import "@tensorflow/tfjs-backend-wasm"
import { Context, type Duration, Effect, Layer, SubscriptionRef } from "effect"
import {
  type AdamParams,
  BackendError,
  type Datum,
  type ForwardOptions,
  type LossFn,
  type ModelInput,
  modelInputTokens,
  type SampleOptions,
  type SamplingParams,
} from "../../Contract.ts"
import { validateLoss } from "../../Loss.ts"
import { fail, internal } from "./Errors.ts"
import { Reference, type ReferenceShape } from "../../Reference.ts"
import { awaitVersion as awaitVersionOf, Sampler, type SamplerShape } from "../../Sampler.ts"
import { Tokenizer, type TokenizerShape } from "../../Tokenizer.ts"
import { Trainer, type TrainerShape } from "../../Trainer.ts"
import * as CharTokenizer from "./CharTokenizer.ts"
import * as Checkpoint from "./Checkpoint.ts"
import { checkLora, defaultLora, initBase, LocalModel, type LoraConfig, type ModelConfig, type Weights } from "./Model.ts"
import { LocalSamplerEngine } from "./SamplerEngine.ts"
import { LocalTrainerEngine } from "./TrainerEngine.ts"
import { checkAdam, checkData, checkLogprobsInput, checkTopK } from "./Validate.ts"
import * as Workers from "./Workers.ts"

export { LocalModel } from "./Model.ts"
export type { LoraConfig, LoraTarget, ModelConfig, Weights } from "./Model.ts"
export { LocalSamplerEngine } from "./SamplerEngine.ts"
export { LocalTrainerEngine } from "./TrainerEngine.ts"
export { LocalWorkers } from "./Workers.ts"

/** @since 0.1.0 @category models */
export interface LocalOptions {
  /** directory with `config.json` + `weights.bin` (default "models/base"; ignored when `config` is given without it) */
  readonly modelDir?: string
  /** a model config for random initialisation (tests); used when no `modelDir` is given */
  readonly config?: ModelConfig
  readonly lora?: LoraConfig
  /** seeds the adapter init, the random base (with `config`) and the sampler's stream */
  readonly seed?: number
  /** where `saveState` writes (default "runs/local-state") */
  readonly stateDir?: string
  /** K/V entries the sampler keeps: prompts and finished turns (default 256; 0 disables) */
  readonly prefixCacheSize?: number
  /** `layer` only: run the trainer and the sampler in their own worker threads (see `Workers.ts`) */
  readonly workers?: boolean
  /** with `workers`: threads that share each forward(-backward) call (default 1) */
  readonly trainerThreads?: number
  /**
   * how long a request pinned to a policy version (`minPolicyVersion`) waits for it to be
   * published before failing with reason `Timeout` (default 1 hour, as Loops' `ready_timeout`)
   */
  readonly readyTimeout?: Duration.Input
}

let ready: Promise<void> | undefined

/** Selects the wasm backend once per process. @since 0.1.0 @category constructors */
export const initTf = (): Promise<void> => {
  ready ??= (async () => {
    if (tf.getBackend() !== "wasm") await tf.setBackend("wasm")
    await tf.ready()
  })()
  return ready
}


/** Loads or creates the base model named by the options. @since 0.1.0 @category constructors */
export const loadModel = async (options: LocalOptions): Promise<{ readonly model: LocalModel; readonly name: string }> => {
  await initTf()
  if (options.config && !options.modelDir) {
    const weights: Weights = initBase(options.config, options.seed ?? 0)
    return { model: new LocalModel(options.config, weights), name: "local:random" }
  }
  const dir = options.modelDir ?? "models/base"
  const { config, weights } = await Checkpoint.loadBaseModel(dir)
  return { model: new LocalModel(config, weights), name: `local:${dir}` }
}

const NAME = /^[A-Za-z0-9._-]+$/

/** The services built over a pair of engines (exposed for tests and tools). @since 0.1.0 @category models */
export interface LocalServices {
  readonly trainer: TrainerShape
  readonly sampler: SamplerShape
  readonly tokenizer: TokenizerShape
  /** log-probs under the base model with the adapter off */
  readonly reference: ReferenceShape
  readonly trainerEngine: LocalTrainerEngine
  readonly samplerEngine: LocalSamplerEngine
}

/**
 * The reference policy of an embedded model: a sampler engine on the frozen base that is
 * never given an adapter (its merged weights are the base tensors themselves, so it holds
 * no copy of them, and it keeps no prompt cache). Built on first use.
 * @since 0.1.0 @category constructors
 */
export const makeReference = (model: LocalModel, operation = "Local.reference"): ReferenceShape => {
  let engine: LocalSamplerEngine | undefined
  const config = model.config
  return Reference.of({
    logprobs: Effect.fn(operation)(function* (inputs: ReadonlyArray<ModelInput>) {
      const seqs = inputs.map(modelInputTokens)
      for (let i = 0; i < seqs.length; i++) {
        const bad = checkLogprobsInput(seqs[i]!, config)
        if (bad) return yield* fail(operation, "InvalidInput", `inputs[${i}]: ${bad}`)
      }
      return yield* Effect.try({
        try: () => {
          engine ??= new LocalSamplerEngine(model, { prefixCacheSize: 0 })
          return seqs.map((tokens) => engine!.computeLogprobs(tokens))
        },
        catch: internal(operation),
      })
    }),
    check: Effect.void,
  })
}

/**
 * Builds the services over existing engines.
 * @since 0.1.0 @category constructors
 */
export const makeServices = Effect.fnUntraced(function* (
  trainerEngine: LocalTrainerEngine,
  samplerEngine: LocalSamplerEngine,
  info: { readonly modelName: string; readonly stateDir: string; readonly readyTimeout?: Duration.Input },
) {
  const published = yield* SubscriptionRef.make(samplerEngine.version)
  const config = trainerEngine.model.config
  const limits = { vocabSize: config.vocabSize, contextLength: config.contextLength }

  const runLoss = (operation: string, backward: boolean) =>
    Effect.fn(operation)(function* (data: ReadonlyArray<Datum>, lossFn: LossFn, options?: ForwardOptions) {
      const loss = yield* validateLoss(operation, lossFn, options?.lossFnConfig)
      const topKError = checkTopK(options?.topKLogprobs)
      if (topKError) return yield* fail(operation, "InvalidInput", topKError)
      const dataError = checkData(data, lossFn, limits)
      if (dataError) return yield* fail(operation, "InvalidInput", dataError)
      const topK = options?.topKLogprobs
      return yield* Effect.try({
        try: () => trainerEngine.run(data, loss, topK === undefined ? { backward } : { backward, topK }),
        catch: internal(operation),
      })
    })

  const awaitVersion = (operation: string, min: number | undefined) => awaitVersionOf(published, operation, min, info.readyTimeout)

  const trainer: TrainerShape = Trainer.of({
    forwardBackward: runLoss("Local.forwardBackward", true),
    forward: runLoss("Local.forward", false),
    optimStep: Effect.fn("Local.optimStep")(function* (adam: AdamParams) {
      const bad = checkAdam(adam)
      if (bad) return yield* fail("Local.optimStep", "InvalidInput", bad)
      return yield* Effect.try({ try: () => trainerEngine.optimStep(adam), catch: internal("Local.optimStep") })
    }),
    saveWeightsForSampler: Effect.fn("Local.saveWeightsForSampler")(function* (name: string) {
      const adapter = trainerEngine.publish()
      yield* Effect.try({ try: () => samplerEngine.setAdapter(adapter), catch: internal("Local.saveWeightsForSampler") })
      yield* SubscriptionRef.set(published, adapter.version)
      return { version: adapter.version, path: `local://sampler_weights/${name}` }
    }),
    saveState: Effect.fn("Local.saveState")(function* (name: string) {
      if (!NAME.test(name)) return yield* fail("Local.saveState", "InvalidInput", `state name ${JSON.stringify(name)} must match ${NAME.source}`)
      const file = path.join(info.stateDir, `${name}.ckpt`)
      yield* Effect.tryPromise({ try: () => trainerEngine.saveState(file), catch: internal("Local.saveState") })
      return { path: file }
    }),
    loadState: Effect.fn("Local.loadState")(function* (file: string, options?: { readonly withOptimizer?: boolean }) {
      const candidates = [file, path.join(info.stateDir, `${file}.ckpt`)]
      const found = candidates.find((c) => fs.existsSync(c))
      if (!found) return yield* fail("Local.loadState", "InvalidInput", `no state file at ${candidates.join(" or ")}`)
      yield* Effect.tryPromise({
        try: () => trainerEngine.loadState(found, options?.withOptimizer ?? false),
        catch: (e) => fail("Local.loadState", "InvalidInput", e instanceof Error ? e.message : String(e)),
      })
    }),
    info: Effect.sync(() => ({
      modelName: info.modelName,
      loraRank: trainerEngine.lora?.rank ?? 0,
      version: trainerEngine.version,
      maxSequenceLength: config.contextLength,
    })),
  })

  const sampler: SamplerShape = Sampler.of({
    sample: Effect.fn("Local.sample")(function* (prompt: ModelInput, params: SamplingParams, options: SampleOptions) {
      const tokens = modelInputTokens(prompt)
      const bad = samplerEngine.check(tokens, params, options.numSamples)
      if (bad) return yield* fail("Local.sample", "InvalidInput", bad)
      yield* awaitVersion("Local.sample", options.minPolicyVersion)
      return yield* Effect.tryPromise({
        try: () =>
          samplerEngine.sample(tokens, params, {
            numSamples: options.numSamples,
            ...(options.includePromptLogprobs ? { includePromptLogprobs: true } : {}),
          }),
        catch: internal("Local.sample"),
      })
    }),
    computeLogprobs: Effect.fn("Local.computeLogprobs")(function* (input: ModelInput, options?: { readonly minPolicyVersion?: number }) {
      const tokens = modelInputTokens(input)
      const bad = checkLogprobsInput(tokens, config)
      if (bad) return yield* fail("Local.computeLogprobs", "InvalidInput", bad)
      yield* awaitVersion("Local.computeLogprobs", options?.minPolicyVersion)
      return yield* Effect.try({ try: () => samplerEngine.computeLogprobs(tokens), catch: internal("Local.computeLogprobs") })
    }),
    version: Effect.sync(() => samplerEngine.version),
  })

  const reference = makeReference(trainerEngine.model)
  return { trainer, sampler, tokenizer: CharTokenizer.make(), reference, trainerEngine, samplerEngine } satisfies LocalServices
})

/**
 * Builds a trainer/sampler pair on one base model; engines are disposed with the scope.
 * @since 0.1.0 @category constructors
 */
export const make = Effect.fn("Local.make")(function* (options: LocalOptions = {}) {
  const lora = options.lora ?? defaultLora
  const loraError = checkLora(lora)
  if (loraError) return yield* fail("Local.make", "InvalidInput", loraError)
  const { model, name } = yield* Effect.acquireRelease(
    Effect.tryPromise({ try: () => loadModel(options), catch: (e) => fail("Local.make", "Unavailable", `cannot load the model: ${e instanceof Error ? e.message : String(e)}`) }),
    ({ model }) => Effect.sync(() => model.dispose()),
  )
  const seed = options.seed ?? 0
  const trainerEngine = yield* Effect.acquireRelease(
    Effect.try({ try: () => new LocalTrainerEngine(model, { lora, seed: seed + 1 }), catch: internal("Local.make") }),
    (e) => Effect.sync(() => e.dispose()),
  )
  const samplerEngine = yield* Effect.acquireRelease(
    Effect.try({
      try: () => new LocalSamplerEngine(model, { seed: seed + 2, ...(options.prefixCacheSize === undefined ? {} : { prefixCacheSize: options.prefixCacheSize }) }),
      catch: internal("Local.make"),
    }),
    (e) => Effect.sync(() => e.dispose()),
  )
  yield* Effect.logDebug(`local backend ready: ${name}, ${model.config.nLayers} layers, d ${model.config.dModel}, LoRA rank ${lora.rank}`)
  return yield* makeServices(trainerEngine, samplerEngine, {
    modelName: name,
    stateDir: options.stateDir ?? "runs/local-state",
    ...(options.readyTimeout !== undefined ? { readyTimeout: options.readyTimeout } : {}),
  })
})

/**
 * `Trainer`, `Sampler`, `Tokenizer` and `Reference` on the embedded model; with
 * `workers: true` the trainer and the sampler run in their own worker threads (the
 * reference on the sampler's).
 * @since 0.1.0 @category layers
 */
export const layer = (options: LocalOptions = {}): Layer.Layer<Trainer | Sampler | Tokenizer | Reference, BackendError> =>
  options.workers ? Workers.layer(options) : Layer.effectContext(
    Effect.map(make(options), (s) =>
      Context.make(Trainer, s.trainer).pipe(Context.add(Sampler, s.sampler), Context.add(Tokenizer, s.tokenizer), Context.add(Reference, s.reference)),
    ),
  )

/** @since 0.1.0 @category models */
export const Local = { layer, make, makeServices, makeReference, loadModel, initTf } as const

/**
 * The embedded backend: a small character-level transformer with LoRA, trained and
 * sampled in-process on tfjs + wasm. `Local.layer(options)` provides the `Trainer`,
 * `Sampler`, `Tokenizer` and `Reference` services.
 *
 * The numeric work lives in plain classes (`LocalModel`, `LocalTrainerEngine`,
 * `LocalSamplerEngine`), built in `Engines.ts`; the services over them are written once,
 * in `Embedded.ts`, for engines in this thread and in worker threads (`Workers.ts`) alike.
 * The trainer publishes an adapter to the sampler as plain Float32Arrays plus a version,
 * so the two engines can live in separate threads.
 *
 * @since 0.1.0
 */
import { Context, type Duration, Effect, Layer } from "effect"
import type { BackendError } from "../../contract/Contract.ts"
import { Reference, type ReferenceShape } from "../../services/Reference.ts"
import { Sampler } from "../../services/Sampler.ts"
import { Tokenizer } from "../../services/Tokenizer.ts"
import { Trainer } from "../../services/Trainer.ts"
import { acquireEngines, baseLogprobs, type EmbeddedServices, inProcess, referenceOf, services } from "./Embedded.ts"
import { DEFAULT_STATE_DIR, initTf, loadModel, type LocalOptions } from "./Engines.ts"
import { fail } from "./Errors.ts"
import { checkLora, defaultLora, type LocalModel } from "./Model.ts"
import type { LocalSamplerEngine } from "./SamplerEngine.ts"
import type { LocalTrainerEngine } from "./TrainerEngine.ts"
import * as Workers from "./Workers.ts"

export { initTf, loadModel, type LocalOptions } from "./Engines.ts"
export { LocalModel } from "./Model.ts"
export type { LoraConfig, LoraTarget, ModelConfig, Weights } from "./Model.ts"
export { LocalSamplerEngine } from "./SamplerEngine.ts"
export { LocalTrainerEngine } from "./TrainerEngine.ts"
export { LocalWorkers } from "./Workers.ts"

/** The services built over a pair of engines (exposed for tests and tools). @since 0.1.0 @category models */
export interface LocalServices extends EmbeddedServices {
  readonly trainerEngine: LocalTrainerEngine
  readonly samplerEngine: LocalSamplerEngine
}

/**
 * The reference policy of an embedded model: log-probs under the frozen base, on an
 * engine that is never given an adapter, built on first use.
 * @since 0.1.0 @category constructors
 */
export const makeReference = (model: LocalModel, operation = "Local.reference"): ReferenceShape =>
  referenceOf(operation, model.config, baseLogprobs(model), Effect.void)

/**
 * Builds the services over existing engines.
 * @since 0.1.0 @category constructors
 */
export const makeServices = Effect.fnUntraced(function* (
  trainerEngine: LocalTrainerEngine,
  samplerEngine: LocalSamplerEngine,
  info: { readonly modelName: string; readonly stateDir: string; readonly readyTimeout?: Duration.Input },
) {
  const built = yield* services(inProcess(trainerEngine, [samplerEngine]), { prefix: "Local", ...info })
  return { ...built, trainerEngine, samplerEngine } satisfies LocalServices
})

/**
 * Builds a trainer and its sampler(s) on one base model; engines are disposed with the scope.
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
  const engines = yield* acquireEngines("Local.make", model, {
    lora,
    seed: options.seed ?? 0,
    prefixCacheSize: options.prefixCacheSize,
    replicas: Math.max(1, Math.floor(options.replicas ?? 1)),
  })
  yield* Effect.logDebug(`local backend ready: ${name}, ${model.config.nLayers} layers, d ${model.config.dModel}, LoRA rank ${lora.rank}`)
  const built = yield* services(inProcess(engines.trainer, engines.samplers), {
    prefix: "Local",
    modelName: name,
    stateDir: options.stateDir ?? DEFAULT_STATE_DIR,
    readyTimeout: options.readyTimeout,
  })
  return { ...built, trainerEngine: engines.trainer, samplerEngine: engines.samplers[0] } satisfies LocalServices
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

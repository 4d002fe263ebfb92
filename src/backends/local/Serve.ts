/**
 * The embedded backend behind the Tinker-protocol server, as `gyre serve` runs it: the
 * trainer and sampler with optional sampler replicas, and the `ModelFactory` that gives
 * each `create_model` its own adapter over the one frozen base. Every model's services
 * are the embedded services of `Embedded.ts` over engines built in `Engines.ts`, as
 * in-process and in worker threads.
 *
 * Each `create_model` gets its own LoRA adapter of the rank it asks for, with its own
 * optimizer state and sampler replicas; the models share the server's memory budget
 * (`modelBytes` says what one costs). With `workers` the server trains one adapter, in
 * worker threads.
 *
 * @since 0.1.0
 */
import * as path from "node:path"
import { Context, Effect, Layer, type Scope } from "effect"
import { BackendError } from "../../contract/Contract.ts"
import { Sampler, type SamplerShape } from "../../services/Sampler.ts"
import { Tokenizer } from "../../services/Tokenizer.ts"
import { Trainer, type TrainerShape } from "../../services/Trainer.ts"
import * as Server from "../http/server/Server.ts"
import * as CharTokenizer from "./CharTokenizer.ts"
import * as Checkpoint from "./Checkpoint.ts"
import { acquireEngines, inProcess, services } from "./Embedded.ts"
import type { LoraConfig, ModelConfig } from "./Config.ts"
import { DEFAULT_STATE_DIR } from "./Engines.ts"
import { Local } from "./index.ts"
import { baseShapes, defaultLora, type LocalModel, loraShapes } from "./Model.ts"
import type { LocalOptions } from "./Options.ts"
import * as Peft from "./Peft.ts"
import { DEFAULT_PREFIX_CACHE_SIZE } from "./SamplerEngine.ts"

/** The model `--random-init` builds: small enough to start in a second. @since 0.1.0 @category constants */
export const RANDOM_CONFIG: ModelConfig = {
  vocabSize: CharTokenizer.VOCAB_SIZE,
  contextLength: 64,
  nLayers: 2,
  dModel: 64,
  nHeads: 4,
  mlpRatio: 4,
}

/** How long a real tokenizer's prompts may be on a `--random-init` model: a GSM8K or MATH chat prompt with room to answer. @since 0.1.0 @category constants */
export const RANDOM_CONTEXT_LENGTH = 4096

/** Prompt caches a `--random-init` model of a real vocabulary keeps: each holds a row of logits over the whole vocabulary. @since 0.1.0 @category constants */
export const RANDOM_PREFIX_CACHE_SIZE = 32

/**
 * The model `--random-init --tokenizer` builds: a real tokenizer's vocabulary (about
 * 151,669 ids for Qwen3) and a context long enough for real prompts, narrow and shallow so
 * it runs on a CPU; most of its weights are the embedding and the unembedding
 * (vocabulary × 32 each). It learns nothing useful: it runs a real model's chat
 * template, tool calls and agent endpoint end to end.
 * @since 0.1.0 @category constructors
 */
export const randomConfigFor = (vocabSize: number, contextLength = RANDOM_CONTEXT_LENGTH): ModelConfig => ({
  vocabSize,
  contextLength,
  nLayers: 2,
  dModel: 32,
  nHeads: 2,
  mlpRatio: 2,
})

/** The embedded backend's options; `replicas` sampler engines (not with `workers`). @since 0.1.0 @category models */
export type EmbeddedOptions = LocalOptions

/** The embedded backend with `replicas` sampler engines that all receive every publication. @since 0.1.0 @category models */
export interface Embedded {
  readonly trainer: TrainerShape
  readonly sampler: SamplerShape
  readonly replicas: ReadonlyArray<SamplerShape>
  readonly vocabSize: number
  readonly modelName: string
  /** the folder every model's `saveState` writes under (each factory-built model in its own subfolder) */
  readonly stateDir: string
  /** a fresh adapter per `create_model` (absent with `workers`) */
  readonly models?: Server.ModelFactory | undefined
}

const MAX_RANK = 64

/** The attention projections; the others (w1, w2) are the MLP's. */
const ATTENTION: ReadonlyArray<string> = ["q", "k", "v", "o"]

/**
 * Bytes one model of `lora` holds: the adapter, its gradients and two Adam moments
 * (float32 each), and per sampler replica the merged copy of the adapted base matrices
 * plus a full prompt cache.
 * @since 0.1.0 @category combinators
 */
export const modelBytes = (config: ModelConfig, lora: LoraConfig, replicas: number, prefixCacheSize = DEFAULT_PREFIX_CACHE_SIZE): number => {
  const count = (shapes: Record<string, ReadonlyArray<number>>) => Object.values(shapes).reduce((a, s) => a + s.reduce((x, y) => x * y, 1), 0)
  const adapter = count(loraShapes(config, lora))
  const base = baseShapes(config)
  let merged = 0
  for (let i = 0; i < config.nLayers; i++) for (const t of lora.targets) merged += (base[`l${i}.${t}`] ?? []).reduce((x, y) => x * y, 1)
  // each entry: K/V of every layer for up to the context, plus one row of logits
  const cache = prefixCacheSize * (2 * config.nLayers * config.contextLength * config.dModel + config.vocabSize)
  return 4 * (4 * adapter + replicas * (merged + cache))
}

/** One adapter per `create_model`, of the rank it asks for, over the shared frozen base. */
const factory = (model: LocalModel, baseLora: LoraConfig, n: number, options: EmbeddedOptions & { readonly modelName: string; readonly stateDir: string }): Server.ModelFactory => ({
  defaultRank: baseLora.rank,
  maxRank: MAX_RANK,
  bytes: (rank) => modelBytes(model.config, { ...baseLora, rank }, n, options.prefixCacheSize),
  create: ({ rank, seed, name, trains }) =>
    Effect.gen(function* () {
      // the same scale alpha / rank as the served adapter, on the parts asked for
      const targets = baseLora.targets.filter((t) => (ATTENTION.includes(t) ? trains.attn : trains.mlp))
      if (targets.length === 0) {
        return yield* new BackendError({ reason: "InvalidInput", operation: "create_model", message: `the served adapter trains ${baseLora.targets.join(", ")}; none of them is in the parts asked for` })
      }
      const lora: LoraConfig = { ...baseLora, rank, alpha: (baseLora.alpha / baseLora.rank) * rank, targets }
      const engines = yield* acquireEngines("create_model", model, {
        lora,
        seed: (options.seed ?? 0) + 7919 * (seed + 1),
        prefixCacheSize: options.prefixCacheSize,
        replicas: n,
      })
      const built = yield* services(inProcess(engines.trainer, engines.samplers), {
        prefix: "Local",
        modelName: options.modelName,
        // each model keeps its checkpoints in its own folder
        stateDir: path.join(options.stateDir, name.replace(/[^A-Za-z0-9._-]/g, "_")),
        readyTimeout: options.readyTimeout,
      })
      return { trainer: built.trainer, replicas: built.replicas, loraRank: rank }
    }),
})

const fromWorkers = Effect.fnUntraced(function* (options: LocalOptions) {
  const ctx = yield* Layer.build(Local.layer(options))
  const trainer = Context.get(ctx, Trainer)
  const sampler = Context.get(ctx, Sampler)
  const info = yield* trainer.info
  return {
    trainer,
    sampler,
    replicas: [sampler],
    vocabSize: Context.get(ctx, Tokenizer).vocabSize,
    modelName: info.modelName,
    stateDir: options.stateDir ?? DEFAULT_STATE_DIR,
  } satisfies Embedded
})

/**
 * Builds the embedded backend with several sampler replicas. Publishing
 * (`saveWeightsForSampler`) updates every replica before it returns.
 * @since 0.1.0 @category constructors
 */
export const embedded = Effect.fn("Serve.embedded")(function* (options: EmbeddedOptions = {}): Effect.fn.Return<Embedded, BackendError, Scope.Scope> {
  const n = Math.max(1, Math.floor(options.replicas ?? 1))
  if (options.workers) {
    if (n > 1) {
      return yield* new BackendError({ reason: "InvalidInput", operation: "serve", message: "--workers runs one sampler (in its own thread); drop --replicas or --workers" })
    }
    return yield* fromWorkers(options)
  }
  const base = yield* Local.make({ ...options, replicas: n })
  const info = yield* base.trainer.info
  const stateDir = options.stateDir ?? DEFAULT_STATE_DIR
  const model = base.trainerEngine.model
  return {
    trainer: base.trainer,
    sampler: base.sampler,
    replicas: base.replicas,
    vocabSize: model.config.vocabSize,
    modelName: info.modelName,
    stateDir,
    models: factory(model, options.lora ?? defaultLora, n, { ...options, modelName: info.modelName, stateDir }),
  } satisfies Embedded
})

/** A checkpoint's download archive: the PEFT adapter, `checkpoint_complete` and the state file. @since 0.1.0 @category constructors */
export const archivePack: NonNullable<Server.Options["archivePack"]> = (bytes, entry) => Peft.archiveFiles(bytes, Checkpoint.decode, entry.base_model)

/** The server a `serve` process runs (one adapter per `create_model`, unless `models` says otherwise). @since 0.1.0 @category layers */
export const layer = (options: EmbeddedOptions & Server.Options = {}) =>
  Layer.effect(
    Server.Running,
    Effect.gen(function* () {
      const backend = yield* embedded(options)
      return yield* Server.make({ vocabSize: backend.vocabSize, models: backend.models, archivePack, ...options, stateDir: backend.stateDir, replicas: backend.replicas }).pipe(
        Effect.provideService(Trainer, backend.trainer),
        Effect.provideService(Sampler, backend.sampler),
      )
    }),
  )

/**
 * The `serve` command: the embedded backend (or any `Trainer | Sampler`) behind the
 * Tinker-protocol server, with optional sampler replicas.
 *
 * ```bash
 * npx tsx serve                      # models/base on 127.0.0.1:8080
 * npx tsx serve --port 9000 --replicas 4
 * npx tsx serve --random-init        # a tiny random model, no pretraining needed
 * ```
 *
 * @since 0.1.0
 */
import { Context, Effect, Layer, Option, Redacted, Schema } from "effect"
import { Command, Flag } from "effect/cli"
import { BackendError } from "../../Contract.ts"
import * as CharTokenizer from "../local/CharTokenizer.ts"
import { Local, type LocalOptions, LocalSamplerEngine, type ModelConfig } from "../local/index.ts"
import { Sampler, type SamplerShape } from "../../Sampler.ts"
import { Tokenizer } from "../../Tokenizer.ts"
import { Trainer, type TrainerShape } from "../../Trainer.ts"
import { apiKeyConfig } from "./Client.ts"
import * as Server from "./Server.ts"

/** The model `--random-init` builds: small enough to start in a second. @since 0.1.0 @category constants */
export const RANDOM_CONFIG: ModelConfig = {
  vocabSize: CharTokenizer.VOCAB_SIZE,
  contextLength: 64,
  nLayers: 2,
  dModel: 64,
  nHeads: 4,
  mlpRatio: 4,
}

/** @since 0.1.0 @category models */
export interface EmbeddedOptions extends LocalOptions {
  /** sampler replicas, each with its own engine (KV and prefix cache) on the shared base weights */
  readonly replicas?: number
}

const fromLayer = Effect.fnUntraced(function* (options: LocalOptions) {
  const ctx = yield* Layer.build(Local.layer(options))
  const trainer = Context.get(ctx, Trainer)
  const sampler = Context.get(ctx, Sampler)
  const info = yield* trainer.info
  return { trainer, sampler, replicas: [sampler], vocabSize: Context.get(ctx, Tokenizer).vocabSize, modelName: info.modelName } satisfies Embedded
})

/** The embedded backend with `replicas` sampler engines that all receive every publication. @since 0.1.0 @category models */
export interface Embedded {
  readonly trainer: TrainerShape
  readonly sampler: SamplerShape
  readonly replicas: ReadonlyArray<SamplerShape>
  readonly vocabSize: number
  readonly modelName: string
}

/**
 * Builds the embedded backend with several sampler replicas. Publishing
 * (`saveWeightsForSampler`) updates every replica before it returns.
 * @since 0.1.0 @category constructors
 */
export const embedded = Effect.fn("Serve.embedded")(function* (options: EmbeddedOptions = {}) {
  const n = Math.max(1, Math.floor(options.replicas ?? 1))
  if (options.workers) {
    if (n > 1) {
      return yield* new BackendError({ reason: "InvalidInput", operation: "serve", message: "--workers runs one sampler (in its own thread); drop --replicas or --workers" })
    }
    return yield* fromLayer(options)
  }
  const base = yield* Local.make(options)
  const info = yield* base.trainer.info
  const stateDir = options.stateDir ?? "runs/local-state"
  const extra: Array<{ readonly trainer: TrainerShape; readonly sampler: SamplerShape }> = []
  for (let i = 1; i < n; i++) {
    const engine = yield* Effect.acquireRelease(
      Effect.try({
        try: () =>
          new LocalSamplerEngine(base.trainerEngine.model, {
            seed: (options.seed ?? 0) + 2 + 1000 * i,
            ...(options.prefixCacheSize === undefined ? {} : { prefixCacheSize: options.prefixCacheSize }),
          }),
        catch: (e) => new BackendError({ reason: "Internal", operation: "Serve.embedded", message: e instanceof Error ? e.message : String(e) }),
      }),
      (e) => Effect.sync(() => e.dispose()),
    )
    extra.push(yield* Local.makeServices(base.trainerEngine, engine, { modelName: info.modelName, stateDir }))
  }
  const trainer: TrainerShape = {
    ...base.trainer,
    saveWeightsForSampler: (name) =>
      Effect.tap(base.trainer.saveWeightsForSampler(name), () =>
        Effect.forEach(extra, (r) => r.trainer.saveWeightsForSampler(name), { discard: true }),
      ),
  }
  return {
    trainer,
    sampler: base.sampler,
    replicas: [base.sampler, ...extra.map((r) => r.sampler)],
    vocabSize: base.trainerEngine.model.config.vocabSize,
    modelName: info.modelName,
  } satisfies Embedded
})

const Port = Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 65535 }))
const Positive = Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 64 }))

const flags = {
  port: Flag.Int("port").pipe(Flag.withSchema(Port), Flag.withDescription("port to listen on (0 picks a free one)"), Flag.withDefault(8080)),
  host: Flag.String("host").pipe(Flag.withDescription("address to listen on"), Flag.withDefault("127.0.0.1")),
  replicas: Flag.Int("replicas").pipe(
    Flag.withSchema(Positive),
    Flag.withDescription("sampler replicas; requests with one affinity key stay on one replica (consistent hashing)"),
    Flag.withDefault(1),
  ),
  model: Flag.String("model").pipe(Flag.withDescription("folder of the base model (default models/base)"), Flag.optional),
  randomInit: Flag.Boolean("random-init").pipe(
    Flag.withDescription("serve a small randomly initialised model instead of models/base"),
    Flag.withDefault(false),
  ),
  loraRank: Flag.Int("lora-rank").pipe(Flag.withSchema(Positive), Flag.withDescription("LoRA rank of the trained adapter (default 8)"), Flag.optional),
  seed: Flag.Int("seed").pipe(Flag.withDescription("seed of the adapter init and the samplers"), Flag.withDefault(0)),
  stateDir: Flag.String("state-dir").pipe(Flag.withDescription("where save_weights writes checkpoints"), Flag.withDefault("runs/serve-state")),
  workers: Flag.Boolean("workers").pipe(
    Flag.withDescription("run the trainer and the sampler in their own worker threads (one sampler replica)"),
    Flag.withDefault(false),
  ),
  requireApiKey: Flag.Boolean("require-api-key").pipe(
    Flag.withDescription("reject requests whose X-API-Key differs from TINKER_API_KEY (or BASETEN_API_KEY)"),
    Flag.withDefault(false),
  ),
}

/**
 * `serve [--port N] [--replicas N] [--model DIR | --random-init] ...`
 * @since 0.1.0 @category commands
 */
export const serveCommand = Command.make(
  "serve",
  flags,
  Effect.fn("Serve.run")(function* (f) {
    const apiKey = f.requireApiKey ? yield* apiKeyConfig : Option.none<Redacted.Redacted<string>>()
    if (f.requireApiKey && Option.isNone(apiKey)) {
      return yield* Effect.fail(new BackendError({ reason: "InvalidInput", operation: "serve", message: "--require-api-key needs TINKER_API_KEY or BASETEN_API_KEY" }))
    }
    const lora = Option.map(f.loraRank, (rank) => ({ rank, alpha: 2 * rank, targets: ["q", "k", "v", "o", "w1", "w2"] as const }))
    const backend = yield* embedded({
      replicas: f.replicas,
      workers: f.workers,
      seed: f.seed,
      stateDir: f.stateDir,
      ...(f.randomInit ? { config: RANDOM_CONFIG } : { modelDir: Option.getOrElse(f.model, () => "models/base") }),
      ...(Option.isSome(lora) ? { lora: { ...lora.value, targets: [...lora.value.targets] } } : {}),
    })
    const server = yield* Server.make({
      port: f.port,
      host: f.host,
      replicas: backend.replicas,
      vocabSize: backend.vocabSize,
      tokenizerId: "char-ascii",
      ...(Option.isSome(apiKey) ? { apiKey: apiKey.value } : {}),
    }).pipe(Effect.provideService(Trainer, backend.trainer), Effect.provideService(Sampler, backend.sampler))
    yield* Effect.logInfo(`ready: npx tsx run <env> --backend ${server.url}`)
    return yield* Effect.never
  }, Effect.scoped),
).pipe(Command.withDescription("Serve the embedded trainer and sampler over the Tinker wire protocol (JSON over HTTP)"))

/** For tests: the layer a `serve` process runs. @since 0.1.0 @category layers */
export const layer = (options: EmbeddedOptions & Server.Options = {}) =>
  Layer.effect(
    Server.Running,
    Effect.gen(function* () {
      const backend = yield* embedded(options)
      return yield* Server.make({ vocabSize: backend.vocabSize, ...options, replicas: backend.replicas }).pipe(
        Effect.provideService(Trainer, backend.trainer),
        Effect.provideService(Sampler, backend.sampler),
      )
    }),
  )

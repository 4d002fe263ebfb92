/**
 * `gyre serve`: the embedded trainer and sampler behind the Tinker-protocol server,
 * with optional sampler replicas. This is where the embedded backend is built and handed
 * to the server (`Server.make`); the HTTP backend itself knows only the protocol and the
 * `ModelFactory` hook this module fills.
 *
 * ```bash
 * npx tsx serve                      # gyre's base model on 127.0.0.1:8080
 * npx tsx serve --port 9000 --replicas 4
 * npx tsx serve --random-init        # a tiny random model, no pretraining needed
 * ```
 *
 * Each `create_model` gets its own LoRA adapter of the rank it asks for (default the
 * `--lora-rank`), with its own optimizer state and sampler, over the one frozen base;
 * the models share `--memory-budget-mb` (`modelBytes` says what one costs). With
 * `--workers` the server trains one adapter, in worker threads. Checkpoints that
 * `save_weights` writes under `--state-dir` are recorded in its checkpoint index, so a
 * server restarted on the same folder still loads them, and can be downloaded through the
 * archive route.
 *
 * @since 0.1.0
 */
import { DEFAULT_PREFIX_CACHE_SIZE } from "../backends/local/SamplerEngine.ts"
import { Context, Duration, Effect, Layer, Option, Redacted, Schema, type Scope } from "effect"
import { Command, Flag } from "effect/cli"
import * as path from "node:path"
import { BackendError } from "../Contract.ts"
import * as CharTokenizer from "../backends/local/CharTokenizer.ts"
import { Local, type LocalModel, type LocalOptions, LocalSamplerEngine, LocalTrainerEngine, type LoraConfig, type ModelConfig } from "../backends/local/index.ts"
import * as Checkpoint from "../backends/local/Checkpoint.ts"
import { baseShapes, defaultLora, loraShapes } from "../backends/local/Model.ts"
import * as Peft from "../backends/local/Peft.ts"
import { Sampler, type SamplerShape } from "../Sampler.ts"
import { Tokenizer } from "../Tokenizer.ts"
import { Trainer, type TrainerShape } from "../Trainer.ts"
import { apiKeyConfig } from "../backends/http/Client.ts"
import * as Server from "../backends/http/Server.ts"
import { defaultModelDir } from "./paths.ts"

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
  return {
    trainer,
    sampler,
    replicas: [sampler],
    vocabSize: Context.get(ctx, Tokenizer).vocabSize,
    modelName: info.modelName,
    stateDir: options.stateDir ?? DEFAULT_STATE_DIR,
  } satisfies Embedded
})

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

/** Where the embedded backend saves state when no `stateDir` is given (the embedded backend's own default). */
const DEFAULT_STATE_DIR = "runs/local-state"

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

/**
 * Builds trainer and sampler engines for a new adapter over the frozen base `model`:
 * `replicas` samplers, all updated by each publication.
 */
const replicated = Effect.fnUntraced(function* (
  model: LocalModel,
  trainerEngine: LocalTrainerEngine,
  first: { readonly trainer: TrainerShape; readonly sampler: SamplerShape },
  n: number,
  options: { readonly seed: number; readonly prefixCacheSize: number | undefined; readonly modelName: string; readonly stateDir: string },
) {
  const extra: Array<{ readonly trainer: TrainerShape; readonly sampler: SamplerShape }> = []
  for (let i = 1; i < n; i++) {
    const engine = yield* Effect.acquireRelease(
      Effect.try({
        try: () => new LocalSamplerEngine(model, { seed: options.seed + 2 + 1000 * i, ...(options.prefixCacheSize === undefined ? {} : { prefixCacheSize: options.prefixCacheSize }) }),
        catch: (e) => new BackendError({ reason: "Internal", operation: "Serve.embedded", message: e instanceof Error ? e.message : String(e) }),
      }),
      (e) => Effect.sync(() => e.dispose()),
    )
    extra.push(yield* Local.makeServices(trainerEngine, engine, { modelName: options.modelName, stateDir: options.stateDir }))
  }
  const trainer: TrainerShape = {
    ...first.trainer,
    saveWeightsForSampler: (name) =>
      Effect.tap(first.trainer.saveWeightsForSampler(name), () => Effect.forEach(extra, (r) => r.trainer.saveWeightsForSampler(name), { discard: true })),
  }
  return { trainer, replicas: [first.sampler, ...extra.map((r) => r.sampler)] }
})

const internalError = (operation: string) => (e: unknown) => new BackendError({ reason: "Internal", operation, message: e instanceof Error ? e.message : String(e) })

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
      const s = (options.seed ?? 0) + 7919 * (seed + 1)
      const trainerEngine = yield* Effect.acquireRelease(
        Effect.try({ try: () => new LocalTrainerEngine(model, { lora, seed: s + 1 }), catch: internalError("create_model") }),
        (e) => Effect.sync(() => e.dispose()),
      )
      const samplerEngine = yield* Effect.acquireRelease(
        Effect.try({
          try: () => new LocalSamplerEngine(model, { seed: s + 2, ...(options.prefixCacheSize === undefined ? {} : { prefixCacheSize: options.prefixCacheSize }) }),
          catch: internalError("create_model"),
        }),
        (e) => Effect.sync(() => e.dispose()),
      )
      // each model keeps its checkpoints in its own folder
      const stateDir = path.join(options.stateDir, name.replace(/[^A-Za-z0-9._-]/g, "_"))
      const first = yield* Local.makeServices(trainerEngine, samplerEngine, { modelName: options.modelName, stateDir })
      const { trainer, replicas } = yield* replicated(model, trainerEngine, first, n, { seed: s, prefixCacheSize: options.prefixCacheSize, modelName: options.modelName, stateDir })
      return { trainer, replicas, loraRank: rank }
    }),
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
    return yield* fromLayer(options)
  }
  const base = yield* Local.make(options)
  const info = yield* base.trainer.info
  const stateDir = options.stateDir ?? DEFAULT_STATE_DIR
  const model = base.trainerEngine.model
  const { trainer, replicas } = yield* replicated(model, base.trainerEngine, base, n, {
    seed: options.seed ?? 0,
    prefixCacheSize: options.prefixCacheSize,
    modelName: info.modelName,
    stateDir,
  })
  return {
    trainer,
    sampler: base.sampler,
    replicas,
    vocabSize: model.config.vocabSize,
    modelName: info.modelName,
    stateDir,
    models: factory(model, options.lora ?? defaultLora, n, { ...options, modelName: info.modelName, stateDir }),
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
  model: Flag.String("model").pipe(Flag.withDescription(`folder of the base model (default gyre's own, ${defaultModelDir})`), Flag.optional),
  randomInit: Flag.Boolean("random-init").pipe(
    Flag.withDescription("serve a small randomly initialised model instead of a base model folder"),
    Flag.withDefault(false),
  ),
  loraRank: Flag.Int("lora-rank").pipe(Flag.withSchema(Positive), Flag.withDescription("LoRA rank of the trained adapter (default 8)"), Flag.optional),
  seed: Flag.Int("seed").pipe(Flag.withDescription("seed of the adapter init and the samplers"), Flag.withDefault(0)),
  stateDir: Flag.String("state-dir").pipe(Flag.withDescription("where save_weights writes checkpoints, with the index that keeps them across restarts (the archive route hands out files from this folder only)"), Flag.withDefault("runs/serve-state")),
  workers: Flag.Boolean("workers").pipe(
    Flag.withDescription("run the trainer and the sampler in their own worker threads (one sampler replica)"),
    Flag.withDefault(false),
  ),
  memoryBudget: Flag.Int("memory-budget-mb").pipe(
    Flag.withSchema(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 1_048_576 }))),
    Flag.withDescription("MiB the trained models (adapters, optimizer state, sampler copies) may hold together; create_model beyond it gets 403"),
    Flag.withDefault(Server.DEFAULT_MEMORY_BUDGET_BYTES / 2 ** 20),
  ),
  sessionIdle: Flag.Int("session-idle-seconds").pipe(
    Flag.withSchema(Schema.Int.check(Schema.isBetween({ minimum: 30, maximum: 604_800 }))),
    Flag.withDescription("a session without heartbeats or requests this long expires and frees its models (clients heartbeat every 10 s)"),
    Flag.withDefault(Duration.toSeconds(Server.DEFAULT_SESSION_IDLE_TIMEOUT)),
  ),
  readyTimeout: Flag.Int("ready-timeout-seconds").pipe(
    Flag.withSchema(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 604_800 }))),
    Flag.withDescription("how long a sample pinned to an unpublished policy version waits before it fails"),
    Flag.withDefault(3600),
  ),
  maxPending: Flag.Int("max-pending").pipe(
    Flag.withSchema(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 1_000_000 }))),
    Flag.withDescription("requests in progress at once; beyond it submissions get 429"),
    Flag.withDefault(Server.DEFAULT_MAX_PENDING_FUTURES),
  ),
  zstd: Flag.Boolean("zstd").pipe(
    Flag.withDescription("ask clients to zstd-compress their protobuf forward_backward bodies (smaller on a network, more CPU on both sides)"),
    Flag.withDefault(false),
  ),
  requireApiKey: Flag.Boolean("require-api-key").pipe(
    Flag.withDescription("reject requests whose X-API-Key differs from TINKER_API_KEY (or BASETEN_API_KEY)"),
    Flag.withDefault(false),
  ),
}

/** The attention projections; the others (w1, w2) are the MLP's. */
const ATTENTION: ReadonlyArray<string> = ["q", "k", "v", "o"]

/** A checkpoint's download archive: the PEFT adapter, `checkpoint_complete` and the state file. */
const archivePack: NonNullable<Server.Options["archivePack"]> = (bytes, entry) => Peft.archiveFiles(bytes, Checkpoint.decode, entry.base_model)

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
      ...(f.randomInit ? { config: RANDOM_CONFIG } : { modelDir: Option.getOrElse(f.model, () => defaultModelDir) }),
      ...(Option.isSome(lora) ? { lora: { ...lora.value, targets: [...lora.value.targets] } } : {}),
    })
    const server = yield* Server.make({
      port: f.port,
      host: f.host,
      replicas: backend.replicas,
      vocabSize: backend.vocabSize,
      tokenizerId: "char-ascii",
      models: backend.models,
      memoryBudget: f.memoryBudget * 2 ** 20,
      sessionIdleTimeout: Duration.seconds(f.sessionIdle),
      readyTimeout: Duration.seconds(f.readyTimeout),
      maxPendingFutures: f.maxPending,
      stateDir: backend.stateDir,
      compressForwardBackward: f.zstd,
      archivePack,
      ...(Option.isSome(apiKey) ? { apiKey: apiKey.value } : {}),
    }).pipe(Effect.provideService(Trainer, backend.trainer), Effect.provideService(Sampler, backend.sampler))
    yield* Effect.logInfo(`ready: npx tsx run <env> --backend ${server.url}`)
    return yield* Effect.never
  }, Effect.scoped),
).pipe(Command.withDescription("Serve the embedded trainer and sampler over the Tinker wire protocol (JSON, and protobuf for forward_backward and results, as the official SDK speaks it)"))

/** For tests: the layer a `serve` process runs (one adapter per `create_model`, unless `models` says otherwise). @since 0.1.0 @category layers */
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

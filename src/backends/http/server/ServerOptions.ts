/**
 * What `serve`'s HTTP server is built from and what it gives back: its options with their
 * defaults, its counters and the handle of a running server.
 *
 * @since 0.1.0
 */
import { Duration, type Effect, type Redacted } from "effect"
import type { BodyLimit } from "../../../platform/HttpServer.ts"
import type { SamplerShape } from "../../../services/Sampler.ts"
import type * as CheckpointIndex from "./CheckpointIndex.ts"
import type * as Models from "./Models.ts"
import type * as Tar from "../wire/Tar.ts"

/** @since 0.1.0 @category constants */
export const DEFAULT_MAX_PENDING_FUTURES = 1024
/** @since 0.1.0 @category constants */
export const DEFAULT_MAX_BODY_BYTES = 64 * 2 ** 20

/** The largest body, and the flag that raises it, for the 413. @since 0.1.0 @category constructors */
export const bodyLimitOf = (maxBytes: number): BodyLimit => ({ maxBytes, raiseWith: "serve --max-body-mb" })
/** @since 0.1.0 @category constants */
export const DEFAULT_SESSION_IDLE_TIMEOUT: Duration.Duration = Duration.minutes(5)
/** @since 0.1.0 @category constants */
export const DEFAULT_MEMORY_BUDGET_BYTES = 512 * 2 ** 20

/** @since 0.1.0 @category models */
export interface Options {
  /** 0 (the default) picks a free port */
  readonly port?: number | undefined
  /** default 127.0.0.1 */
  readonly host?: string | undefined
  /** sampler replicas of the base model; default one, the `Sampler` service */
  readonly replicas?: ReadonlyArray<SamplerShape> | undefined
  /** builds a fresh adapter per `create_model`; without it every model attaches to the `Trainer` in context */
  readonly models?: Models.ModelFactory | undefined
  /** bytes the models built by `models` may hold together (default 512 MiB); beyond it `create_model` gets 403 */
  readonly memoryBudget?: number | undefined
  /** a session not heard from this long expires and frees its models (default 5 min; the client heartbeats every 10 s) */
  readonly sessionIdleTimeout?: Duration.Input | undefined
  /** how long a sample pinned to an unpublished policy version waits (default 1 hour) */
  readonly readyTimeout?: Duration.Input | undefined
  /** the most futures running at once (default 1024); beyond it a submission gets 429 */
  readonly maxPendingFutures?: number | undefined
  /** the base model name clients must ask for; default the trainer's `modelName` */
  readonly modelName?: string | undefined
  /** reported by `get_info` */
  readonly tokenizerId?: string | undefined
  /** token ids must be below it (unchecked when absent) */
  readonly vocabSize?: number | undefined
  /** when set, every request but `healthz` must carry it as `X-API-Key` */
  readonly apiKey?: Redacted.Redacted<string> | undefined
  /** how long `retrieve_future` holds a poll (default 20 s) */
  readonly pollWait?: Duration.Input | undefined
  /** how long finished futures and idempotency keys are kept (default 15 min); an answer a poll was given, 10 s more */
  readonly futureTtl?: Duration.Input | undefined
  /** largest request body (default 64 MiB); beyond it a 413 names the limit and `serve --max-body-mb` */
  readonly maxBodyBytes?: number | undefined
  /** most datums in one forward(_backward) (default 4096) */
  readonly maxDatums?: number | undefined
  /** most samples in one `asample` (default 256) */
  readonly maxSamples?: number | undefined
  /** how long a training call waits for the calls with smaller seq ids (default 10 min) */
  readonly turnTimeout?: Duration.Input | undefined
  /** sampling gather window: closes `sampleGatherQuiet` after the last arrival, at most `sampleGather` after the first (3 ms / 10 ms; 0 turns it off) */
  readonly sampleGather?: Duration.Input | undefined
  readonly sampleGatherQuiet?: Duration.Input | undefined
  /**
   * the folder the backend saves checkpoints under; it holds the index of the checkpoints
   * saved through this server (`CheckpointIndex.ts`), kept across restarts, and the archive
   * route hands out the files of those that lie inside it (without it: an index in memory, no downloads)
   */
  readonly stateDir?: string | undefined
  /** the files of a checkpoint's download archive, from its state file (default: the state file alone); `serve` packs the PEFT adapter */
  readonly archivePack?: ((stateBytes: Uint8Array, entry: CheckpointIndex.Entry) => ReadonlyArray<Tar.TarFile> | string) | undefined
  /** ask clients (in their client config) to zstd-compress protobuf `forward_backward` bodies (default false) */
  readonly compressForwardBackward?: boolean | undefined
  /** how long a checkpoint download URL works (default 15 min) */
  readonly archiveTtl?: Duration.Input | undefined
  /** a simulated service, to time clients against (`serve --clock-cycle`); off by default */
  readonly simulate?: Simulation | undefined
}

/**
 * A real service's timing, simulated: training operations run in clock cycles
 * (`ClockCycle.ts`), and sampling and publishing take time of their own.
 * @since 0.1.0 @category models
 */
export interface Simulation {
  /** training operations run only at cycle boundaries this far apart (0 or absent: at once) */
  readonly cycleMillis?: number | undefined
  /** each `asample` answer waits this long ... */
  readonly sampleMillis?: number | undefined
  /** ... plus this long per token of its longest sequence */
  readonly sampleTokenMillis?: number | undefined
  /** `save_weights_for_sampler` is answered this long after it ran */
  readonly publishMillis?: number | undefined
}

/** Counters for tests and logs. @since 0.1.0 @category models */
export interface Stats {
  /** HTTP requests answered */
  readonly requests: number
  /** submissions that started work */
  readonly submissions: number
  /** submissions answered from the idempotency cache */
  readonly deduplicated: number
  /** futures whose work has not finished */
  readonly pending: number
  /** futures kept (running, or finished within the ttl) */
  readonly futures: number
  readonly sessions: number
  readonly models: number
  /** bytes the factory-built models hold */
  readonly memoryUsed: number
  /** operations run on the backend, by request type */
  readonly executed: Record<string, number>
  /** samples served by each replica of the base sampler */
  readonly replicaRequests: Array<number>
}

/** A running server. @since 0.1.0 @category models */
export interface Handle {
  readonly url: string
  readonly port: number
  readonly stats: Stats
  /** the base sampler's replica an affinity key is routed to */
  readonly route: (affinityKey: string) => number
  /** expires idle sessions now (it also runs on a timer) */
  readonly expireSessions: Effect.Effect<ReadonlyArray<string>>
}

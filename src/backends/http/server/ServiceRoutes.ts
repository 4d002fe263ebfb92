/**
 * The endpoints a Tinker client calls about itself rather than about a model:
 *
 * - `client/config`: the feature flags a client reads once at start (the official SDK's
 *   `ClientConfigResponse`, in its `types/client_config_response.py`). This server says
 *   what it does: protobuf `forward_backward` bodies, zstd-compressed when
 *   `compressForwardBackward` is on (`proto_write_fwdbwd` and `fwd_via_fwdbwd` tell
 *   clients that choose by them, SDK 0.24 and gyre's own); one `forward_backward` at a time per model, so the
 *   SDK's parallel chunk submission is off; the chunk size is the server's datum limit;
 *   no JWT exchange and no alternative transport.
 * - `client/dynamic_config`: the flags a live client re-reads (`refresh_interval_sec`).
 * - `telemetry`: the SDK's telemetry batches. They are accepted and counted (a debug log
 *   line per batch): without the route the SDK retries each batch every second and waits
 *   up to 30 s for them to drain before it raises an error to its caller.
 *
 * @since 0.1.0
 */
import { Effect, Schema } from "effect"
import { decodeOr400 } from "./Requests.ts"
import type { Handler } from "./TrainingRoutes.ts"

/** @since 0.1.0 @category models */
export interface Options {
  /** the most datums in one forward(_backward) */
  readonly maxDatums: number
  /** whether clients should zstd-compress their protobuf `forward_backward` bodies */
  readonly compressForwardBackward: boolean
}

const TelemetryBatch = Schema.Struct({ events: Schema.Array(Schema.Unknown) })

/** The three endpoints, by route name. @since 0.1.0 @category constructors */
export const make = (options: Options): Record<string, Handler> => {
  let telemetryEvents = 0
  return {
    "client/config": () =>
      Effect.succeed({
        pjwt_auth_enabled: false,
        credential_default_source: "api_key",
        parallel_fwdbwd_chunks: false,
        proto_compress_fwdbwd: options.compressForwardBackward,
        // the flags by which SDK 0.24 (and gyre's client) chose protobuf; 0.25 always sends it
        proto_write_fwdbwd: true,
        fwd_via_fwdbwd: true,
        fwdbwd_max_chunk_len: options.maxDatums,
        use_pyqwest_transport: false,
        create_model_via_load_weights: false,
        // newer SDKs: a sampling session's completions come from one retrieve_futures poll (SessionFutures.ts)
        sample_use_retrieve_futures: true,
      }),
    // newer SDKs: cancel_future is not served (NewerFields.ts)
    "client/dynamic_config": () => Effect.succeed({ refresh_interval_sec: 300, sample_cancel_enabled: false }),
    telemetry: (body) =>
      Effect.gen(function* () {
        const batch = yield* decodeOr400(TelemetryBatch)(body)
        telemetryEvents += batch.events.length
        yield* Effect.logDebug(`telemetry: ${batch.events.length} events (${telemetryEvents} in all)`)
        return { status: "accepted" }
      }),
  }
}

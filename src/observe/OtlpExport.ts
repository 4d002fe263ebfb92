/**
 * `--otlp <url>`: the run's telemetry to an OpenTelemetry collector over OTLP/HTTP (JSON):
 * the spans of every phase (each an `Effect.fn`: `Runner.open`, `Collect.collect`,
 * `Train.submitOptimize`, ...), each with the step it works for and its phase as the
 * attributes `gyre.step` and `gyre.phase`; the logs (kept on the console too); and each
 * metrics row as gauge points named by their key, with the step as an attribute, each point
 * sent once. Spans and logs go through Effect's own exporters (`effect/observability`),
 * the metrics through `MetricPoints`. Sent every second, and flushed when the run ends; a
 * collector that cannot be reached does not stop the run.
 *
 * @since 0.1.0
 */
import { Effect, Layer, Option } from "effect"
import { OtlpLogger, OtlpSerialization } from "effect/observability"
import * as HttpClient from "../platform/HttpClient.ts"
import * as OtlpSpans from "../platform/OtlpSpans.ts"
import type { RunObserverShape } from "../run/Observer.ts"
import { MetricPoints } from "./MetricPoints.ts"
import { withRunAttributes } from "./SpanAttributes.ts"

/**
 * The exporters, as a layer for the run (`url`: the collector's base, e.g.
 * `http://127.0.0.1:4318`, below which `/v1/traces`, `/v1/metrics` and `/v1/logs` are
 * posted). `OtlpExporter.Flusher`'s `flush` sends all three at once.
 * @since 0.1.0 @category layers
 */
export const layer = (url: string) =>
  Layer.mergeAll(
    OtlpSpans.tracer(url, withRunAttributes),
    OtlpLogger.layer({ url: `${OtlpSpans.baseOf(url)}/v1/logs`, resource: OtlpSpans.RESOURCE, mergeWithExisting: true, exportInterval: OtlpSpans.INTERVAL }),
    MetricPoints.layer({ url: `${OtlpSpans.baseOf(url)}/v1/metrics`, interval: OtlpSpans.INTERVAL }),
  ).pipe(Layer.provide(OtlpSerialization.layerJson), Layer.provide(HttpClient.layer))

/**
 * Each metrics row as points for `MetricPoints` to send, when the run has `layer`'s
 * exporters (nothing otherwise).
 * @since 0.1.0 @category constructors
 */
export const observer: RunObserverShape = {
  onMetrics: (row) =>
    Effect.flatMap(Effect.serviceOption(MetricPoints), Option.match({ onNone: () => Effect.void, onSome: (points) => points.record(row) })),
}

/**
 * `--otlp <url>`: the run's telemetry to an OpenTelemetry collector over OTLP/HTTP (JSON),
 * with Effect's own exporter (`effect/observability`'s `Otlp.layer`): the spans of every
 * phase (each an `Effect.fn`: `Runner.open`, `Collect.collect`, `Train.submitOptimize`, ...),
 * the logs (kept on the console too), and each metrics row as gauges named by their key,
 * with the step as an attribute. Sent every second, and flushed when the run ends.
 *
 * @since 0.1.0
 */
import { Effect, Layer, Metric } from "effect"
import { Otlp, OtlpSerialization } from "effect/observability"
import * as HttpClient from "../platform/HttpClient.ts"
import type { RunObserverShape } from "../run/Observer.ts"

/**
 * The exporters, as a layer for the run (`url`: the collector's base, e.g.
 * `http://127.0.0.1:4318`, below which `/v1/traces`, `/v1/metrics` and `/v1/logs` are posted).
 * @since 0.1.0 @category layers
 */
export const layer = (url: string) =>
  Otlp.layer({
    baseUrl: url.replace(/\/+$/, ""),
    resource: { serviceName: "gyre" },
    loggerMergeWithExisting: true,
    tracerExportInterval: "1 second",
    metricsExportInterval: "1 second",
    loggerExportInterval: "1 second",
  }).pipe(Layer.provide(OtlpSerialization.layerJson), Layer.provide(HttpClient.layer))

/** Each metrics row as gauges (the step an attribute), which the metrics exporter sends. @since 0.1.0 @category constructors */
export const observer: RunObserverShape = {
  onMetrics: ({ step, ...row }) =>
    Effect.forEach(
      Object.entries(row).filter(([, v]) => Number.isFinite(v)),
      ([key, value]) => Metric.update(Metric.gauge(key).pipe(Metric.withAttributes({ step: String(step) })), value),
      { discard: true },
    ),
}

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
import { Effect, Layer, Option, Tracer } from "effect"
import { OtlpExporter, OtlpLogger, OtlpSerialization, OtlpTracer } from "effect/observability"
import * as HttpClient from "../platform/HttpClient.ts"
import type { RunObserverShape } from "../run/Observer.ts"
import { MetricPoints } from "./MetricPoints.ts"
import { withRunAttributes } from "./SpanAttributes.ts"

/** How often the spans, logs and metrics are sent. */
const INTERVAL = "1 second"

const RESOURCE = { serviceName: "gyre" }
const baseOf = (url: string) => url.replace(/\/+$/, "")

/** The span exporter (a `Tracer`) and its `Flusher`. */
const spans = (url: string) =>
  Layer.effect(
    Tracer.Tracer,
    Effect.map(OtlpTracer.make({ url: `${baseOf(url)}/v1/traces`, resource: RESOURCE, exportInterval: INTERVAL }), withRunAttributes),
  ).pipe(Layer.provideMerge(OtlpExporter.layerFlusher))

/**
 * The exporters, as a layer for the run (`url`: the collector's base, e.g.
 * `http://127.0.0.1:4318`, below which `/v1/traces`, `/v1/metrics` and `/v1/logs` are
 * posted). `OtlpExporter.Flusher`'s `flush` sends all three at once.
 * @since 0.1.0 @category layers
 */
export const layer = (url: string) =>
  Layer.mergeAll(
    spans(url),
    OtlpLogger.layer({ url: `${baseOf(url)}/v1/logs`, resource: RESOURCE, mergeWithExisting: true, exportInterval: INTERVAL }),
    MetricPoints.layer({ url: `${baseOf(url)}/v1/metrics`, interval: INTERVAL }),
  ).pipe(Layer.provide(OtlpSerialization.layerJson), Layer.provide(HttpClient.layer))

/**
 * The span exporter alone, for an episode worker thread (`run/workers/Thread.ts`): its
 * spans go to the collector on their own, under the main thread's span that sent the
 * group; its logs go through the main thread's logger, and it records no metrics.
 * @since 0.1.0 @category layers
 */
export const spanLayer = (url: string) => spans(url).pipe(Layer.provide(OtlpSerialization.layerJson), Layer.provide(HttpClient.layer))

/**
 * Each metrics row as points for `MetricPoints` to send, when the run has `layer`'s
 * exporters (nothing otherwise).
 * @since 0.1.0 @category constructors
 */
export const observer: RunObserverShape = {
  onMetrics: (row) =>
    Effect.flatMap(Effect.serviceOption(MetricPoints), Option.match({ onNone: () => Effect.void, onSome: (points) => points.record(row) })),
}

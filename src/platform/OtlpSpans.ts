/**
 * Spans to an OpenTelemetry collector over OTLP/HTTP (JSON), through Effect's own exporter
 * (`effect/observability`): a `Tracer` and the `Flusher` that sends what is pending. The
 * run's exporters (`observe/OtlpExport.ts`) and an episode worker thread's
 * (`run/workers/Thread.ts`) both use it.
 *
 * @since 0.1.0
 */
import { Effect, Layer, Tracer } from "effect"
import { OtlpExporter, OtlpSerialization, OtlpTracer } from "effect/observability"
import * as HttpClient from "./HttpClient.ts"

/** How often spans (and the run's logs and metrics) are sent. @since 0.1.0 @category constants */
export const INTERVAL = "1 second"

/** What the collector is told sent them. @since 0.1.0 @category constants */
export const RESOURCE = { serviceName: "gyre" }

/** A collector URL without its trailing slashes, below which `/v1/...` are posted. @since 0.1.0 @category utils */
export const baseOf = (url: string): string => url.replace(/\/+$/, "")

/**
 * The span exporter to the collector at `url` (its base), with its `Flusher`; `wrap`
 * changes the tracer (e.g. to add attributes). Needs an OTLP serialization and an `HttpClient`.
 * @since 0.1.0 @category layers
 */
export const tracer = (url: string, wrap: (tracer: Tracer.Tracer) => Tracer.Tracer = (t) => t) =>
  Layer.effect(Tracer.Tracer, Effect.map(OtlpTracer.make({ url: `${baseOf(url)}/v1/traces`, resource: RESOURCE, exportInterval: INTERVAL }), wrap)).pipe(
    Layer.provideMerge(OtlpExporter.layerFlusher),
  )

/**
 * The span exporter alone, JSON over gyre's HTTP client: what an episode worker thread
 * sends its own spans with (its logs go through the main thread's logger).
 * @since 0.1.0 @category layers
 */
export const layer = (url: string) => tracer(url).pipe(Layer.provide(OtlpSerialization.layerJson), Layer.provide(HttpClient.layer))

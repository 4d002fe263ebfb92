/**
 * The run's metrics rows as OTLP gauge points (`--otlp`), each point sent once: an export
 * posts the points recorded since the last export that arrived, and the points of one the
 * collector refused (or never answered) stay for the next. Effect's own metrics exporter
 * sends every series it has seen in every export; with the step as an attribute each row
 * is a new series, so its exports grew with the run (13 KB to 319 KB over 60 steps).
 *
 * @since 0.1.0
 */
import { Cause, Clock, Context, Duration, Effect, Exit, Fiber, Layer, Scope, Semaphore } from "effect"
import { HttpClient, HttpClientRequest } from "effect/http"
import { OtlpExporter, type OtlpMetrics, OtlpResource, OtlpSerialization } from "effect/observability"
import type { MetricRecord } from "../metrics/Metrics.ts"

/** One value of one metrics row. */
interface Point {
  readonly key: string
  readonly step: number
  readonly value: number
  readonly timeUnixNano: string
}

/** Points per request: a collector back after an outage gets the backlog in bounded requests. */
const BATCH = 5_000

/** Points kept while the collector refuses them (about 2,500 steps of 200 metrics); the oldest go first beyond it. */
const MAX_KEPT = 500_000

/** How long one request may wait for the collector's answer before its points are kept for the next export. */
const REQUEST_TIMEOUT = Duration.seconds(30)

/** How long the run's end waits for the last export. */
const SHUTDOWN_TIMEOUT = Duration.seconds(5)

/** @since 0.1.0 @category models */
export interface MetricPointsShape {
  /** Keeps a metrics row's finite values as points of its step, for the next export. */
  readonly record: (row: MetricRecord & { readonly step: number }) => Effect.Effect<void>
  /** Posts every point not sent yet; a refused request keeps its points for the next export. Never fails. */
  readonly export: Effect.Effect<void>
}

/** The exporter of the run's metrics points. @since 0.1.0 @category services */
export class MetricPoints extends Context.Service<MetricPoints, MetricPointsShape>()("gyre/observe/MetricPoints") {
  /**
   * Exports to `url` (the collector's `/v1/metrics`) every `interval`, when the
   * `OtlpExporter.Flusher` flushes, and once more as the layer closes.
   * @since 0.1.0 @category layers
   */
  static readonly layer = (options: { readonly url: string; readonly interval: Duration.Input }) =>
    Layer.effect(MetricPoints, make(options)).pipe(Layer.provideMerge(OtlpExporter.layerFlusher))
}

/** An OTLP metrics request of `points`, one gauge per key, the step an attribute of each point. */
const metricsData = (resource: OtlpResource.Resource, points: ReadonlyArray<Point>): OtlpMetrics.MetricsData => {
  const byKey = new Map<string, Array<Point>>()
  for (const p of points) {
    const same = byKey.get(p.key)
    if (same === undefined) byKey.set(p.key, [p])
    else same.push(p)
  }
  return {
    resourceMetrics: [{
      resource,
      scopeMetrics: [{
        scope: { name: "gyre" },
        metrics: [...byKey].map(([name, ps]) => ({
          name,
          description: "",
          unit: "1",
          gauge: {
            dataPoints: ps.map((p) => ({
              attributes: [{ key: "step", value: { intValue: p.step } }],
              startTimeUnixNano: p.timeUnixNano,
              timeUnixNano: p.timeUnixNano,
              asDouble: p.value,
            })),
          },
        })),
      }],
    }],
  }
}

/** What went wrong, for a warning. */
const messageOf = (cause: Cause.Cause<unknown>) => {
  const error = Cause.squash(cause)
  return error instanceof Error ? error.message : String(error)
}

const make = Effect.fnUntraced(function* (options: { readonly url: string; readonly interval: Duration.Input }) {
  const client = (yield* HttpClient.HttpClient).pipe(HttpClient.filterStatusOk)
  const serialization = yield* OtlpSerialization.OtlpSerialization
  const resource = yield* OtlpResource.fromConfig({ serviceName: "gyre" })
  const clock = yield* Clock.Clock
  const scope = yield* Scope.Scope
  const lock = yield* Semaphore.make(1)
  let pending: Array<Point> = []
  let failing = false

  const keep = (points: ReadonlyArray<Point>) =>
    Effect.suspend(() => {
      pending = [...points, ...pending]
      const over = pending.length - MAX_KEPT
      if (over <= 0) return Effect.void
      pending = pending.slice(over)
      return Effect.logWarning(`--otlp: the collector at ${options.url} has refused metrics for a while: dropped the ${over} oldest unsent points (at most ${MAX_KEPT} are kept)`)
    })

  /** One request of the oldest unsent points; false when nothing was sent. */
  const sendBatch = Effect.suspend(() => {
    const points = pending.splice(0, BATCH)
    if (points.length === 0) return Effect.succeed(false)
    const request = HttpClientRequest.post(options.url).pipe(HttpClientRequest.setBody(serialization.metrics(metricsData(resource, points))))
    return client.execute(request).pipe(
      Effect.flatMap((response) => Effect.ignore(response.arrayBuffer)),
      Effect.timeout(REQUEST_TIMEOUT),
      Effect.onExit((exit) => (Exit.isSuccess(exit) ? Effect.void : keep(points))),
      Effect.as(true),
    )
  })

  /** Sends batch after batch until none is left or one fails. */
  const drain: Effect.Effect<void, unknown> = Effect.flatMap(sendBatch, (sent) => (sent ? drain : Effect.void))
  const sendAll = drain.pipe(
    Effect.andThen(Effect.suspend(() => (failing ? Effect.logInfo(`--otlp: metrics reach ${options.url} again`) : Effect.void))),
    Effect.andThen(Effect.sync(() => void (failing = false))),
    // warned once per outage; the points wait for the next export
    Effect.catchCause((cause) =>
      failing ? Effect.void : Effect.sync(() => void (failing = true)).pipe(
        Effect.andThen(
          Effect.logWarning(
            `--otlp: cannot export metrics to ${options.url}: ${messageOf(cause)}. ${pending.length} points are kept and sent again at the next export; check that an OTLP/HTTP collector listens at the URL given to --otlp`,
          ),
        ),
      )
    ),
    // the exporter's own requests are not part of the run's trace
    Effect.withTracerEnabled(false),
  )
  const exportNow = lock.withPermits(1)(sendAll)

  const flusher = yield* OtlpExporter.Flusher
  yield* flusher.register(exportNow)
  const loop = yield* Effect.sleep(options.interval).pipe(Effect.andThen(exportNow), Effect.forever, Effect.forkIn(scope))
  // at the end (before the fork's own interruption): once no export is in flight, stop the timer and send what is left
  yield* Scope.addFinalizer(scope, lock.withPermits(1)(Fiber.interrupt(loop).pipe(Effect.andThen(sendAll))).pipe(Effect.timeoutOption(SHUTDOWN_TIMEOUT), Effect.asVoid))

  return MetricPoints.of({
    record: ({ step, ...row }) =>
      Effect.sync(() => {
        const timeUnixNano = String(clock.currentTimeNanosUnsafe())
        for (const [key, value] of Object.entries(row)) if (Number.isFinite(value)) pending.push({ key, step, value, timeUnixNano })
      }),
    export: exportNow,
  })
})

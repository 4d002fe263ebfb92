/**
 * Test double of an OpenTelemetry collector: an OTLP/HTTP (JSON) receiver on loopback that
 * keeps each request's path and decoded body, and can refuse the first few metrics exports
 * with a 503 (a collector that is briefly down). Plus readers of what it kept: the spans
 * and the gauge points, as a collector would decode them.
 */
import { Effect } from "effect"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"

/** One request the receiver answered: its path, its JSON body, and whether it was refused. */
export interface Received {
  readonly path: string
  readonly body: any
  readonly refused: boolean
}

/**
 * A receiver for the test's scope. `refuseMetrics`: how many of the first `/v1/metrics`
 * posts are answered 503 (kept in `got`, marked `refused`).
 */
export const receiver = (options: { readonly refuseMetrics?: number } = {}) =>
  Effect.acquireRelease(
    Effect.callback<{ readonly url: string; readonly got: Array<Received>; readonly server: Http.Server }>((resume) => {
      const got: Array<Received> = []
      let toRefuse = options.refuseMetrics ?? 0
      const server = Http.createServer((req, res) => {
        let text = ""
        req.on("data", (c) => (text += c))
        req.on("end", () => {
          const path = req.url ?? ""
          const refused = path === "/v1/metrics" && toRefuse-- > 0
          got.push({ path, body: JSON.parse(text), refused })
          res.writeHead(refused ? 503 : 200, { "content-type": "application/json" }).end(refused ? '{"error":"down"}' : "{}")
        })
      })
      server.listen(0, "127.0.0.1", () => resume(Effect.succeed({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, got, server })))
    }),
    ({ server }) => Effect.callback<void>((resume) => void server.close(() => resume(Effect.void))),
  )

/** An OTLP attribute value as a plain value. */
const valueOf = (v: any): unknown =>
  v === undefined ? undefined : "intValue" in v ? Number(v.intValue) : "doubleValue" in v ? v.doubleValue : "stringValue" in v ? v.stringValue : "boolValue" in v ? v.boolValue : v

/** An OTLP attribute list as a record. */
export const attributesOf = (list: ReadonlyArray<any> | undefined): Record<string, unknown> =>
  Object.fromEntries((list ?? []).map((a: any) => [a.key, valueOf(a.value)]))

/** A span as a collector decodes it: name, ids and attributes. */
export interface ReceivedSpan {
  readonly name: string
  readonly spanId: string
  readonly parentSpanId: string | undefined
  readonly attributes: Record<string, unknown>
}

/** Every span received. */
export const spansOf = (got: ReadonlyArray<Received>): Array<ReceivedSpan> =>
  got.filter((g) => g.path === "/v1/traces" && !g.refused).flatMap((g) =>
    g.body.resourceSpans.flatMap((r: any) =>
      r.scopeSpans.flatMap((s: any) =>
        s.spans.map((x: any) => ({ name: x.name, spanId: x.spanId, parentSpanId: x.parentSpanId || undefined, attributes: attributesOf(x.attributes) }))
      )
    )
  )

/** A gauge point as a collector decodes it: its metric's name, the step attribute and the value. */
export interface ReceivedPoint {
  readonly name: string
  readonly step: unknown
  readonly value: number
}

/** The gauge points of each metrics export the receiver accepted, export by export. */
export const metricExports = (got: ReadonlyArray<Received>): Array<Array<ReceivedPoint>> =>
  got.filter((g) => g.path === "/v1/metrics" && !g.refused).map((g) =>
    g.body.resourceMetrics.flatMap((r: any) =>
      r.scopeMetrics.flatMap((s: any) =>
        s.metrics.flatMap((m: any) =>
          (m.gauge?.dataPoints ?? []).map((p: any) => ({ name: m.name, step: attributesOf(p.attributes)["step"], value: p.asDouble ?? Number(p.asInt) }))
        )
      )
    )
  )

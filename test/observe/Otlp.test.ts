/**
 * `--otlp`: a run's telemetry as an OTLP/HTTP collector receives it. A receiver on
 * loopback (written here: it keeps each request's path and JSON body) decodes what
 * arrives: a span for every phase of the run, the run's metrics as gauges, and its logs.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Fs from "node:fs"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import * as Os from "node:os"
import * as Path from "node:path"
import { train } from "../../src/app/Training.ts"

/** An OTLP/HTTP JSON receiver: every request's path and body. */
const receiver = () =>
  Effect.acquireRelease(
    Effect.callback<{ readonly url: string; readonly got: Array<{ readonly path: string; readonly body: any }>; readonly server: Http.Server }>((resume) => {
      const got: Array<{ path: string; body: any }> = []
      const server = Http.createServer((req, res) => {
        let text = ""
        req.on("data", (c) => (text += c))
        req.on("end", () => {
          got.push({ path: req.url ?? "", body: JSON.parse(text) })
          res.writeHead(200, { "content-type": "application/json" }).end("{}")
        })
      })
      server.listen(0, "127.0.0.1", () => resume(Effect.succeed({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, got, server })))
    }),
    ({ server }) => Effect.callback<void>((resume) => void server.close(() => resume(Effect.void))),
  )

const spanNames = (got: ReadonlyArray<{ readonly path: string; readonly body: any }>) =>
  new Set(got.filter((g) => g.path === "/v1/traces").flatMap((g) => g.body.resourceSpans.flatMap((r: any) => r.scopeSpans.flatMap((s: any) => s.spans.map((x: any) => x.name)))))
const metricNames = (got: ReadonlyArray<{ readonly path: string; readonly body: any }>) =>
  new Set(got.filter((g) => g.path === "/v1/metrics").flatMap((g) => g.body.resourceMetrics.flatMap((r: any) => r.scopeMetrics.flatMap((s: any) => s.metrics.map((m: any) => m.name)))))

describe("--otlp", () => {
  it.live("a collector receives every phase's span, the run's metrics and its logs", () =>
    Effect.gen(function* () {
      const { url, got } = yield* receiver()
      yield* train({ env: "math", steps: 2, groups: 2, groupSize: 2, evalEvery: 2, evalSize: 5, saveEvery: 0, otlp: url, out: Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-otlp-")) })
      const spans = spanNames(got)
      for (const phase of ["Runner.run", "Runner.open", "Runner.evaluateBase", "Steps.runSteps", "Steps.startStep", "Collect.collect", "Steps.submitTraining", "Train.submitOptimize", "Steps.completeStep", "Evaluate.evaluate", "Steps.logStep", "Steps.checkpoint"]) {
        assert.isTrue(spans.has(phase), `span ${phase} (got ${[...spans].join(", ")})`)
      }
      const metrics = metricNames(got)
      for (const key of ["env/all/reward/total", "train/loss", "test/env/all/correct"]) assert.isTrue(metrics.has(key), `metric ${key}`)
      assert.isTrue(got.some((g) => g.path === "/v1/logs"), "logs arrive")
    }).pipe(Effect.scoped), 120_000)
})

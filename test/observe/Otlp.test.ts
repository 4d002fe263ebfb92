/**
 * `--otlp`: a run's telemetry as an OTLP/HTTP collector receives it. A receiver on
 * loopback (the test double in `OtlpReceiver.ts`) decodes what arrives: a span for every
 * phase of the run, each carrying the step it works for and its phase, the run's metrics as
 * gauge points, each sent once, and its logs.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Logger } from "effect"
import { OtlpExporter } from "effect/observability"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { train } from "../../src/app/Training.ts"
import * as OtlpExport from "../../src/observe/OtlpExport.ts"
import { PHASES } from "../../src/run/RunSpans.ts"
import { metricExports, type ReceivedPoint, type ReceivedSpan, receiver, spansOf } from "./OtlpReceiver.ts"

const outDir = () => Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-otlp-"))

const metricNames = (exports: ReadonlyArray<ReadonlyArray<ReceivedPoint>>) => new Set(exports.flat().map((p) => p.name))

/** How many times each (metric, step) point arrived, keyed `name@step`. */
const arrivals = (exports: ReadonlyArray<ReadonlyArray<ReceivedPoint>>) => {
  const counts = new Map<string, number>()
  for (const p of exports.flat()) counts.set(`${p.name}@${Number(p.step)}`, (counts.get(`${p.name}@${Number(p.step)}`) ?? 0) + 1)
  return counts
}

/** Records metrics rows through the `--otlp` observer, flushing the exporters after each (as the 1-second timer would). */
const recordAndFlush = (rows: ReadonlyArray<{ readonly step: number; readonly [key: string]: number }>) =>
  Effect.gen(function* () {
    const flusher = yield* OtlpExporter.Flusher
    for (const row of rows) {
      yield* OtlpExport.observer.onMetrics(row)
      yield* flusher.flush
    }
  })

/** The spans by id, and the spans above one, nearest first. */
const byId = (spans: ReadonlyArray<ReceivedSpan>) => new Map(spans.map((s) => [s.spanId, s]))
const ancestors = (spans: Map<string, ReceivedSpan>, span: ReceivedSpan): Array<ReceivedSpan> => {
  const up: Array<ReceivedSpan> = []
  for (let p = span.parentSpanId; p !== undefined && spans.has(p); p = spans.get(p)!.parentSpanId) up.push(spans.get(p)!)
  return up
}

describe("--otlp", () => {
  it.live("a collector receives every phase's span, the run's metrics and its logs", () =>
    Effect.gen(function* () {
      const { url, got } = yield* receiver()
      yield* train({ env: "math", steps: 2, groups: 2, groupSize: 2, evalEvery: 2, evalSize: 5, saveEvery: 0, otlp: url, out: outDir() })
      const spans = new Set(spansOf(got).map((s) => s.name))
      for (const phase of ["Runner.run", "Runner.open", "Runner.evaluateBase", "Steps.runSteps", "Steps.startStep", "Collect.collect", "Steps.submitTraining", "Train.submitOptimize", "Steps.completeStep", "Evaluate.evaluate", "Steps.logStep", "Steps.checkpoint"]) {
        assert.isTrue(spans.has(phase), `span ${phase} (got ${[...spans].join(", ")})`)
      }
      const metrics = metricNames(metricExports(got))
      for (const key of ["env/all/reward/total", "train/loss", "test/env/all/correct"]) assert.isTrue(metrics.has(key), `metric ${key}`)
      for (const [point, n] of arrivals(metricExports(got))) assert.strictEqual(n, 1, `${point} arrived ${n} times`)
      assert.isTrue(got.some((g) => g.path === "/v1/logs"), "logs arrive")
    }).pipe(Effect.scoped))

  it.live("each metrics point is exported once: an export holds only the points recorded since the last one", () =>
    Effect.gen(function* () {
      const { url, got } = yield* receiver()
      yield* recordAndFlush([{ step: 1, "train/loss": 0.5, "env/all/reward/total": 0.25 }, { step: 2, "train/loss": 0.4, "env/all/reward/total": 0.5 }, { step: 3, "train/loss": 0.3, "env/all/reward/total": Number.NaN }]).pipe(
        Effect.provide(OtlpExport.layer(url)),
      )
      const exports = metricExports(got).filter((e) => e.length > 0)
      assert.deepStrictEqual([...arrivals(exports)].sort(), [["env/all/reward/total@1", 1], ["env/all/reward/total@2", 1], ["train/loss@1", 1], ["train/loss@2", 1], ["train/loss@3", 1]])
      // whatever the export timer did in between, no export repeats a point an earlier one sent
      const second = exports.findIndex((e) => e.some((p) => Number(p.step) === 2))
      assert.isAbove(second, 0)
      assert.isFalse(exports[second]!.some((p) => Number(p.step) === 1), "the export of step 2 repeats step 1")
      assert.strictEqual(exports[second]!.find((p) => p.name === "train/loss" && Number(p.step) === 2)?.value, 0.4)
    }).pipe(Effect.scoped))

  it.live("points of an export the collector refused are kept and sent with the next one, with one warning", () =>
    Effect.gen(function* () {
      const { url, got } = yield* receiver({ refuseMetrics: 1 })
      const warnings: Array<string> = []
      const capture = Logger.layer([Logger.make(({ logLevel, message }) => logLevel === "Warn" && warnings.push(String(Array.isArray(message) ? message.join(" ") : message)))])
      yield* recordAndFlush([{ step: 1, "train/loss": 0.5 }, { step: 2, "train/loss": 0.4 }]).pipe(Effect.provide(OtlpExport.layer(url)), Effect.provide(capture))
      assert.isTrue(got.some((g) => g.path === "/v1/metrics" && g.refused), "the first export was refused")
      assert.deepStrictEqual([...arrivals(metricExports(got))].sort(), [["train/loss@1", 1], ["train/loss@2", 1]])
      const refused = warnings.filter((w) => w.includes("cannot export metrics"))
      assert.strictEqual(refused.length, 1, warnings.join("\n"))
      assert.include(refused[0], `${url}/v1/metrics`)
      assert.include(refused[0], "--otlp")
    }).pipe(Effect.scoped))

  it.live("a collector that cannot be reached stops nothing: recording, flushing and the end go on", () =>
    Effect.gen(function* () {
      const closed = yield* receiver()
      const url = closed.url
      yield* Effect.callback<void>((resume) => void closed.server.close(() => resume(Effect.void)))
      yield* recordAndFlush([{ step: 1, "train/loss": 0.5 }, { step: 2, "train/loss": 0.4 }]).pipe(Effect.provide(OtlpExport.layer(url)))
    }).pipe(Effect.scoped))

  it.live("every span of a step carries the step (gyre.step) and every span in a phase its phase (gyre.phase), sampled ahead (async) too", () =>
    Effect.gen(function* () {
      const { url, got } = yield* receiver()
      const steps = 3
      yield* train({ env: "math", steps, groups: 2, groupSize: 2, evalEvery: 3, evalSize: 4, saveEvery: 0, async: true, otlp: url, out: outDir() })
      const spans = spansOf(got)
      const ids = byId(spans)
      const step = (s: ReceivedSpan) => s.attributes["gyre.step"]
      const phase = (s: ReceivedSpan) => s.attributes["gyre.phase"]
      // the base evaluation is step 0; each step's own phases carry its step, sampled ahead or not
      assert.deepStrictEqual(spans.filter((s) => s.name === "Runner.evaluateBase").map(step), [0])
      for (const name of ["Collect.collect", "Steps.startStep", "Steps.completeStep", "Steps.logStep"]) {
        assert.deepStrictEqual(spans.filter((s) => s.name === name).map(step).sort(), [1, 2, 3], name)
      }
      // (a step whose groups all score alike has nothing to train)
      for (const s of spans.filter((s) => s.name === "Train.submitOptimize")) assert.include([1, 2, 3], step(s))
      const expected: Record<string, string> = {
        "Runner.open": "open",
        "Runner.evaluateBase": "evaluate",
        "Collect.collect": "sample",
        "Train.submitOptimize": "train",
        "Evaluate.evaluate": "evaluate",
        "Steps.logStep": "log",
        "Steps.checkpoint": "checkpoint",
      }
      for (const s of spans) {
        if (expected[s.name] !== undefined) assert.strictEqual(phase(s), expected[s.name], s.name)
        const up = ancestors(ids, s)
        // a span inside a step (its children's children too) has the step of that step's span, and a phase
        const stepSpan = [s, ...up].find((a) => a.name === "Steps.startStep" || a.name === "Steps.completeStep" || a.name === "Collect.collect")
        if (stepSpan !== undefined) {
          assert.strictEqual(step(s), step(stepSpan), `${s.name} under ${stepSpan.name}`)
          assert.isString(phase(s), `${s.name} has no phase`)
        }
        // a span that begins no phase of its own is in its parent's
        const parent = s.parentSpanId === undefined ? undefined : ids.get(s.parentSpanId)
        if (PHASES[s.name] === undefined && parent !== undefined) assert.strictEqual(phase(s), phase(parent), `${s.name} under ${parent.name}`)
      }
      const withStep = spans.filter((s) => step(s) !== undefined).length
      assert.isAbove(withStep / spans.length, 0.8, `${withStep} of ${spans.length} spans carry gyre.step`)
    }).pipe(Effect.scoped))
})

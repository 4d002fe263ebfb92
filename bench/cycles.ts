/**
 * How many of a clock-cycle trainer's cycles a training step costs, measured side by
 * side in one run against `serve`'s simulated service (`Server.Options.simulate`, what
 * `serve --clock-cycle` runs):
 *
 *   npx tsx bench/cycles.ts [--cycle-ms N] [--sample-ms N] [--publish-ms N] [--steps N] [--only NAME]
 *
 * A real profile (Tinker: a cycle of about 10 s, sampling seconds per group, a few
 * seconds to publish) is scaled down: by default a cycle of 500 ms, 150 ms per sampling
 * answer, 100 ms to publish. Each run has a fresh `serve --workers` process of its own
 * (gyre's base model, its trainer in a worker thread, as a real service's API answers
 * while its GPUs compute), on the math env (8 groups x 8):
 *
 * - reference: the loop shape of the Tinker docs' pipelined example on a fixed batch:
 *   submit forward_backward, optim_step and save_weights_for_sampler, then await them;
 * - sync, sync with --micro-batch 3, sync with --stream-minibatches 2, async (k = 1) and
 *   async with --max-steps-off-policy 2: `gyre run` through the HTTP client.
 *
 * For each: wall seconds per step, cycles elapsed per step (what the wall clock pays),
 * the cycles in which the model had work per step, and the busy fraction (busy cycles /
 * cycles elapsed while it ran). For the async k = 2 run, its staleness and importance
 * ratio metrics. Prints numbers and ratios; asserts nothing.
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { Effect, Logger, References } from "effect"
import * as Client from "../src/backends/http/client/Client.ts"
import type { ClockReport } from "../src/backends/http/server/ClockCycle.ts"
import { adamParams } from "../src/contract/Contract.ts"
import * as D from "../src/vocabulary/Datum.ts"
import * as Metrics from "../src/metrics/Metrics.ts"
import { Services } from "../src/platform/index.ts"
import { train } from "../src/app/Training.ts"
import { submitter, Trainer } from "../src/services/Trainer.ts"

const args = process.argv.slice(2)
const flag = (name: string, fallback: number) => {
  const i = args.indexOf(`--${name}`)
  return i >= 0 ? Number(args[i + 1]) : fallback
}
const only = args.includes("--only") ? args[args.indexOf("--only") + 1] : undefined
const CYCLE_MS = flag("cycle-ms", 500)
const SAMPLE_MS = flag("sample-ms", 150)
const PUBLISH_MS = flag("publish-ms", 100)
const STEPS = flag("steps", 8)

interface Row {
  readonly name: string
  readonly steps: number
  readonly seconds: number
  readonly elapsed: number
  readonly busy: number
  /** busy cycles outside the steps: a run's first publish and its last checkpoint */
  readonly setup: number
  readonly extra?: string
}

const clockOf = (url: string) => Effect.promise(async () => (await (await fetch(`${url}/api/v1/clock`)).json()) as ClockReport)

/** Runs `work`, returning the cycles that elapsed and the cycles in which the models it created had work. */
const measured = <A, E, R>(url: string, work: Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    const before = yield* clockOf(url)
    const started = performance.now()
    const result = yield* work
    const seconds = (performance.now() - started) / 1000
    const after = yield* clockOf(url)
    const busy = Object.entries(after.models).filter(([id]) => !(id in before.models)).reduce((n, [, m]) => n + m.busy_cycles, 0)
    return { result, seconds, elapsed: after.cycles - before.cycles, busy }
  })

/** The Tinker docs' pipelined loop on one fixed batch: submit all three calls, then await them. */
const reference = (url: string) =>
  Effect.gen(function* () {
    const batch = Array.from({ length: 64 }, (_, i) => D.rl({ prompt: [65, 66, 67 + (i % 20)], completion: [70, 71, 72, 73], samplerLogprobs: [-2, -2, -2, -2], advantage: i % 2 === 0 ? 1 : -1 }))
    const submit = submitter(yield* Trainer)
    for (let step = 0; step < STEPS; step++) {
      const calls = [
        yield* submit.forwardBackward(batch, "importance_sampling"),
        yield* submit.optimStep(adamParams({ learningRate: 1e-4 })),
        yield* submit.saveWeightsForSampler(`ref-${step}`),
      ]
      for (const call of calls) yield* call
    }
  }).pipe(Effect.provide(Client.layer({ baseUrl: url })))

const RUNS: ReadonlyArray<readonly [string, Record<string, unknown>]> = [
  ["sync", {}],
  ["sync, micro-batch 3", { microBatch: 3 }],
  ["sync, streaming 2 minibatches", { streamMinibatches: 2 }],
  ["async k=1", { async: true }],
  ["async k=2", { async: true, maxStepsOffPolicy: 2 }],
]

const meanOf = (rows: ReadonlyArray<Metrics.MetricRecord>, key: string) => Metrics.mean(rows.map((r) => r[key]).filter((v): v is number => v !== undefined)) ?? NaN
const maxOf = (rows: ReadonlyArray<Metrics.MetricRecord>, key: string) => Math.max(...rows.map((r) => r[key] ?? -Infinity))

const gyreRun = (url: string, name: string, options: Record<string, unknown>, out: string) =>
  Effect.gen(function* () {
    const m = yield* measured(url, train({ env: "math", backend: url, steps: STEPS, groups: 8, groupSize: 8, evalEvery: 0, saveEvery: 0, logRolloutsEvery: 0, hackWatchEvery: 0, out, name: name.replaceAll(/[^a-z0-9]+/g, "-"), ...options }))
    const rows = m.result.metrics
    const extra = options["maxStepsOffPolicy"] === 2
      ? `lag mean ${meanOf(rows, "policy_version/lag_mean").toFixed(2)} (max ${maxOf(rows, "policy_version/lag_max")}); importance ratio p99 ${meanOf(rows, "optim/is_ratio/p99").toFixed(3)} (mean over steps), max ${maxOf(rows, "optim/is_ratio/max").toFixed(3)}`
      : undefined
    return { name, steps: STEPS, seconds: m.seconds, elapsed: m.elapsed, busy: m.busy, setup: 2, ...(extra ? { extra } : {}) } satisfies Row
  })

/** A fresh `serve` in its own process (as a user runs it: its trainer's work never blocks this process's client), until the scope closes. */
const serve = Effect.acquireRelease(
  Effect.promise(
    () =>
      new Promise<{ readonly url: string; readonly child: ChildProcess }>((resolve, reject) => {
        const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), "gyre-bench-cycles-state-"))
        // --workers: the trainer computes in its own thread, so the server answers submissions while a cycle runs
        const flags = ["--port", "0", "--workers", "--state-dir", stateDir, "--clock-cycle", `${CYCLE_MS}`, "--sample-latency", `${SAMPLE_MS}`, "--publish-latency", `${PUBLISH_MS}`]
        const child = spawn(process.execPath, ["--import", "tsx", "serve.ts", ...flags], { stdio: ["ignore", "pipe", "pipe"] })
        let seen = ""
        const onData = (chunk: Buffer) => {
          seen += chunk.toString()
          const url = /--backend (http:\/\/[^\s]+)/.exec(seen)?.[1]
          if (url !== undefined) resolve({ url, child })
        }
        child.stdout.on("data", onData)
        child.stderr.on("data", onData)
        child.on("exit", (code) => reject(new Error(`serve exited (${code}) before it was ready:\n${seen}`)))
      }),
  ),
  ({ child }) => Effect.sync(() => child.kill()),
)

const program = Effect.gen(function* () {
  const out = fs.mkdtempSync(path.join(os.tmpdir(), "gyre-bench-cycles-"))
  const rows: Array<Row> = []
  if (only === undefined || only === "reference") {
    const server = yield* serve
    const m = yield* measured(server.url, reference(server.url))
    rows.push({ name: "reference (submit 3, await 3)", steps: STEPS, seconds: m.seconds, elapsed: m.elapsed, busy: m.busy, setup: 0 })
  }
  // each run on a server of its own: `serve --workers` trains one adapter
  for (const [name, options] of RUNS) {
    if (only === undefined || name.startsWith(only)) rows.push(yield* Effect.scoped(Effect.flatMap(serve, (server) => gyreRun(server.url, name, options, out))))
  }
  console.log(`\nclock cycle ${CYCLE_MS} ms, sampling ${SAMPLE_MS} ms per answer, publishing ${PUBLISH_MS} ms; ${STEPS} steps each (math, 8 x 8)\n`)
  console.log("cycles per step: those in which the model had work during the steps (a run's first publish and last checkpoint, one cycle each, left out)")
  console.log("busy fraction: the model's busy cycles / cycles elapsed while the run ran (start-up included)\n")
  console.log("| run | s/step | cycles elapsed/step | cycles per step | busy fraction |")
  console.log("|---|---|---|---|---|")
  for (const r of rows) {
    const perStep = (r.busy - r.setup) / r.steps
    console.log(`| ${r.name} | ${(r.seconds / r.steps).toFixed(2)} | ${(r.elapsed / r.steps).toFixed(2)} | ${perStep.toFixed(2)} | ${(r.busy / Math.max(1, r.elapsed)).toFixed(2)} |`)
  }
  const sync = rows.find((r) => r.name === "sync")
  if (sync !== undefined) for (const r of rows) if (r !== sync) console.log(`${r.name}: ${(sync.seconds / r.seconds).toFixed(2)}x the steps per second of sync`)
  for (const r of rows) if (r.extra !== undefined) console.log(`${r.name}: ${r.extra}`)
})

Effect.runPromise(program.pipe(Effect.scoped, Effect.provide(Services.layer), Effect.provideService(References.MinimumLogLevel, "Warn"), Effect.provide(Logger.layer([Logger.consolePretty()])))).catch((e) => {
  console.error(e)
  process.exit(1)
})

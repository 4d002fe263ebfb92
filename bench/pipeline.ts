/**
 * How much the async runner overlaps sampling and training, measured side by side in
 * one run:
 *
 *   npx tsx bench/pipeline.ts [--steps N] [--warmup N (part b)] [--sample-ms N] [--train-ms N] [--only a|b]
 *
 * (a) The real `Runner.run` on a backend whose calls take fixed, known times: every
 *     sample call sleeps `sample-ms` (the calls of one step run concurrently, as on a
 *     batching sampler) and every forward_backward sleeps `train-ms`. Ideal step times
 *     are max(sample, train) in async mode and sample + train in sync mode.
 * (b) The embedded backend with the default model on the math env: RL steps per second
 *     of sync and async runs in-process, on worker threads (one trainer thread and a
 *     sampler thread), and on worker threads with two trainer threads sharing each
 *     forward_backward (what `run --async` uses on 2 cores), and the CPU they use.
 *
 * Step times are the runner's own `time/total` per step, after the warm-up steps. Add
 * `--single-threaded-gc` after `tsx` to keep V8's GC helper threads off the second core.
 * Prints numbers and ratios; asserts nothing.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { Context, Effect, Layer, Logger, References, Schema, Stream, SubscriptionRef } from "effect"
import mathEnv from "../envs/math.ts"
import * as CharTokenizer from "../src/backends/local/CharTokenizer.ts"
import { Local } from "../src/backends/local/index.ts"
import type { Datum, ForwardOptions, LossFn, ModelInput, SampleOptions, SamplingParams } from "../src/contract/Contract.ts"
import { modelInputTokens } from "../src/contract/Contract.ts"
import * as Env from "../src/vocabulary/Env.ts"
import * as Reward from "../src/vocabulary/Reward.ts"
import * as Runner from "../src/Runner.ts"
import { Sampler } from "../src/services/Sampler.ts"
import { Tokenizer } from "../src/services/Tokenizer.ts"
import { Trainer } from "../src/services/Trainer.ts"

const args = process.argv.slice(2)
const flag = (name: string, fallback: number) => {
  const i = args.indexOf(`--${name}`)
  return i >= 0 ? Number(args[i + 1]) : fallback
}
const only = args.includes("--only") ? args[args.indexOf("--only") + 1] : undefined
const STEPS = flag("steps", 60)
/** fresh worker threads need a few seconds of work before V8 has optimised the engine code */
const WARMUP = flag("warmup", 25)
const SAMPLE_MS = flag("sample-ms", 300)
const TRAIN_MS = flag("train-ms", 200)

const median = (xs: ReadonlyArray<number>) => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.floor(s.length / 2)]!
}
const sum = (xs: ReadonlyArray<number>) => xs.reduce((a, b) => a + b, 0)
const cpuSeconds = () => {
  const u = process.cpuUsage()
  return (u.user + u.system) / 1e6
}
const tmpDir = (name: string) => fs.mkdtempSync(path.join(os.tmpdir(), `gyre-bench-pipeline-${name}-`))
const quiet = Effect.provideService(Runner.Progress, { onStep: () => Effect.void, onPhase: () => Effect.void })

/** Step times (s) of the steps after the warm-up. */
const stepTimes = (rows: ReadonlyArray<Record<string, number>>, warmup = WARMUP) => rows.slice(warmup).map((r) => r["time/total"]!)

// ---------------------------------------------------------------------------------
// (a) a backend with fixed call times

/**
 * A test double of the three services: sampling sleeps `sampleMs` per call and
 * returns random letters; forward_backward sleeps `trainMs`; publishing bumps the
 * version the sampler serves, and `minPolicyVersion` waits for it.
 */
const fixedTimeBackend = (sampleMs: number, trainMs: number) =>
  Layer.effectContext(
    Effect.gen(function* () {
      const published = yield* SubscriptionRef.make(0)
      let version = 0
      let seed = 1
      const random = () => {
        seed = (seed * 1103515245 + 12345) % 2147483648
        return seed / 2147483648
      }
      const trainer = Trainer.of({
        forwardBackward: (data: ReadonlyArray<Datum>, _lossFn: LossFn, _options?: ForwardOptions) =>
          Effect.sleep(`${trainMs} millis`).pipe(
            Effect.as({
              lossFnOutputs: data.map((d) => ({ logprobs: modelInputTokens(d.modelInput).map(() => -Math.log(26)) })),
              metrics: { loss: 0, "loss:sum": 0, active_tokens: 0 },
            }),
          ),
        forward: (data: ReadonlyArray<Datum>) =>
          Effect.succeed({ lossFnOutputs: data.map((d) => ({ logprobs: modelInputTokens(d.modelInput).map(() => -Math.log(26)) })), metrics: { loss: 0 } }),
        optimStep: () => Effect.sync(() => ({ version: ++version, metrics: {} })),
        saveWeightsForSampler: (name: string) =>
          SubscriptionRef.set(published, version).pipe(Effect.as({ version, path: `fixed://${name}` })),
        saveState: (name: string) => Effect.succeed({ path: `fixed://${name}` }),
        loadState: () => Effect.void,
        info: Effect.sync(() => ({ modelName: "fixed-time", loraRank: 0, version, maxSequenceLength: 1024 })),
      })
      const sampler = Sampler.of({
        sample: (_prompt: ModelInput, params: SamplingParams, options: SampleOptions) =>
          Effect.gen(function* () {
            const min = options.minPolicyVersion ?? 0
            yield* SubscriptionRef.changes(published).pipe(Stream.filter((v) => v >= min), Stream.take(1), Stream.runDrain)
            yield* Effect.sleep(`${sampleMs} millis`)
            const serving = yield* SubscriptionRef.get(published)
            const sequences = Array.from({ length: options.numSamples }, () => {
              // letters a..z: ids 4 + 65..90 in the char tokenizer
              const tokens = Array.from({ length: params.maxTokens }, () => 4 + 65 + Math.floor(random() * 26))
              return { tokens, logprobs: tokens.map(() => -Math.log(26)), stopReason: "length" as const }
            })
            return { sequences, policyVersion: serving }
          }),
        computeLogprobs: (input: ModelInput) => Effect.succeed(modelInputTokens(input).map(() => -Math.log(26))),
        version: SubscriptionRef.get(published),
      })
      return Context.make(Trainer, trainer).pipe(Context.add(Sampler, sampler), Context.add(Tokenizer, CharTokenizer.make()))
    }),
  )

/** A toy env for (a): a vowel first earns 1, so most groups are mixed and every step trains. */
const vowels = Env.make({
  name: "vowels",
  problem: Schema.Struct({ n: Schema.Int }),
  source: Env.seeded(({ random }) => ({ n: random.int(0, 9) })),
  prompt: ({ n }) => `Say ${n}:`,
  reward: Reward.weighted({ vowel: [Reward.make("vowel", (r) => (/^[aeiou]/.test(r.completion) ? 1 : 0)), 1] }),
  sampling: { maxTokens: 4, temperature: 1 },
  eval: { heldOut: 0.2, size: 16 },
})

const partA = Effect.gen(function* () {
  // sleeps need no warm-up beyond the first steps
  const warmup = 3
  const steps = Math.min(STEPS, 30) + warmup
  const run = (async: boolean) => {
    const settings = Runner.defaults("vowels", {
      name: "fixed",
      outDir: tmpDir("a"),
      steps,
      groups: 8,
      groupSize: 8,
      evalEvery: 0,
      saveEvery: 0,
      logRolloutsEvery: 0,
      async,
      maxLag: 1,
    })
    return Runner.run(settings, vowels).pipe(Effect.provide(Layer.fresh(fixedTimeBackend(SAMPLE_MS, TRAIN_MS))), quiet)
  }
  const sync = stepTimes(yield* run(false), warmup)
  const async = stepTimes(yield* run(true), warmup)
  const s = SAMPLE_MS / 1000
  const t = TRAIN_MS / 1000
  console.log(`(a) fixed call times: sample ${SAMPLE_MS} ms, train ${TRAIN_MS} ms; ${sync.length} steps each after ${warmup} warm-up steps`)
  console.log(`    sync  step: median ${(median(sync) * 1000).toFixed(1)} ms, mean ${((sum(sync) / sync.length) * 1000).toFixed(1)} ms`)
  console.log(`    async step: median ${(median(async) * 1000).toFixed(1)} ms, mean ${((sum(async) / async.length) * 1000).toFixed(1)} ms`)
  console.log(`    async step / max(sample, train) = ${(median(async) / Math.max(s, t)).toFixed(3)} (goal <= 1.05)`)
  console.log(`    sync step / (sample + train)    = ${(median(sync) / (s + t)).toFixed(3)}`)
})

// ---------------------------------------------------------------------------------
// (b) the embedded backend on the math env

const partB = Effect.gen(function* () {
  const modelDir = "models/base"
  if (!fs.existsSync(path.join(modelDir, "config.json"))) {
    console.log(`(b) skipped: ${modelDir} not found`)
    return
  }
  const steps = STEPS + WARMUP
  const variants = [
    { name: "sync, in-process", async: false, workers: false, trainerThreads: 1 },
    { name: "async, in-process", async: true, workers: false, trainerThreads: 1 },
    { name: "sync, workers", async: false, workers: true, trainerThreads: 1 },
    { name: "async, workers", async: true, workers: true, trainerThreads: 1 },
    { name: "sync, workers, 2 trainers", async: false, workers: true, trainerThreads: 2 },
    { name: "async, workers, 2 trainers", async: true, workers: true, trainerThreads: 2 },
  ]
  const results: Array<{ name: string; stepsPerSecond: number; median: number; lagMean: number; sample: number; train: number; cores: number }> = []
  for (const v of variants) {
    const outDir = tmpDir("b")
    const settings = Runner.defaults("math", {
      name: "bench",
      outDir,
      steps,
      evalEvery: 0,
      saveEvery: 0,
      logRolloutsEvery: 0,
      sampling: { maxTokens: 6, temperature: 1 },
      async: v.async,
    })
    const backend = Local.layer({ modelDir, seed: 0, stateDir: path.join(outDir, "state"), workers: v.workers, trainerThreads: v.trainerThreads })
    // CPU time of the whole process (every thread) over the measured steps
    let mark = { cpu: 0, wall: 0 }
    const cores = { used: 0 }
    const progress = {
      onStep: ({ step }: Runner.StepSummary) =>
        Effect.sync(() => {
          const now = { cpu: cpuSeconds(), wall: performance.now() / 1000 }
          if (step + 1 === WARMUP) mark = now
          if (step + 1 === steps) cores.used = (now.cpu - mark.cpu) / (now.wall - mark.wall)
        }),
      onPhase: () => Effect.void,
    }
    const rows = yield* Runner.run(settings, mathEnv).pipe(Effect.provide(Layer.fresh(backend)), Effect.provideService(Runner.Progress, progress))
    const times = stepTimes(rows)
    const measured = rows.slice(WARMUP)
    results.push({
      name: v.name,
      stepsPerSecond: times.length / sum(times),
      median: median(times),
      lagMean: sum(measured.map((r) => r["policy_version/lag_mean"] ?? 0)) / measured.length,
      sample: median(measured.map((r) => r["time/sample"] ?? 0)),
      train: median(measured.map((r) => r["time/train"] ?? 0)),
      cores: cores.used,
    })
  }
  console.log(`(b) embedded backend, ${modelDir}, math env, 8 groups x 8 samples; ${STEPS} steps each after ${WARMUP} warm-up steps; ${os.cpus().length} cores, load ${os.loadavg().map((x) => x.toFixed(2)).join(" ")}`)
  for (const r of results) {
    console.log(
      `    ${r.name.padEnd(26)} ${r.stepsPerSecond.toFixed(2)} steps/s | median step ${(r.median * 1000).toFixed(0)} ms | sample ${(r.sample * 1000).toFixed(0)} ms | train ${(r.train * 1000).toFixed(0)} ms | mean lag ${r.lagMean.toFixed(2)} | CPU ${r.cores.toFixed(2)} cores`,
    )
  }
  const base = results[0]!
  for (const r of results.slice(1)) console.log(`    ${r.name.padEnd(26)} / sync, in-process: ${(r.stepsPerSecond / base.stepsPerSecond).toFixed(3)}`)
  console.log(
    `    async with workers (as run --async) / sync in-process: ${(results[5]!.stepsPerSecond / base.stepsPerSecond).toFixed(3)} (goal >= 1.6); overlap alone can reach at most (sample + train) / max(sample, train) = ${((base.sample + base.train) / Math.max(base.sample, base.train)).toFixed(3)}`,
  )
})

const main = Effect.gen(function* () {
  console.log(`load average ${os.loadavg().map((x) => x.toFixed(2)).join(" ")} on ${os.cpus().length} cores`)
  if (only !== "b") yield* partA
  if (only !== "a") yield* partB
}).pipe(Effect.provide(Layer.succeed(References.MinimumLogLevel, "Warn")), Effect.provide(Logger.layer([Logger.consolePretty()])))

Effect.runPromise(main).catch((e) => {
  console.error(e)
  process.exitCode = 1
})

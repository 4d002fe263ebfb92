/**
 * What episode workers (`gyre run --cores`) give when the client's CPU is all there is:
 *
 *   npx tsx bench/cores.ts [--only single,tools,agent,heavy] [--cores 1,2] [--groups 32]
 *                          [--group-size 16] [--steps 3] [--warmup 1] [--sample-concurrency <groups>]
 *                          [--pin]
 *
 * Each run is `Runner.run` in a child process of its own, on Qwen3's tokenizer, with the
 * instant trainer and sampler of the tests in the same process (`InstantService.ts`: no
 * HTTP, no other process), every group in flight, so that the rollout phase waits on
 * nothing but the client's own work. Workloads (`coresEnvs.ts`): the client bench's
 * single-turn, 3-turn tool and agent envs, and `heavy`, single-turn with a reward that spends
 * about a millisecond of CPU per completion. Per workload and core count it prints the
 * wall-clock episodes per second of the measured steps' rollout phases (`Collect.collect`)
 * and the process's CPU (all threads) per episode in them. First it measures how many
 * cores the machine gives this process now (threads spinning for a second: on a shared
 * machine, fewer than it has). Prints numbers; asserts nothing.
 *
 * A run on one core is not confined to one: V8 collects garbage and compiles on threads of
 * its own, so the main thread alone keeps more than one core busy. `--pin` runs the run on
 * N cores with `taskset -c 0-(N-1)` (Linux), so that every thread of it shares those N CPUs
 * and "1 core" is the throughput of one CPU (CPUs 0 to N-1: the process must be allowed
 * them). "Main thread busy" is the share of the rollout phase's wall time its event loop
 * spent in callbacks, waiting for a CPU included. `BENCH_CPU_PROF=<folder>`
 * writes a CPU profile of each thread of each run there (node's `--cpu-prof`).
 */
import { spawn } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import * as Readline from "node:readline"
import { performance } from "node:perf_hooks"
import { Worker } from "node:worker_threads"
import { args, count as countFrom, cpuNow, option, profileFlags } from "./args.ts"

/** The bench's counts are 1 or more. */
const count = (name: string, fallback: number) => countFrom(name, fallback, 1)

const WORKLOADS = ["single", "tools", "agent", "heavy"] as const
type Workload = (typeof WORKLOADS)[number]
const ROOT = Path.resolve(import.meta.dirname, "..")

interface Measured {
  readonly episodes: number
  readonly wallMs: number
  readonly cpuMs: number
  /** how long the main thread's event loop was busy (not waiting for events) */
  readonly mainBusyMs: number
}

const child = async (workload: Workload, cores: number) => {
  const { Effect, Layer, References, Tracer } = await import("effect")
  const Runner = await import("../src/Runner.ts")
  const Tokenizers = await import("../src/tokenizers/index.ts")
  const Pool = await import("../src/run/workers/Pool.ts")
  const { Tokenizer } = await import("../src/services/Tokenizer.ts")
  const { Trainer } = await import("../src/services/Trainer.ts")
  const { Sampler } = await import("../src/services/Sampler.ts")
  const { makeInstant } = await import("../test/backends/http/InstantService.ts")
  const { QWEN3_DIR, scriptFor } = await import("../test/backends/http/ClientWorkloads.ts")
  const { envs } = await import("./coresEnvs.ts")
  const groups = count("groups", 32)
  const steps = count("steps", 3)
  const warmup = count("warmup", 1)
  const groupSize = count("group-size", 16)
  let collects = 0
  let wallMs = 0
  let cpuMs = 0
  let mainBusyMs = 0
  const tracer = Tracer.make({
    span(options) {
      const span = Tracer.nativeTracer.span(options)
      if (options.name !== "Collect.collect" || ++collects <= warmup) return span
      const wall = performance.now()
      const cpu = cpuNow()
      const loop = performance.eventLoopUtilization()
      const end = span.end.bind(span)
      span.end = (endTime, exit) => {
        wallMs += performance.now() - wall
        cpuMs += cpuNow() - cpu
        mainBusyMs += performance.eventLoopUtilization(loop).active
        end(endTime, exit)
      }
      return span
    },
  })
  // the instant trainer and sampler answer the workload's script, here in this process
  const backend = Layer.unwrap(Effect.map(Effect.service(Tokenizer), (tokenizer) => {
    const instant = makeInstant({ script: scriptFor(workload === "heavy" ? "single" : workload, tokenizer) })
    return Layer.mergeAll(Layer.succeed(Trainer, instant.trainer), Layer.succeed(Sampler, instant.sampler))
  })).pipe(Layer.provideMerge(Tokenizers.layer(QWEN3_DIR)))
  const workers = Pool.layer({ cores, env: { module: Path.join(ROOT, "bench/coresEnvs.ts"), exportName: `envs.${workload}` }, tokenizer: { kind: "files", dir: QWEN3_DIR } })
  const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-bench-cores-"))
  const settings = Runner.defaults(envs[workload].name, {
    outDir: dir,
    steps: warmup + steps,
    groups,
    groupSize,
    sampleConcurrency: count("sample-concurrency", groups),
    evalEvery: 0,
    saveEvery: 0,
    logRolloutsEvery: 0,
    seed: 1,
    sampling: { maxTokens: 600, temperature: 1 },
  })
  await Effect.runPromise(
    Runner.run(settings, envs[workload]).pipe(
      Effect.provide(Layer.provideMerge(workers, backend)),
      Effect.withTracer(tracer),
      Effect.provideService(References.MinimumLogLevel, "Warn"),
    ),
  )
  Fs.rmSync(dir, { recursive: true, force: true })
  console.log(`RESULT ${JSON.stringify({ episodes: steps * groups * groupSize, wallMs, cpuMs, mainBusyMs } satisfies Measured)}`)
  process.exit(0)
}

const measure = (workload: Workload, cores: number) =>
  new Promise<Measured>((resolve, reject) => {
    const passOn = ["groups", "group-size", "steps", "warmup", "sample-concurrency"].flatMap((n) => (option(n) === undefined ? [] : [`--${n}`, option(n)!]))
    const node = [process.execPath, ...profileFlags, "--import", "tsx", Path.join(ROOT, "bench", "cores.ts"), "--child", workload, String(cores), ...passOn]
    const [command, ...rest] = args.includes("--pin") ? ["taskset", "-c", `0-${cores - 1}`, ...node] : node
    const proc = spawn(command!, rest, { cwd: ROOT, stdio: ["ignore", "pipe", "inherit"] })
    proc.on("error", (e) => reject(new Error(`cannot start the ${workload} run on ${cores} cores (${command}): ${e.message}${command === "taskset" ? "; --pin needs Linux's taskset" : ""}`)))
    Readline.createInterface({ input: proc.stdout }).on("line", (line) => {
      if (line.startsWith("RESULT ")) resolve(JSON.parse(line.slice("RESULT ".length)) as Measured)
    })
    proc.on("exit", (code) => reject(new Error(`the ${workload} run on ${cores} cores ended without a result (exit ${code})`)))
  })

/** The cores `n` threads spinning for a second get, on average: what the machine can give now. */
const available = async (n: number) => {
  const before = process.cpuUsage()
  const start = performance.now()
  const code = "const end = Date.now() + 1000; let x = 0; while (Date.now() < end) x++"
  await Promise.all(Array.from({ length: n }, () => new Promise((resolve) => new Worker(code, { eval: true }).on("exit", resolve))))
  const used = process.cpuUsage(before)
  return (used.user + used.system) / 1000 / (performance.now() - start)
}

const orchestrate = async () => {
  const only = (option("only")?.split(",") ?? WORKLOADS) as ReadonlyArray<Workload>
  const cores = (option("cores") ?? "1,2").split(",").map(Number).filter((n) => Number.isInteger(n) && n >= 1)
  const most = Math.max(...cores)
  if (args.includes("--pin") && most > Os.availableParallelism()) throw new Error(`--pin runs on CPUs 0 to N-1, and this process may use ${Os.availableParallelism()}: ask for --cores up to that`)
  console.log(`${most} threads spinning get ${(await available(most)).toFixed(2)} cores now`)
  console.log(`rollout phase, ${count("groups", 32)} groups x ${count("group-size", 16)} in flight, ${count("steps", 3)} steps after ${count("warmup", 1)} warm-up, on ${Os.cpus()[0]?.model ?? "?"} (load average ${Os.loadavg()[0]!.toFixed(1)})${args.includes("--pin") ? ", each run pinned to its cores" : ""}`)
  for (const workload of only) {
    console.log(workload)
    let base: number | undefined
    for (const n of cores) {
      const m = await measure(workload, n)
      const rate = m.episodes / (m.wallMs / 1000)
      base ??= rate
      console.log(`  ${n} core${n > 1 ? "s" : " "}  ${rate.toFixed(0).padStart(6)} episodes/s (${(rate / base).toFixed(2)}x), ${(m.cpuMs / m.episodes).toFixed(2)} ms CPU/episode, main thread busy ${((100 * m.mainBusyMs) / m.wallMs).toFixed(0)}%, ${(m.wallMs / 1000).toFixed(2)} s`)
    }
  }
  console.log(`load average after: ${Os.loadavg()[0]!.toFixed(1)}`)
}

if (args[0] === "--child") await child(args[1] as Workload, Number(args[2]))
else await orchestrate()

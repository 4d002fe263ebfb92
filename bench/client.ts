/**
 * What the client costs per episode, against a stand-in Tinker service that answers at
 * once, measured side by side in one run:
 *
 *   npm run bench:client -- [--groups 16] [--group-size 16] [--steps 2] [--warmup 1]
 *                           [--only single,tools,agent] [--rev <git revision>] [--gyre-wait] [--no-batched]
 *                           [--cores 1,2] [--sample-concurrency 8]
 *
 * The stand-in is `serve`'s server on the instant Trainer + Sampler of the tests
 * (`test/backends/http/InstantService.ts`) in a child process of its own, so its CPU is
 * not the client's. The client is `Runner.run` through the HTTP client (protobuf, futures)
 * in another child process, with Qwen3's tokenizer, on the three workloads of
 * `test/backends/http/ClientWorkloads.ts`: a single-turn env (~360-token prompts, ~510-token
 * completions), a 3-turn hermes tool env, and an `openai`-client agent env through the
 * agent endpoint. Per workload it prints the client's CPU (`process.cpuUsage`: user +
 * system, all of its threads) per episode, split by phase (rollouts: sampling, episodes,
 * rewards; datums; submit: wire encoding and submission; await: results decoded, metrics,
 * the step's log), the HTTP exchanges and new connections to the service per step (undici's
 * diagnostics channels), and the client's RSS after the run. The first `--warmup` steps
 * (JIT, caches, connections) are not counted. Submissions are polled as on Tinker (a
 * future, then `retrieve_future`); `--gyre-wait` lets them wait for their result instead
 * (gyre's `X-Gyre-Wait-Ms` extension, which only gyre's server honours). Samples of a
 * sampling session are retrieved in batches (`retrieve_futures`) where the client
 * supports it; `--no-batched` turns that off.
 *
 * `--cores` (a list: `1,2`) plays the episodes on that many episode worker threads
 * (`gyre run --cores`), which sample the stand-in themselves, each count measured in turn;
 * besides CPU (which counts every thread) it prints the wall-clock throughput of the
 * rollout phase: episodes per second of `Collect.collect` (sampling, episodes, rewards),
 * over the measured steps. Exchanges and connections are the main thread's only.
 * `--sample-concurrency` sets the groups in flight (default 8, the run's default); with
 * as many as `--groups`, the rollout phase waits on nothing but CPU.
 *
 * With `--rev`, the same bench also runs on that revision's client (a `git worktree` in a
 * temporary folder, given this bench and its workloads), each workload alternating
 * between the two, both against this tree's stand-in. Prints numbers; asserts nothing.
 * `BENCH_CPU_PROF=<folder>` writes a CPU profile of each thread of the stand-in and the
 * client there (node's `--cpu-prof`).
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process"
import * as diagnostics from "node:diagnostics_channel"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import * as Readline from "node:readline"
import { args, count, cpuNow, option, PHASE_SPANS, profileFlags } from "./args.ts"

const ROOT = Path.resolve(import.meta.dirname, "..")
const WORKLOADS = ["single", "tools", "agent"] as const
type Workload = (typeof WORKLOADS)[number]

/** What the client process reports, per measured step or episode. */
interface Measured {
  readonly episodes: number
  readonly cpuMs: Record<string, number>
  readonly exchanges: number
  readonly connections: number
  readonly paths: Record<string, number>
  readonly rssMb: number
  readonly maxRssMb: number
  /** wall-clock seconds of the measured steps' rollout phases */
  readonly rolloutSeconds: number
  readonly cores: number
}

// ---------------------------------------------------------------- the stand-in service

const standIn = async (workload: Workload) => {
  const { Effect, Layer, References } = await import("effect")
  const Server = await import("../src/backends/http/server/Server.ts")
  const Tokenizers = await import("../src/tokenizers/index.ts")
  const { Tokenizer } = await import("../src/services/Tokenizer.ts")
  const { makeInstant } = await import("../test/backends/http/InstantService.ts")
  const { QWEN3_DIR, scriptFor } = await import("../test/backends/http/ClientWorkloads.ts")
  await Effect.runPromise(
    Effect.gen(function* () {
      const instant = makeInstant({ script: scriptFor(workload, yield* Tokenizer), record: false })
      const server = yield* instant.provide(Server.make({ modelName: "Qwen/Qwen3-8B" }))
      console.log(`URL ${server.url}`)
      // stopped with SIGTERM: exit, so that a CPU profile (BENCH_CPU_PROF) is written
      process.once("SIGTERM", () => process.exit(0))
      yield* Effect.never
    }).pipe(Effect.scoped, Effect.provide(Layer.mergeAll(Tokenizers.layer(QWEN3_DIR))), Effect.provideService(References.MinimumLogLevel, "Warn")),
  )
}

// ---------------------------------------------------------------- the client, measured

const client = async (workload: Workload, url: string) => {
  const { Effect, References, Tracer } = await import("effect")
  const Client = await import("../src/backends/http/client/Client.ts")
  const Runner = await import("../src/Runner.ts")
  const Tokenizers = await import("../src/tokenizers/index.ts")
  const { Layer } = await import("effect")
  const { envs, QWEN3_DIR } = await import("../test/backends/http/ClientWorkloads.ts")
  const cores = count("cores", 1)
  const groups = count("groups", 16)
  const groupSize = count("group-size", 16)
  const steps = count("steps", 2)
  const warmup = count("warmup", 1)
  const port = new URL(url).port
  // counting starts with the first measured step's rollouts
  let collects = 0
  let measuring = false
  let start = 0
  const cpu: Record<string, number> = {}
  let rolloutMs = 0
  const paths: Record<string, number> = {}
  let exchanges = 0
  let connections = 0
  diagnostics.subscribe("undici:request:create", (m) => {
    const request = (m as { request: { origin: string; path: string } }).request
    if (!measuring || !String(request.origin).endsWith(`:${port}`)) return
    exchanges++
    const path = request.path.replace(/^\/api\/v1\//, "").replace(/\?.*$/, "")
    paths[path] = (paths[path] ?? 0) + 1
  })
  diagnostics.subscribe("undici:client:connected", (m) => {
    const params = (m as { connectParams: { port: string | number } }).connectParams
    if (measuring && String(params.port) === port) connections++
  })
  const tracer = Tracer.make({
    span(options) {
      const span = Tracer.nativeTracer.span(options)
      const phase = PHASE_SPANS[options.name]
      if (phase === undefined) return span
      if (options.name === "Collect.collect" && ++collects === warmup + 1) {
        measuring = true
        start = cpuNow()
      }
      const begun = cpuNow()
      const wall = performance.now()
      const end = span.end.bind(span)
      span.end = (endTime, exit) => {
        if (measuring) cpu[phase] = (cpu[phase] ?? 0) + cpuNow() - begun
        if (measuring && phase === "rollouts") rolloutMs += performance.now() - wall
        end(endTime, exit)
      }
      return span
    },
  })
  const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-bench-client-"))
  const settings = Runner.defaults(envs[workload].name, { outDir: dir, steps: warmup + steps, groups, groupSize, sampleConcurrency: count("sample-concurrency", 8), evalEvery: 0, saveEvery: 0, seed: 1, sampling: { maxTokens: 600, temperature: 1 } })
  // Tinker answers a submission with a future to poll: the wait extension is off unless asked for
  const backend = Layer.merge(
    Client.layer({ baseUrl: new URL(url), submitWait: args.includes("--gyre-wait") ? undefined : 0, ...(args.includes("--no-batched") ? { batchedRetrieval: false } : {}) }),
    Tokenizers.layer(QWEN3_DIR),
  )
  // the episode workers load the workload's env from its module, and Qwen3's tokenizer
  const workers = await import("../src/run/workers/Pool.ts").then(
    (Pool) =>
      Pool.layer({
        cores,
        env: { module: Path.join(ROOT, "test/backends/http/ClientWorkloads.ts"), exportName: `envs.${workload}` },
        tokenizer: { kind: "files", dir: QWEN3_DIR },
        // the workers sample the stand-in themselves, waiting for results as the main client does
        direct: { baseUrl: url, ...(args.includes("--gyre-wait") ? {} : { submitWaitMillis: 0 }) },
      }),
    () => Layer.empty, // a revision before --cores
  )
  await Effect.runPromise(
    Runner.run(settings, envs[workload]).pipe(
      Effect.provide(Layer.provideMerge(workers, backend)),
      Effect.withTracer(tracer),
      Effect.provideService(References.MinimumLogLevel, "Warn"),
    ),
  )
  const total = cpuNow() - start
  const phased = Object.values(cpu).reduce((a, b) => a + b, 0)
  const episodes = groups * groupSize * steps
  const result: Measured = {
    episodes,
    cpuMs: { total: total / episodes, ...Object.fromEntries(Object.entries(cpu).map(([k, v]) => [k, v / episodes])), other: (total - phased) / episodes },
    exchanges: exchanges / steps,
    connections: connections / steps,
    paths: Object.fromEntries(Object.entries(paths).map(([k, v]) => [k, v / steps])),
    rssMb: process.memoryUsage().rss / 2 ** 20,
    maxRssMb: process.resourceUsage().maxRSS / 1024,
    rolloutSeconds: rolloutMs / 1000,
    cores,
  }
  Fs.rmSync(dir, { recursive: true, force: true })
  console.log(`RESULT ${JSON.stringify(result)}`)
}

// ---------------------------------------------------------------- the orchestrator

const tsx = (cwd: string, extra: ReadonlyArray<string>): ChildProcess =>
  spawn(process.execPath, [...profileFlags, "--import", "tsx", Path.join(cwd, "bench", "client.ts"), ...extra], { cwd, stdio: ["ignore", "pipe", "inherit"] })

const firstLine = (child: ChildProcess, prefix: string) =>
  new Promise<string>((resolve, reject) => {
    const lines = Readline.createInterface({ input: child.stdout! })
    lines.on("line", (line) => {
      if (line.startsWith(prefix)) resolve(line.slice(prefix.length).trim())
    })
    child.on("exit", (code) => reject(new Error(`${prefix.trim()} never came (exit ${code})`)))
  })

const measure = async (tree: string, workload: Workload, cores: number): Promise<Measured> => {
  const service = tsx(ROOT, ["--stand-in", workload])
  try {
    const url = await firstLine(service, "URL ")
    const passOn = [...["groups", "group-size", "steps", "warmup", "sample-concurrency"].flatMap((n) => (option(n) === undefined ? [] : [`--${n}`, option(n)!])), ...["--gyre-wait", "--no-batched"].filter((f) => args.includes(f))]
    return JSON.parse(await firstLine(tsx(tree, ["--client", workload, "--url", url, "--cores", String(cores), ...passOn]), "RESULT ")) as Measured
  } finally {
    service.kill()
  }
}

/** A worktree of `rev` with this bench and its workloads in it (the revision may predate them). */
const worktreeOf = (rev: string): string => {
  const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-bench-rev-"))
  execFileSync("git", ["worktree", "add", "--detach", dir, rev], { cwd: ROOT, stdio: "ignore" })
  for (const file of ["bench/client.ts", "bench/args.ts", "test/backends/http/InstantService.ts", "test/backends/http/ClientWorkloads.ts"]) {
    Fs.mkdirSync(Path.dirname(Path.join(dir, file)), { recursive: true })
    Fs.copyFileSync(Path.join(ROOT, file), Path.join(dir, file))
  }
  Fs.symlinkSync(Path.join(ROOT, "node_modules"), Path.join(dir, "node_modules"))
  return dir
}

const row = (label: string, m: Measured) => {
  const phases = ["rollouts", "datums", "submit", "await", "other"].map((p) => `${p} ${(m.cpuMs[p] ?? 0).toFixed(2)}`).join(", ")
  const calls = Object.entries(m.paths).sort((a, b) => b[1] - a[1]).map(([k, v]) => `${k} ${v}`).join(", ")
  const throughput = `${(m.episodes / m.rolloutSeconds).toFixed(0)} episodes/s in rollouts (${m.rolloutSeconds.toFixed(2)} s)`
  console.log(`  ${label.padEnd(20)} ${m.cpuMs["total"]!.toFixed(2).padStart(7)} ms/episode (${phases}); ${throughput}; ${m.exchanges} exchanges/step (${calls}); ${m.connections} new connections/step; RSS ${m.rssMb.toFixed(0)} MB (max ${m.maxRssMb.toFixed(0)})`)
}

const orchestrate = async () => {
  const only = (option("only")?.split(",") ?? WORKLOADS) as ReadonlyArray<Workload>
  const rev = option("rev")
  const trees: Array<{ label: string; dir: string }> = [{ label: "this tree", dir: ROOT }]
  if (rev !== undefined) trees.unshift({ label: rev, dir: worktreeOf(rev) })
  const coreCounts = (option("cores") ?? "1").split(",").map(Number).filter((n) => Number.isInteger(n) && n >= 1)
  console.log(`client CPU per episode, ${count("groups", 16)} groups x ${count("group-size", 16)}, ${count("steps", 2)} steps after ${count("warmup", 1)} warm-up, on ${Os.cpus()[0]?.model ?? "?"}`)
  try {
    for (const workload of only) {
      console.log(workload)
      for (const tree of trees) {
        for (const cores of coreCounts) row(coreCounts.length > 1 ? `${tree.label}, ${cores} core${cores > 1 ? "s" : ""}` : tree.label, await measure(tree.dir, workload, cores))
      }
    }
  } finally {
    for (const tree of trees) if (tree.dir !== ROOT) execFileSync("git", ["worktree", "remove", "--force", tree.dir], { cwd: ROOT, stdio: "ignore" })
  }
}

if (args[0] === "--stand-in") await standIn(args[1] as Workload)
else if (args[0] === "--client") await client(args[1] as Workload, option("url")!)
else await orchestrate()

/**
 * The client's own rollout work per episode, without the wire: the workloads of
 * `npm run bench:client` (Qwen3's tokenizer; single turn, 3-turn hermes tool env, `openai`
 * agent env through the agent endpoint) run by `Runner.run` in this process on the instant
 * Trainer + Sampler of the tests, with no HTTP between them. What is left is tokenizing,
 * episodes, tools, rewards, the agent endpoint and the agent itself:
 *
 *   npx tsx bench/rollouts.ts [--only single,tools,agent] [--groups 64] [--group-size 16] [--steps 2] [--warmup 1]
 *
 * Prints this process's CPU (`process.cpuUsage`) per episode by phase, the first
 * `--warmup` steps not counted. Asserts nothing; run `node --cpu-prof --import tsx
 * bench/rollouts.ts --only agent` for a profile of one workload.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { Effect, References, Tracer } from "effect"
import * as Runner from "../src/Runner.ts"
import { Tokenizer } from "../src/services/Tokenizer.ts"
import * as Tokenizers from "../src/tokenizers/index.ts"
import { envs, QWEN3_DIR, scriptFor, WORKLOADS, type Workload } from "../test/backends/http/ClientWorkloads.ts"
import { makeInstant } from "../test/backends/http/InstantService.ts"
import { count, cpuNow, option, PHASE_SPANS } from "./args.ts"

const groups = count("groups", 64)
const groupSize = count("group-size", 16)
const steps = count("steps", 2)
const warmup = count("warmup", 1)



const measure = async (workload: Workload) => {
  let collects = 0
  let start = 0
  const cpu: Record<string, number> = {}
  const tracer = Tracer.make({
    span(options) {
      const span = Tracer.nativeTracer.span(options)
      const phase = PHASE_SPANS[options.name]
      if (phase === undefined) return span
      if (options.name === "Collect.collect" && ++collects === warmup + 1) start = cpuNow()
      const begun = cpuNow()
      const end = span.end.bind(span)
      span.end = (endTime, exit) => {
        if (collects > warmup) cpu[phase] = (cpu[phase] ?? 0) + cpuNow() - begun
        end(endTime, exit)
      }
      return span
    },
  })
  const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-bench-rollouts-"))
  const settings = Runner.defaults(envs[workload].name, { outDir: dir, steps: warmup + steps, groups, groupSize, evalEvery: 0, saveEvery: 0, seed: 1, sampling: { maxTokens: 600, temperature: 1 } })
  try {
    await Effect.runPromise(
      Effect.gen(function* () {
        const instant = makeInstant({ script: scriptFor(workload, yield* Tokenizer), modelName: "Qwen/Qwen3-8B" })
        yield* instant.provide(Runner.run(settings, envs[workload]))
      }).pipe(Effect.provide(Tokenizers.layer(QWEN3_DIR)), Effect.withTracer(tracer), Effect.provideService(References.MinimumLogLevel, "Warn")),
    )
  } finally {
    Fs.rmSync(dir, { recursive: true, force: true })
  }
  const episodes = groups * groupSize * steps
  const phases = ["rollouts", "datums", "submit", "await"].map((p) => `${p} ${((cpu[p] ?? 0) / episodes).toFixed(2)}`).join(", ")
  console.log(`${workload.padEnd(7)} ${((cpuNow() - start) / episodes).toFixed(2).padStart(6)} ms/episode (${phases})`)
}

console.log(`client CPU per episode without the wire, ${groups} groups x ${groupSize}, ${steps} steps after ${warmup} warm-up, on ${Os.cpus()[0]?.model ?? "?"}`)
for (const workload of (option("only")?.split(",") ?? WORKLOADS) as ReadonlyArray<Workload>) await measure(workload)

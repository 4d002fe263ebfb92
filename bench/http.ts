/**
 * The cost of the HTTP backend, measured side by side in one run:
 *
 *   npx tsx bench/http.ts [--steps N] [--warmup N] [--random-init]
 *
 * The same RL step (8 groups x 8 samples pinned to the published version, a trivial
 * reward, forward_backward + optim_step + publish) runs on the embedded backend
 * in-process and through `npx tsx serve` started as a child process on loopback
 * (client, JSON protocol, server, and an identical embedded backend in the child).
 * Both use the same model and seeds; steps alternate between them so that both see
 * the same machine state, and the first `--warmup` steps (JIT, caches, connections)
 * are not counted. Prints medians and the overhead ratio; asserts nothing.
 */
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import { Effect, Layer, Logger, References } from "effect"
import * as Client from "../src/backends/http/client/Client.ts"
import * as Retry from "../src/backends/http/client/Retry.ts"
import { embedded, RANDOM_CONFIG } from "../src/backends/local/Serve.ts"
import * as CharTokenizer from "../src/backends/local/CharTokenizer.ts"
import { adamParams, type Datum, modelInputFromTokens } from "../src/contract/Contract.ts"
import * as D from "../src/vocabulary/Datum.ts"
import { Sampler, type SamplerShape } from "../src/services/Sampler.ts"
import { encodePrompt } from "../src/services/Tokenizer.ts"
import { Trainer, type TrainerShape } from "../src/services/Trainer.ts"

const args = process.argv.slice(2)
const flag = (name: string, fallback: number) => {
  const i = args.indexOf(name)
  const v = i >= 0 ? Number(args[i + 1]) : Number.NaN
  return Number.isFinite(v) && v >= 0 ? v : fallback
}
const steps = flag("--steps", 20)
// a long run is warm: the first steps (JIT, caches, connections) are not counted
const warmup = flag("--warmup", 10)
const randomInit = args.includes("--random-init") || !fs.existsSync("models/base/config.json")
const GROUPS = 8
const GROUP_SIZE = 8
const MAX_TOKENS = 12

const median = (xs: ReadonlyArray<number>) => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.floor(s.length / 2)]!
}

interface Timing {
  sample: number
  train: number
  publish: number
  total: number
}

/** One RL step on the given services; returns the wall time of each phase, in ms. */
const rlStep = (trainer: TrainerShape, sampler: SamplerShape, prompts: ReadonlyArray<ReadonlyArray<number>>, step: number, version: number) =>
  Effect.gen(function* () {
    const t0 = performance.now()
    const groups = yield* Effect.forEach(
      prompts,
      (prompt, g) =>
        Effect.map(
          sampler.sample(
            modelInputFromTokens(prompt),
            { maxTokens: MAX_TOKENS, temperature: 1, seed: 1000 * step + g },
            { numSamples: GROUP_SIZE, minPolicyVersion: version, affinityKey: `step-${step}/group-${g}` },
          ),
          (r) => ({ prompt, r }),
        ),
      { concurrency: "unbounded" },
    )
    const t1 = performance.now()
    const data: Array<Datum> = []
    for (const { prompt, r } of groups) {
      // trivial reward: the share of digits in the completion
      const rewards = r.sequences.map((s) => s.tokens.filter((t) => CharTokenizer.make().decode([t]).match(/[0-9]/)).length / Math.max(1, s.tokens.length))
      const mean = rewards.reduce((a, b) => a + b, 0) / rewards.length
      r.sequences.forEach((s, i) => {
        if (s.tokens.length > 0) data.push(D.rl({ prompt, completion: s.tokens, samplerLogprobs: s.logprobs, advantage: rewards[i]! - mean + 0.01 }))
      })
    }
    yield* trainer.forwardBackward(data, "importance_sampling")
    const opt = yield* trainer.optimStep(adamParams({ learningRate: 1e-3 }))
    const t2 = performance.now()
    const pub = yield* trainer.saveWeightsForSampler(`bench-${step}`)
    const t3 = performance.now()
    if (pub.version !== opt.version) return yield* Effect.die(new Error(`published ${pub.version}, trained ${opt.version}`))
    return { timing: { sample: t1 - t0, train: t2 - t1, publish: t3 - t2, total: t3 - t0 } satisfies Timing, version: pub.version }
  })

/** A free loopback port. */
const freePort = () =>
  new Promise<number>((resolve) => {
    const srv = net.createServer()
    srv.listen(0, "127.0.0.1", () => {
      const port = (srv.address() as net.AddressInfo).port
      srv.close(() => resolve(port))
    })
  })

/** `npx tsx serve` as a child process, stopped with the scope. */
const spawnServe = (args: ReadonlyArray<string>) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const port = await freePort()
      const child = spawn(process.execPath, ["--import", "tsx", "serve.ts", "--port", String(port), ...args], { stdio: ["ignore", "ignore", "inherit"] })
      const url = `http://127.0.0.1:${port}`
      for (let i = 0; i < 600; i++) {
        const ok = await fetch(`${url}/api/v1/healthz`).then((r) => r.ok, () => false)
        if (ok) return { child, url }
        if (child.exitCode !== null) throw new Error(`serve exited with ${child.exitCode}`)
        await new Promise((r) => setTimeout(r, 100))
      }
      throw new Error("serve did not start within 60 s")
    }),
    ({ child }) => Effect.sync(() => child.kill("SIGTERM")),
  )

const connect = (url: string) =>
  Effect.map(Layer.build(Client.layer({ baseUrl: url, retry: Retry.fast })), (ctx) => ({
    trainer: ctx.mapUnsafe.get(Trainer.key) as TrainerShape,
    sampler: ctx.mapUnsafe.get(Sampler.key) as SamplerShape,
  }))

const main = Effect.gen(function* () {
  const stateDir = fs.mkdtempSync(`${os.tmpdir()}/gyre-bench-http-`)
  const options = { seed: 1, stateDir, ...(randomInit ? { config: RANDOM_CONFIG } : { modelDir: "models/base" }) }
  const tokenizer = CharTokenizer.make()
  const prompts = yield* Effect.forEach(
    Array.from({ length: GROUPS }, (_, g) => `What is ${g + 2} plus ${7 - (g % 5)}? `),
    (text) => encodePrompt(tokenizer, text),
  )

  const local = yield* embedded(options)
  const served = yield* spawnServe(["--seed", "1", "--state-dir", stateDir, ...(randomInit ? ["--random-init"] : ["--model", "models/base"])])
  const variants = [
    { name: "in-process", ...local },
    { name: "serve (loopback)", ...(yield* connect(served.url)) },
  ]

  console.log(
    `bench/http: ${randomInit ? "random-init model" : "models/base"}, ${GROUPS} groups x ${GROUP_SIZE} samples, ${MAX_TOKENS} tokens max, ${steps} steps each after ${warmup} warm-up steps`,
  )
  const versions: Array<number> = []
  for (const v of variants) versions.push((yield* v.trainer.saveWeightsForSampler("bench-start")).version)
  const timings: Array<Array<Timing>> = variants.map(() => [])
  for (let i = 0; i < steps + warmup; i++) {
    for (let k = 0; k < variants.length; k++) {
      const v = variants[k]!
      const x = yield* rlStep(v.trainer, v.sampler, prompts, i, versions[k]!)
      versions[k] = x.version
      if (i >= warmup) timings[k]!.push(x.timing)
    }
  }
  const cols = variants.map((v) => v.name)
  console.log(`${"median ms per step".padEnd(22)} ${cols.map((c) => c.padStart(24)).join("")}`)
  const row = (name: string, key: keyof Timing) => {
    const ms = timings.map((ts) => median(ts.map((t) => t[key])))
    console.log(
      `${name.padEnd(22)} ${ms.map((m, k) => (k === 0 ? m.toFixed(1) : `${m.toFixed(1)} (x${(m / ms[0]!).toFixed(2)})`).padStart(24)).join("")}`,
    )
  }
  row("sample (64 seqs)", "sample")
  row("fwd_bwd + optim_step", "train")
  row("publish", "publish")
  row("whole RL step", "total")
  const total = (k: number) => median(timings[k]!.map((t) => t.total))
  const sum = (k: number) => timings[k]!.reduce((acc, t) => acc + t.total, 0)
  console.log(`overhead ratio of serve over in-process: median ${(total(1) / total(0)).toFixed(3)}, mean ${(sum(1) / sum(0)).toFixed(3)} (goal <= 1.10)`)
  fs.rmSync(stateDir, { recursive: true, force: true })
}).pipe(Effect.scoped, Effect.provide(Layer.succeed(References.MinimumLogLevel, "Warn")), Effect.provide(Logger.layer([Logger.consolePretty()])))

Effect.runPromise(main).catch((e) => {
  console.error(e)
  process.exitCode = 1
})

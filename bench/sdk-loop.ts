/**
 * The RL loop of `scripts/sdk/check.py` (the official Tinker SDK's loop) run with gyre's
 * own HTTP client against a fresh `serve`, for its median step time next to the SDK's:
 *
 *   npx tsx bench/sdk-loop.ts [--steps N] [--groups N] [--group-size N] [--lr X] [--seed N] [--rank N] [--wire auto|protobuf|json]
 *   PYTHON=/work/V/bin/python scripts/sdk/check.sh /work/sdk --skip-calls --steps 30   # the SDK's
 *
 * The same shape and sizes: each step samples `groups` arithmetic facts x `group-size`
 * completions concurrently (max_tokens 6, temperature 1, stop at EOS) from the last
 * published weights, scores the last number of each completion, builds ppo datums with
 * group-normalized advantages (std guard; a group without signal is skipped; 0.0 at prompt
 * positions), then forward_backward("ppo"), optim_step (Adam, `lr`) and
 * saveWeightsForSampler. `serve` is started as `scripts/sdk/check.sh` starts it (default
 * model, fresh state dir); the LoRA rank is `--rank` (default 32, the SDK's own and
 * check.py's). One difference: the SDK submits optim_step before forward_backward's
 * result is back; gyre's Trainer awaits each call in turn. Prints the median step time
 * over all steps (as check.py does) and the mean reward of the first and last 10 steps;
 * asserts nothing.
 */
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { Context, Effect, Layer, Logger, References } from "effect"
import * as Client from "../src/backends/http/client/Client.ts"
import { BOS, decodeChars, encodeChars, EOS } from "../src/backends/local/CharTokenizer.ts"
import { adamParams, type Datum, modelInputFromTokens } from "../src/contract/Contract.ts"
import * as D from "../src/vocabulary/Datum.ts"
import { Sampler } from "../src/services/Sampler.ts"
import { Trainer } from "../src/services/Trainer.ts"

const args = process.argv.slice(2)
const flag = (name: string, fallback: number) => {
  const i = args.indexOf(`--${name}`)
  const v = i >= 0 ? Number(args[i + 1]) : Number.NaN
  return Number.isFinite(v) ? v : fallback
}
const STEPS = flag("steps", 30)
const GROUPS = flag("groups", 8)
const GROUP_SIZE = flag("group-size", 8)
const LR = flag("lr", 1e-3)
const SEED = flag("seed", 0)
const RANK = flag("rank", 32)
const WIRE = (args.includes("--wire") ? args[args.indexOf("--wire") + 1] : "auto") as "auto" | "protobuf" | "json"

const median = (xs: ReadonlyArray<number>) => {
  const s = [...xs].sort((a, b) => a - b)
  return s.length % 2 === 1 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2
}
const mean = (xs: ReadonlyArray<number>) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length)
const pstdev = (xs: ReadonlyArray<number>) => Math.sqrt(mean(xs.map((x) => (x - mean(xs)) ** 2)))
/** mulberry32: a seeded uniform [0, 1) */
const rng = (seed: number) => () => {
  seed = (seed + 0x6d2b79f5) | 0
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}

const FACTS = Array.from({ length: 10 }, (_, a) => Array.from({ length: 10 }, (_, b) => (["plus", "minus", "times"] as const).map((op) => ({ a, b, op })))).flat(2)
const answer = ({ a, b, op }: (typeof FACTS)[number]) => (op === "plus" ? a + b : op === "minus" ? a - b : a * b)
/** 1 when the last number in the completion is the answer (as check.py scores it) */
const reward = (text: string, fact: (typeof FACTS)[number]) => {
  const numbers = text.match(/-?\d+/g)
  return numbers !== null && Number(numbers[numbers.length - 1]) === answer(fact) ? 1 : 0
}
const encode = (text: string) => {
  const r = encodeChars(text)
  if (!("ids" in r)) throw new Error(`cannot encode ${JSON.stringify(text)}`)
  return r.ids
}

/** `npx tsx serve.ts` as `scripts/sdk/check.sh` starts it, stopped with the scope. */
const spawnServe = Effect.acquireRelease(
  Effect.promise(async () => {
    const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), "gyre-bench-sdk-loop-"))
    const child = spawn(process.execPath, ["--import", "tsx", "serve.ts", "--port", "0", "--state-dir", stateDir], { stdio: ["ignore", "pipe", "pipe"] })
    let log = ""
    const url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`serve did not start within 60 s:\n${log}`)), 60_000)
      const onData = (chunk: Buffer) => {
        log += chunk.toString()
        const m = log.match(/http:\/\/127\.0\.0\.1:\d+/)
        if (m !== null) {
          clearTimeout(timer)
          resolve(m[0])
        }
      }
      child.stdout.on("data", onData)
      child.stderr.on("data", onData)
      child.on("exit", (code) => reject(new Error(`serve exited with ${code}:\n${log}`)))
    })
    return { child, url, stateDir }
  }),
  ({ child, stateDir }) =>
    Effect.promise(async () => {
      child.kill("SIGTERM")
      await new Promise((r) => (child.exitCode !== null ? r(undefined) : child.once("exit", r)))
      fs.rmSync(stateDir, { recursive: true, force: true })
    }),
)

const main = Effect.gen(function* () {
  const served = yield* spawnServe
  const ctx = yield* Layer.build(Client.layer({ baseUrl: served.url, loraRank: RANK, wire: WIRE }))
  const trainer = Context.get(ctx, Trainer)
  const sampler = Context.get(ctx, Sampler)
  console.log(`bench/sdk-loop: gyre's HTTP client (wire ${WIRE}) against serve at ${served.url}: ${STEPS} steps x ${GROUPS} groups x ${GROUP_SIZE}, ppo, lr ${LR}, rank ${RANK}; load ${os.loadavg().map((l) => l.toFixed(2)).join(" ")}`)
  const random = rng(SEED)
  let version = (yield* trainer.saveWeightsForSampler("start")).version
  const means: Array<number> = []
  const stepTimes: Array<number> = []
  for (let step = 0; step < STEPS; step++) {
    const started = performance.now()
    const problems = Array.from({ length: GROUPS }, () => FACTS[Math.floor(random() * FACTS.length)]!)
    const prompts = problems.map((f) => [BOS, ...encode(`What is ${f.a} ${f.op} ${f.b}?`)])
    const results = yield* Effect.forEach(
      prompts,
      (p) => sampler.sample(modelInputFromTokens(p), { maxTokens: 6, temperature: 1, stop: [EOS] }, { numSamples: GROUP_SIZE, minPolicyVersion: version }),
      { concurrency: "unbounded" },
    )
    const data: Array<Datum> = []
    const rewards: Array<number> = []
    results.forEach((res, g) => {
      const rs = res.sequences.map((s) => reward(decodeChars(s.tokens), problems[g]!))
      rewards.push(...rs)
      const m = mean(rs)
      const std = pstdev(rs)
      if (std < 1e-6) return // no signal in this group
      res.sequences.forEach((s, i) => {
        if (s.tokens.length > 0) data.push(D.rl({ prompt: prompts[g]!, completion: s.tokens, samplerLogprobs: s.logprobs, advantage: (rs[i]! - m) / (std + 1e-6) }))
      })
    })
    if (data.length > 0) {
      yield* trainer.forwardBackward(data, "ppo")
      yield* trainer.optimStep(adamParams({ learningRate: LR }))
    }
    version = (yield* trainer.saveWeightsForSampler(`step-${step}`)).version
    means.push(mean(rewards))
    stepTimes.push((performance.now() - started) / 1000)
    if ((step + 1) % 10 === 0) {
      console.log(`  rl step ${step + 1}/${STEPS}: mean reward (last 10) ${mean(means.slice(-10)).toFixed(3)}, ${mean(stepTimes.slice(-10)).toFixed(2)}s/step`)
    }
  }
  const first = mean(means.slice(0, 10))
  const last = mean(means.slice(-10))
  console.log(`mean reward steps 1-10 ${first.toFixed(3)} -> last 10 ${last.toFixed(3)} (rise ${(last - first >= 0 ? "+" : "") + (last - first).toFixed(3)}); median step ${median(stepTimes).toFixed(2)}s`)
}).pipe(Effect.scoped, Effect.provide(Layer.succeed(References.MinimumLogLevel, "Warn")), Effect.provide(Logger.layer([Logger.consolePretty()])))

Effect.runPromise(main).catch((e) => {
  console.error(e)
  process.exitCode = 1
})

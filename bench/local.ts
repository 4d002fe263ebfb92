/**
 * Throughput of the embedded backend, measured side by side in one run:
 *
 *   npx tsx bench/local.ts
 *
 * - tfjs-wasm 2-D matmul GFLOP/s (the peak the model can hope for on this thread)
 * - LoRA training: tokens/s and the fraction of that peak a training step achieves
 * - sampling: tokens/s for the RL shape (8 groups x 8 samples), batched vs one by one
 * - prompt reuse: 8 samples of one prompt, prompt prefilled once and tiled vs once per row
 *   (the gain within a group); the same prompt again at the same policy version (the
 *   sampler's LRU); and the LRU's hits in the RL access pattern (a publish before every
 *   step empties it, so there are none)
 * - reuse across turns: the latency of an episode's third turn continued from the K/V of
 *   its second turn vs prefilled whole (calculator-shaped episodes: a 21-token prompt,
 *   turns of up to 7 sampled tokens, observations of 5); and the runner's access pattern
 *   for such episodes (publish, then 8 groups x 8 episodes x 3 turns, later turns sent
 *   concurrently as one request per episode): hits, reused tokens and wall time
 *
 * Prints numbers and ratios; asserts nothing.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as tf from "@tensorflow/tfjs"
import { type Datum, float32, modelInputFromTokens } from "../src/contract/Contract.ts"
import { resolveLoss } from "../src/loss/Loss.ts"
import { BOS, encodeChars, VOCAB_SIZE } from "../src/backends/local/CharTokenizer.ts"
import { loadBaseModel } from "../src/backends/local/Checkpoint.ts"
import { initTf } from "../src/backends/local/index.ts"
import { defaultLora, forwardFlops, initBase, LocalModel, type ModelConfig } from "../src/backends/local/Model.ts"
import { Rng } from "../src/backends/local/Rng.ts"
import { LocalSamplerEngine, type SamplerEngineOptions, type SamplerStats } from "../src/backends/local/SamplerEngine.ts"
import { LocalTrainerEngine } from "../src/backends/local/TrainerEngine.ts"

const median = (xs: Array<number>) => {
  const s = xs.slice().sort((a, b) => a - b)
  return s[Math.floor(s.length / 2)]!
}
const time = (f: () => void, reps: number, warmup = 2) => {
  for (let i = 0; i < warmup; i++) f()
  const ts: Array<number> = []
  for (let i = 0; i < reps; i++) {
    const t0 = performance.now()
    f()
    ts.push((performance.now() - t0) / 1000)
  }
  return median(ts)
}
const timeAsync = async (f: () => Promise<unknown>, reps: number, warmup = 2) => {
  for (let i = 0; i < warmup; i++) await f()
  const ts: Array<number> = []
  for (let i = 0; i < reps; i++) {
    const t0 = performance.now()
    await f()
    ts.push((performance.now() - t0) / 1000)
  }
  return median(ts)
}

await initTf()
console.log(`load average ${os.loadavg().map((x) => x.toFixed(2)).join(" ")} on ${os.cpus().length} cores`)
const fromDisk = fs.existsSync("models/base/config.json")
const { config, weights } = fromDisk
  ? await loadBaseModel("models/base")
  : (() => {
      const c: ModelConfig = { vocabSize: VOCAB_SIZE, contextLength: 48, nLayers: 2, dModel: 128, nHeads: 4, mlpRatio: 4 }
      return { config: c, weights: initBase(c, 1) }
    })()
const model = new LocalModel(config, weights)
console.log(`model: ${fromDisk ? "models/base" : "random init"} ${JSON.stringify(config)}; LoRA rank ${defaultLora.rank} on ${defaultLora.targets.join(",")}`)

// ---- peak: 2-D matmul at the model's own shapes and at 512^2
const matmulGflops = (m: number, k: number, n: number) => {
  const a = tf.randomNormal([m, k])
  const b = tf.randomNormal([k, n])
  const s = time(() => {
    const c = tf.matMul(a, b)
    c.dataSync()
    c.dispose()
  }, 15, 3)
  a.dispose()
  b.dispose()
  return (2 * m * k * n) / s / 1e9
}
// V8 first runs wasm in its baseline tier and optimises hot functions in the background:
// warm up for a couple of seconds before measuring anything
{
  const t0 = performance.now()
  while (performance.now() - t0 < 2500) matmulGflops(512, 512, 512)
}
const peakNow = () => Math.max(matmulGflops(512, 512, 512), matmulGflops(64 * 24, config.dModel, config.dModel * config.mlpRatio))
let peak = peakNow()

// ---- training: one RL step (forwardBackward + optimStep), 64 sequences of 24 tokens
const B = 64
const L = 24
const P = 19
const rng = new Rng(1)
const data: Array<Datum> = Array.from({ length: B }, () => {
  const tokens = [BOS, ...Array.from({ length: L - 1 }, () => 4 + rng.int(95))]
  return {
    modelInput: modelInputFromTokens(tokens),
    lossFnInputs: {
      logprobs: float32(tokens.map((_, i) => (i < P ? 0 : -2))),
      advantages: float32(tokens.map((_, i) => (i < P ? 0 : rng.normal()))),
    },
  }
})
const trainer = new LocalTrainerEngine(model, { lora: defaultLora, seed: 1 })
const ppo = resolveLoss("ppo", {})
if (!ppo.ok) throw new Error(ppo.message)
const adam = { learningRate: 1e-4, beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0, gradClipNorm: 0 }
const stepSeconds = time(() => {
  trainer.run(data, ppo.value, { backward: true })
  trainer.optimStep(adam)
}, 9, 3)
const fwdSeconds = time(() => trainer.run(data, ppo.value, { backward: false }), 7)
// the machine may be shared: take the best peak measured around the training runs
peak = Math.max(peak, peakNow())
console.log(`matmul GFLOP/s (2-D, XNNPACK): ${peak.toFixed(1)} (best of 512x512x512 and [1536,${config.dModel}]x[${config.dModel},${config.dModel * config.mlpRatio}], before and after the training runs)`)

// FLOPs actually executed by a LoRA step: forward (incl. the one-hot embedding matmul),
// backward dX through every dense layer and attention, LoRA forward and backward.
const f = forwardFlops(config, B, L)
const D = config.dModel
const M = D * config.mlpRatio
const N = B * L
const embed = 2 * N * config.vocabSize * D
const loraFwd = config.nLayers * 2 * N * defaultLora.rank * (4 * (D + D) + (D + M) + (M + D))
const executed = f.dense + embed + f.attention + loraFwd + f.dense + 2 * f.attention + 2 * loraFwd
// the usual training convention: 3 x forward (forward + dX + dW of a full fine-tune)
const convention = 3 * (f.dense + f.attention)
console.log(`train step (B=${B}, L=${L}, ppo, LoRA): ${(stepSeconds * 1000).toFixed(0)} ms, forward only ${(fwdSeconds * 1000).toFixed(0)} ms`)
console.log(`training tokens/s: ${(N / stepSeconds).toFixed(0)}`)
console.log(
  `achieved fraction of peak: ${(executed / stepSeconds / 1e9 / peak).toFixed(2)} counting executed FLOPs (${(executed / 1e9).toFixed(2)} GFLOP, ${(executed / stepSeconds / 1e9).toFixed(1)} GFLOP/s); ` +
    `${(convention / stepSeconds / 1e9 / peak).toFixed(2)} by the 3x-forward convention`,
)
console.log(`  of which attention (batched matmuls, no XNNPACK): ${((3 * f.attention) / 1e9).toFixed(3)} GFLOP`)

// ---- sampling: 8 groups x 8 samples, prompts of 19 tokens, 6 new tokens
const promptOf = (g: number, salt: number) => {
  const a = (g * 7 + salt) % 10
  const b = (g * 3 + salt * 5) % 10
  const text = `What is ${a} ${["plus", "minus", "times"][g % 3 === 0 ? 1 : 2]} ${b}?` // 18 chars
  const r = encodeChars(text)
  if (!("ids" in r)) throw new Error("encode")
  return [BOS, ...r.ids]
}
const params = { maxTokens: 6, temperature: 1 }
const sampleRun = async (options: SamplerEngineOptions, concurrent: boolean, salt0: number) => {
  const s = new LocalSamplerEngine(model, { seed: 3, ...options })
  let salt = salt0
  let tokens = 0
  const run = async () => {
    salt++
    const prompts = Array.from({ length: 8 }, (_, g) => promptOf(g, salt))
    const results = concurrent
      ? await Promise.all(prompts.map((p) => s.sample(p, params, { numSamples: 8 })))
      : await (async () => {
          const out = []
          for (const p of prompts) out.push(await s.sample(p, params, { numSamples: 8 }))
          return out
        })()
    tokens = results.reduce((a, r) => a + r.sequences.reduce((b, q) => b + q.tokens.length, 0), 0)
  }
  const seconds = await timeAsync(run, 7)
  s.dispose()
  return { seconds, tokens }
}
const batched = await sampleRun({}, true, 0)
const oneByOne = await sampleRun({ batchRequests: false }, true, 100)
// what keeping finished rows' K/V costs where no turn continues them, in the single-turn RL
// pattern (a publish before each step's 8 groups x 8 samples): both samplers alternately
const keepCost = await (async () => {
  const a = new LocalSamplerEngine(model, { seed: 3 })
  const b = new LocalSamplerEngine(model, { seed: 3, turnReuse: false })
  const ta: Array<number> = []
  const tb: Array<number> = []
  for (let rep = 0; rep < 24; rep++) {
    const prompts = Array.from({ length: 8 }, (_, g) => promptOf(g, 300 + rep))
    const adapter = trainer.publish()
    a.setAdapter(adapter)
    b.setAdapter(adapter)
    for (const [s, into] of rep % 2 === 0 ? [[a, ta], [b, tb]] as const : [[b, tb], [a, ta]] as const) {
      const t0 = performance.now()
      await Promise.all(prompts.map((p) => s.sample(p, params, { numSamples: 8 })))
      if (rep >= 4) into.push((performance.now() - t0) / 1000)
    }
  }
  a.dispose()
  b.dispose()
  return { keep: median(ta), none: median(tb) }
})()
console.log(
  `sampling 8 groups x 8 samples x ${params.maxTokens} tokens: batched ${(batched.seconds * 1000).toFixed(0)} ms (${(batched.tokens / batched.seconds).toFixed(0)} tokens/s), ` +
    `one request at a time ${(oneByOne.seconds * 1000).toFixed(0)} ms (${(oneByOne.tokens / oneByOne.seconds).toFixed(0)} tokens/s); batching speedup ${(oneByOne.seconds / batched.seconds).toFixed(2)}x`,
)
console.log(
  `  keeping finished rows' K/V for a next turn (publish, then 8 groups x 8 samples; single-turn, so nothing continues; interleaved): ${(keepCost.keep * 1000).toFixed(1)} ms vs ${(keepCost.none * 1000).toFixed(1)} ms without: ${(keepCost.keep / keepCost.none).toFixed(2)}x the time`,
)

// ---- prefix reuse: 8 samples of one prompt
const prefixRun = async (options: SamplerEngineOptions) => {
  const s = new LocalSamplerEngine(model, { seed: 5, ...options })
  let salt = 0
  const seconds = await timeAsync(() => s.sample(promptOf(1, ++salt), params, { numSamples: 8 }), 15, 3)
  s.dispose()
  return seconds
}
const reuse = await prefixRun({ prefixCacheSize: 0 })
const perRow = await prefixRun({ prefixCacheSize: 0, prefixReuse: false })
const lru = await (async () => {
  const s = new LocalSamplerEngine(model, { seed: 5 })
  const p = promptOf(2, 0)
  const seconds = await timeAsync(() => s.sample(p, params, { numSamples: 8 }), 15, 3)
  s.dispose()
  return seconds
})()
console.log(
  `prompt reuse within a group, 8 samples of one prompt: prefill once + tile ${(reuse * 1000).toFixed(1)} ms vs prefill per row ${(perRow * 1000).toFixed(1)} ms: speedup ${(perRow / reuse).toFixed(2)}x; ` +
    `the same prompt again at the same policy version (from the LRU) ${(lru * 1000).toFixed(1)} ms: ${(perRow / lru).toFixed(2)}x`,
)

// ---- the LRU in the RL access pattern: every step publishes, then samples 8 groups x 8
{
  const s = new LocalSamplerEngine(model, { seed: 7 })
  for (let step = 0; step < 5; step++) {
    s.setAdapter(trainer.publish())
    await Promise.all(Array.from({ length: 8 }, (_, g) => s.sample(promptOf(g, step), params, { numSamples: 8 })))
  }
  console.log(
    `LRU in the RL pattern (publish, then 8 groups x 8 samples; 5 steps): ${s.stats.prefixHits} hits, ${s.stats.prefixMisses} misses ` +
      `(a publish empties it: the adapter changes every layer's K/V)`,
  )
  s.dispose()
}
// ---- reuse across turns. The models/base config with random weights: the cost of a turn
// does not depend on the weights' values, and a random model does not end its turns early
// (models/base answers a calculator prompt with EOS at once), so turns have their full length.
{
  const turnModel = new LocalModel(config, initBase(config, 2))
  const enc = (text: string) => {
    const r = encodeChars(text)
    if (!("ids" in r)) throw new Error("encode")
    return r.ids
  }
  const episodePrompt = (k: number) => [BOS, ...enc(`What is ${100 + (k % 900)} plus ${10 + (k % 89)}?`)] // 21 tokens
  const observation = (k: number) => enc(`=${100 + (k % 900)};`) // 5 tokens
  const turnParams = (input: ReadonlyArray<number>, seed: number) => ({ maxTokens: Math.min(7, config.contextLength - input.length), temperature: 1, seed })
  const ctx = config.contextLength

  // one episode at a time: turns 1 and 2 on the sampler with reuse, then turn 3 on both
  const reuse = new LocalSamplerEngine(turnModel, { seed: 11 })
  const whole = new LocalSamplerEngine(turnModel, { seed: 11, prefixCacheSize: 0 })
  const withTimes: Array<number> = []
  const wholeTimes: Array<number> = []
  const lengths = { prompt: 0, turn: 0, obs: 0, input3: 0, reused: 0, prefilled: 0, n: 0 }
  let identical = true
  for (let k = 0; k < 45; k++) {
    const prompt = episodePrompt(k)
    const t1 = (await reuse.sample(prompt, turnParams(prompt, 3 * k), { numSamples: 1 })).sequences[0]!.tokens
    const p2 = [...prompt, ...t1, ...observation(k)]
    const t2 = (await reuse.sample(p2, turnParams(p2, 3 * k + 1), { numSamples: 1 })).sequences[0]!.tokens
    const p3 = [...p2, ...t2, ...observation(k + 7)]
    if (p3.length >= ctx) continue
    const before = { ...reuse.stats }
    const run = async (s: LocalSamplerEngine, into: Array<number>) => {
      const t0 = performance.now()
      const r = await s.sample(p3, turnParams(p3, 3 * k + 2), { numSamples: 1 })
      into.push((performance.now() - t0) / 1000)
      return r
    }
    // alternate which goes first
    const first = k % 2 === 0 ? await run(reuse, withTimes) : undefined
    const rb = await run(whole, wholeTimes)
    const ra = first ?? (await run(reuse, withTimes))
    identical &&= JSON.stringify(ra.sequences[0]!.tokens) === JSON.stringify(rb.sequences[0]!.tokens)
    if (k >= 5) {
      lengths.prompt += prompt.length
      lengths.turn += (t1.length + t2.length) / 2
      lengths.obs += (p2.length - prompt.length - t1.length + p3.length - p2.length - t2.length) / 2
      lengths.input3 += p3.length
      lengths.reused += reuse.stats.reusedTokens - before.reusedTokens
      lengths.prefilled += reuse.stats.prefilledTokens - before.prefilledTokens
      lengths.n++
    }
  }
  // the first 5 episodes warm up
  const tWith = median(withTimes.slice(5))
  const tWhole = median(wholeTimes.slice(5))
  const avg = (x: number) => (x / lengths.n).toFixed(1)
  console.log(
    `turn 3 of an episode (prompt ${avg(lengths.prompt)}, turns ${avg(lengths.turn)} sampled tokens, observations ${avg(lengths.obs)}; turn-3 input ${avg(lengths.input3)} tokens, ` +
      `${avg(lengths.reused)} reused + ${avg(lengths.prefilled)} prefilled; median of ${lengths.n}): continued from turn 2's K/V ${(tWith * 1000).toFixed(2)} ms vs prefilled whole ${(tWhole * 1000).toFixed(2)} ms: ` +
      `${(tWhole / tWith).toFixed(2)}x; same tokens: ${identical ? "yes" : "NO"}`,
  )
  reuse.dispose()
  whole.dispose()

  // the runner's access pattern, several sampler configurations interleaved step by step
  // (the machine may be shared: each step runs every configuration, in rotating order)
  const turnTrainer = new LocalTrainerEngine(turnModel, { lora: defaultLora, seed: 4 })
  const collect = async (configs: Record<string, SamplerEngineOptions>, groups: number, steps: number) => {
    const names = Object.keys(configs)
    const engines = names.map((n) => new LocalSamplerEngine(turnModel, { seed: 13, ...configs[n] }))
    const times = names.map((): Array<number> => [])
    let turns3 = 0
    const play = async (s: LocalSamplerEngine, step: number) => {
      await Promise.all(Array.from({ length: groups }, async (_, g) => {
        const k = groups * step + g
        const prompt = episodePrompt(k)
        const first = await s.sample(prompt, turnParams(prompt, k), { numSamples: 8 })
        await Promise.all(first.sequences.map(async (q, e) => {
          let input = [...prompt, ...q.tokens, ...observation(k + e)]
          for (let turn = 2; turn <= 3 && input.length < ctx; turn++) {
            const out = await s.sample(input, turnParams(input, 1000 * k + 10 * e + turn), { numSamples: 1 })
            if (turn === 3 && s === engines[0]) turns3++
            input = [...input, ...out.sequences[0]!.tokens, ...observation(k + e + turn)]
          }
        }))
      }))
    }
    for (let step = 0; step < steps; step++) {
      const adapter = turnTrainer.publish()
      for (let i = 0; i < names.length; i++) {
        const e = (i + step) % names.length
        engines[e]!.setAdapter(adapter)
        const t0 = performance.now()
        await play(engines[e]!, step)
        // the first step warms up
        if (step > 0) times[e]!.push((performance.now() - t0) / 1000)
      }
    }
    const runs: Record<string, { seconds: number; stats: SamplerStats }> = Object.fromEntries(
      names.map((n, i) => [n, { seconds: median(times[i]!), stats: { ...engines[i]!.stats } }]),
    )
    engines.forEach((s) => s.dispose())
    return { runs, turns3: turns3 / steps }
  }
  const hitLine = (r: { stats: SamplerStats }) =>
    `${r.stats.prefixHits} whole-prompt hits, ${r.stats.partialHits} partial hits of ${r.stats.prefixMisses} prefills, ${r.stats.reusedTokens} prompt tokens reused vs ${r.stats.prefilledTokens} prefilled`
  const narrowSteps = 9
  const narrow = await collect({ reuse: {}, whole: { prefixCacheSize: 0 } }, 8, narrowSteps)
  console.log(
    `runner pattern (publish, then 8 groups x 8 episodes x 3 turns, ${narrow.turns3.toFixed(0)} third turns per step; ${narrowSteps} steps, the first a warm-up), default LRU (256 entries): ${hitLine(narrow.runs["reuse"]!)}; ` +
      `step ${(narrow.runs["reuse"]!.seconds * 1000).toFixed(0)} ms vs ${(narrow.runs["whole"]!.seconds * 1000).toFixed(0)} ms with every prompt prefilled whole: ${(narrow.runs["whole"]!.seconds / narrow.runs["reuse"]!.seconds).toFixed(2)}x`,
  )
  // twice the episodes in flight: the LRU must hold about two entries per episode
  const wideSteps = 7
  const wide = await collect({ reuse: {}, small: { prefixCacheSize: 64 }, whole: { prefixCacheSize: 0 } }, 16, wideSteps)
  console.log(
    `  16 groups x 8 episodes in flight (${wideSteps} steps): default LRU ${hitLine(wide.runs["reuse"]!)}, step ${(wide.runs["reuse"]!.seconds * 1000).toFixed(0)} ms; ` +
      `a 64-entry LRU ${hitLine(wide.runs["small"]!)}, step ${(wide.runs["small"]!.seconds * 1000).toFixed(0)} ms; every prompt prefilled whole ${(wide.runs["whole"]!.seconds * 1000).toFixed(0)} ms`,
  )
  turnTrainer.dispose()
  turnModel.dispose()
}
console.log(`tensors alive at the end: ${tf.memory().numTensors}`)
trainer.dispose()
model.dispose()

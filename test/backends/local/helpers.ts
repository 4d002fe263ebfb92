/**
 * Shared fixtures for the embedded backend tests: a tiny model and random data.
 */
import { type Datum, float32, int64, modelInputFromTokens } from "../../../src/contract/Contract.ts"
import { initTf } from "../../../src/backends/local/index.ts"
import { initBase, LocalModel, type LoraConfig, type ModelConfig } from "../../../src/backends/local/Model.ts"
import { Rng } from "../../../src/backends/local/Rng.ts"
import { LocalSamplerEngine, type SamplerEngineOptions } from "../../../src/backends/local/SamplerEngine.ts"
import { LocalTrainerEngine } from "../../../src/backends/local/TrainerEngine.ts"

export const tinyConfig: ModelConfig = { vocabSize: 99, contextLength: 32, nLayers: 2, dModel: 32, nHeads: 2, mlpRatio: 2 }
export const tinyLora: LoraConfig = { rank: 4, alpha: 8, targets: ["q", "k", "v", "o", "w1", "w2"] }

export const makeEngines = async (options: { seed?: number; sampler?: SamplerEngineOptions; randomB?: boolean } = {}) => {
  await initTf()
  const seed = options.seed ?? 1
  const model = new LocalModel(tinyConfig, initBase(tinyConfig, seed))
  const trainer = new LocalTrainerEngine(model, { lora: tinyLora, seed: seed + 1 })
  if (options.randomB) {
    // a non-trivial adapter so that both A and B get gradients
    const rng = new Rng(seed + 7)
    const w = trainer.params
    for (const [k, a] of Object.entries(w)) if (k.endsWith(".B")) for (let i = 0; i < a.length; i++) a[i] = rng.normal() * 0.3
    trainer.invalidate()
  }
  const sampler = new LocalSamplerEngine(model, { seed: seed + 2, ...options.sampler })
  return { model, trainer, sampler }
}

/** random token ids in the printable range */
export const randomTokens = (rng: Rng, n: number) => Array.from({ length: n }, () => 4 + rng.int(95))

/** an RL datum: prompt positions inactive, completion positions with advantage adv (some zeroed) */
export const rlDatum = (rng: Rng, P: number, T: number, options: { zeroSome?: boolean } = {}): Datum => {
  const tokens = [1, ...randomTokens(rng, P + T - 1)]
  const L = tokens.length
  const adv = rng.normal()
  const advantages = tokens.map((_, i) => (i < P ? 0 : options.zeroSome && rng.next() < 0.25 ? 0 : adv + 0.1 * rng.normal()))
  const logprobs = tokens.map((_, i) => (i < P ? 0 : -4.6 + 0.8 * rng.normal()))
  void L
  return { modelInput: modelInputFromTokens(tokens), lossFnInputs: { logprobs: float32(logprobs), advantages: float32(advantages) } }
}

export const ceDatum = (rng: Rng, P: number, T: number, options: { weights?: boolean } = {}): Datum => {
  const tokens = [1, ...randomTokens(rng, P + T - 1)]
  const target = tokens.map((t, i) => (i < P ? -100 : t))
  const inputs: Record<string, ReturnType<typeof float32>> = { target_tokens: int64(target) }
  if (options.weights) inputs["weights"] = float32(tokens.map(() => (rng.next() < 0.2 ? 0 : rng.next() * 2)))
  return { modelInput: modelInputFromTokens(tokens), lossFnInputs: inputs }
}

export const adam = { learningRate: 1e-2, beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0, gradClipNorm: 0 }

export const maxAbsDiff = (a: ReadonlyArray<number>, b: ReadonlyArray<number>) => {
  if (a.length !== b.length) return Infinity
  let m = 0
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!))
  return m
}

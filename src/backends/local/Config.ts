/**
 * The embedded transformer's configuration and weights as plain data: the model and
 * adapter configs and their checks, the shape of every weight, seeded initialisation,
 * and the FLOPs of a forward pass.
 *
 * @since 0.1.0
 */
import { at } from "../../util/Lookup.ts"
import { Rng } from "./Rng.ts"

/** @since 0.1.0 @category models */
export interface ModelConfig {
  readonly vocabSize: number
  readonly contextLength: number
  readonly nLayers: number
  readonly dModel: number
  readonly nHeads: number
  /** MLP hidden width = mlpRatio * dModel */
  readonly mlpRatio: number
}

/** @since 0.1.0 @category models */
export type LoraTarget = "q" | "k" | "v" | "o" | "w1" | "w2"

/** @since 0.1.0 @category models */
export const LORA_TARGETS: ReadonlyArray<LoraTarget> = ["q", "k", "v", "o", "w1", "w2"]

/** @since 0.1.0 @category models */
export interface LoraConfig {
  readonly rank: number
  readonly alpha: number
  readonly targets: ReadonlyArray<LoraTarget>
}

/** Named flat float32 arrays. @since 0.1.0 @category models */
export type Weights = Record<string, Float32Array>

/** Named shapes. @since 0.1.0 @category models */
export type Shapes = Record<string, ReadonlyArray<number>>

/** @since 0.1.0 @category models */
export const defaultLora: LoraConfig = { rank: 8, alpha: 16, targets: LORA_TARGETS }

const mlpWidth = (c: ModelConfig) => Math.round(c.mlpRatio * c.dModel)

/** Checks a config for consistency; returns an error message or undefined. @since 0.1.0 @category combinators */
export const checkConfig = (c: ModelConfig): string | undefined => {
  const ints: Array<keyof ModelConfig> = ["vocabSize", "contextLength", "nLayers", "dModel", "nHeads"]
  for (const k of ints) if (!Number.isInteger(c[k]) || c[k] < 1) return `model config ${k} must be a positive integer`
  if (!(c.mlpRatio > 0)) return "model config mlpRatio must be positive"
  if (c.dModel % c.nHeads !== 0) return `model config dModel (${c.dModel}) must be divisible by nHeads (${c.nHeads})`
  return undefined
}

/** @since 0.1.0 @category combinators */
export const checkLora = (l: LoraConfig): string | undefined => {
  if (!Number.isInteger(l.rank) || l.rank < 1) return "lora rank must be a positive integer"
  if (!Number.isFinite(l.alpha)) return "lora alpha must be finite"
  if (l.targets.length === 0) return "lora targets must not be empty"
  for (const t of l.targets) if (!LORA_TARGETS.includes(t)) return `unknown lora target ${t}; allowed: ${LORA_TARGETS.join(", ")}`
  return undefined
}

/** Shapes of the base weights. @since 0.1.0 @category combinators */
export const baseShapes = (c: ModelConfig): Shapes => {
  const D = c.dModel
  const M = mlpWidth(c)
  const s: Record<string, Array<number>> = {
    tok_emb: [c.vocabSize, D],
    pos_emb: [c.contextLength, D],
  }
  for (let i = 0; i < c.nLayers; i++) {
    s[`l${i}.ln1.g`] = [D]
    s[`l${i}.ln1.b`] = [D]
    s[`l${i}.q`] = [D, D]
    s[`l${i}.k`] = [D, D]
    s[`l${i}.v`] = [D, D]
    s[`l${i}.o`] = [D, D]
    s[`l${i}.ln2.g`] = [D]
    s[`l${i}.ln2.b`] = [D]
    s[`l${i}.w1`] = [D, M]
    s[`l${i}.w2`] = [M, D]
  }
  s["ln_f.g"] = [D]
  s["ln_f.b"] = [D]
  s["head"] = [D, c.vocabSize]
  return s
}

/** Shapes of the LoRA adapter: `<proj>.A` [in, r] and `<proj>.B` [r, out]. @since 0.1.0 @category combinators */
export const loraShapes = (c: ModelConfig, l: LoraConfig): Shapes => {
  const base = baseShapes(c)
  const s: Record<string, Array<number>> = {}
  for (let i = 0; i < c.nLayers; i++) {
    for (const t of LORA_TARGETS) {
      if (!l.targets.includes(t)) continue
      const [din, dout] = base[`l${i}.${t}`] as [number, number]
      s[`l${i}.${t}.A`] = [din, l.rank]
      s[`l${i}.${t}.B`] = [l.rank, dout]
    }
  }
  return s
}

/** @since 0.1.0 @category combinators */
export const sizeOf = (shape: ReadonlyArray<number>) => shape.reduce((a, b) => a * b, 1)

/** @since 0.1.0 @category combinators */
export const countParams = (shapes: Shapes) => Object.values(shapes).reduce((a, s) => a + sizeOf(s), 0)

/** Random base weights (fan-in normal init; residual projections scaled by 1/sqrt(2·layers)). @since 0.1.0 @category constructors */
export const initBase = (c: ModelConfig, seed: number): Weights => {
  const rng = new Rng(seed)
  const shapes = baseShapes(c)
  const w: Weights = {}
  const resid = 1 / Math.sqrt(2 * c.nLayers)
  for (const [name, shape] of Object.entries(shapes)) {
    const n = sizeOf(shape)
    const a = new Float32Array(n)
    if (name.endsWith(".g")) a.fill(1)
    else if (name.endsWith(".b")) a.fill(0)
    else {
      let std = 1 / Math.sqrt(at(shape, 0, `the input size of ${name}`))
      if (name === "tok_emb" || name === "pos_emb") std = 1 / Math.sqrt(c.dModel)
      if (name.endsWith(".o") || name.endsWith(".w2")) std *= resid
      for (let i = 0; i < n; i++) a[i] = rng.normal() * std
    }
    w[name] = a
  }
  return w
}

/** A fresh adapter: A ~ N(0, 1/in), B = 0 (so the adapted model equals the base). @since 0.1.0 @category constructors */
export const initLora = (c: ModelConfig, l: LoraConfig, seed: number): Weights => {
  const rng = new Rng(seed)
  const w: Weights = {}
  for (const [name, shape] of Object.entries(loraShapes(c, l))) {
    const a = new Float32Array(sizeOf(shape))
    if (name.endsWith(".A")) {
      const std = 1 / Math.sqrt(at(shape, 0, `the input size of ${name}`))
      for (let i = 0; i < a.length; i++) a[i] = rng.normal() * std
    }
    w[name] = a
  }
  return w
}

/** Copies every array. @since 0.1.0 @category combinators */
export const cloneWeights = (w: Weights): Weights => {
  const out: Weights = {}
  for (const [k, v] of Object.entries(w)) out[k] = v.slice()
  return out
}

/**
 * Matmul FLOPs of one forward pass over B rows of length L (dense layers and
 * attention; elementwise work is not counted).
 * @since 0.1.0 @category combinators
 */
export const forwardFlops = (c: ModelConfig, B: number, L: number): { dense: number; attention: number } => {
  const D = c.dModel
  const M = mlpWidth(c)
  const N = B * L
  const perLayerDense = 2 * N * (4 * D * D + 2 * D * M)
  const perLayerAtt = 2 * 2 * B * L * L * D
  return { dense: c.nLayers * perLayerDense + 2 * N * D * c.vocabSize, attention: c.nLayers * perLayerAtt }
}

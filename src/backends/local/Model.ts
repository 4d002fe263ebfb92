/**
 * The embedded causal transformer: learned absolute position embeddings, pre-LN
 * blocks with separate q/k/v projections, GELU (x·sigmoid(1.702x)) MLP, LoRA
 * adapters on a frozen base, and a KV cache for sampling.
 *
 * Written for the tfjs wasm backend: every dense layer is a 2-D non-transposed
 * `matMul` wrapped in `tf.customGrad` with explicit transposes (frozen weights
 * keep a cached transpose and return only dX), transposes stay at rank 4 and
 * embeddings are `oneHot · matMul`.
 *
 * @since 0.1.0
 */
import * as tf from "@tensorflow/tfjs"
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
      let std = 1 / Math.sqrt(shape[0]!)
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
      const std = 1 / Math.sqrt(shape[0]!)
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

// ---------------------------------------------------------------------------
// dense layers with wasm-friendly gradients
// ---------------------------------------------------------------------------

type GradArgs = Array<tf.Tensor | tf.GradSaveFunc>

/** x @ W with both inputs differentiable; dX = dY·Wᵀ, dW = Xᵀ·dY with explicit transposes. */
const linearTrainable = tf.customGrad(((...args: GradArgs) => {
  const x = args[0] as tf.Tensor2D
  const w = args[1] as tf.Tensor2D
  const save = args[2] as tf.GradSaveFunc
  save([x, w])
  return {
    value: tf.matMul(x, w),
    gradFunc: (dy: tf.Tensor, saved: Array<tf.Tensor>) => {
      const [sx, sw] = saved as [tf.Tensor2D, tf.Tensor2D]
      const g = dy as tf.Tensor2D
      // dW = Xᵀ·dY or (dYᵀ·X)ᵀ: XNNPACK repacks its right operand on every call, which costs
      // more than a transpose, so the wider of X and dY is transposed and the narrower packed
      const dw = g.shape[1] <= sx.shape[1] ? tf.matMul(tf.transpose(sx), g) : tf.transpose(tf.matMul(tf.transpose(g), sx))
      return [tf.matMul(g, tf.transpose(sw)), dw]
    },
  }
}) as (...args: GradArgs) => { value: tf.Tensor; gradFunc: (dy: tf.Tensor, saved: Array<tf.Tensor>) => Array<tf.Tensor> }) as (
  x: tf.Tensor2D,
  w: tf.Tensor2D,
) => tf.Tensor2D

/** x @ W for a frozen W: only dX = dY·Wᵀ, with Wᵀ computed once. */
const linearFrozen = (x: tf.Tensor2D, w: tf.Tensor2D, wT: tf.Tensor2D): tf.Tensor2D =>
  (tf.customGrad(((...args: GradArgs) => {
    const xi = args[0] as tf.Tensor2D
    return {
      value: tf.matMul(xi, w),
      gradFunc: (dy: tf.Tensor) => [tf.matMul(dy as tf.Tensor2D, wT)],
    }
  }) as (...args: GradArgs) => { value: tf.Tensor; gradFunc: (dy: tf.Tensor) => Array<tf.Tensor> }) as (x: tf.Tensor2D) => tf.Tensor2D)(x)

const gelu = (x: tf.Tensor): tf.Tensor => tf.mul(x, tf.sigmoid(tf.mul(x, 1.702)))

const layerNorm = (x: tf.Tensor2D, g: tf.Tensor, b: tf.Tensor): tf.Tensor2D => {
  const mu = tf.mean(x, -1, true)
  const xc = tf.sub(x, mu)
  const variance = tf.mean(tf.mul(xc, xc), -1, true)
  return tf.add(tf.mul(tf.mul(xc, tf.rsqrt(tf.add(variance, 1e-5))), g), b) as tf.Tensor2D
}

/**
 * How the forward pass reads its weights: `lin(name, x)` applies the projection
 * `name` (with its adapter, if any), `get(name)` returns a plain weight.
 * @since 0.1.0 @category models
 */
export interface WeightView {
  readonly lin: (name: string, x: tf.Tensor2D) => tf.Tensor2D
  readonly get: (name: string) => tf.Tensor
}

/** @since 0.1.0 @category models */
export type TensorMap = Record<string, tf.Tensor>

/** Every weight trainable (full fine-tuning / pretraining). @since 0.1.0 @category constructors */
export const trainableView = (t: TensorMap): WeightView => ({
  lin: (name, x) => linearTrainable(x, t[name] as tf.Tensor2D),
  get: (name) => t[name]!,
})

/** Plain matMul, no gradients needed (sampling with merged weights). @since 0.1.0 @category constructors */
export const inferenceView = (t: TensorMap): WeightView => ({
  lin: (name, x) => tf.matMul(x, t[name] as tf.Tensor2D),
  get: (name) => t[name]!,
})

// ---------------------------------------------------------------------------
// the model
// ---------------------------------------------------------------------------

/** Per-layer K and V, each [R, H, T, dh]. @since 0.1.0 @category models */
export interface KvCache {
  readonly k: Array<tf.Tensor4D>
  readonly v: Array<tf.Tensor4D>
  readonly length: number
}

/** @since 0.1.0 @category combinators */
export const disposeCache = (c: KvCache) => {
  for (const t of c.k) t.dispose()
  for (const t of c.v) t.dispose()
}

/**
 * A model: config, frozen base tensors (with cached transposes) and the forward
 * passes. Trainer and sampler engines each hold one.
 * @since 0.1.0 @category models
 */
export class LocalModel {
  readonly base: TensorMap = {}
  private readonly baseT: Record<string, tf.Tensor2D> = {}
  private readonly masks = new Map<number, tf.Tensor2D>()

  constructor(
    readonly config: ModelConfig,
    readonly baseWeights: Weights,
  ) {
    const err = checkConfig(config)
    if (err) throw new Error(err)
    const shapes = baseShapes(config)
    for (const [name, shape] of Object.entries(shapes)) {
      const data = baseWeights[name]
      if (!data) throw new Error(`base weights miss ${name}`)
      if (data.length !== sizeOf(shape)) throw new Error(`base weight ${name} has ${data.length} values, expected ${sizeOf(shape)}`)
      this.base[name] = tf.keep(tf.tensor(data, [...shape], "float32"))
    }
    for (const name of this.projectionNames()) {
      this.baseT[name] = tf.keep(tf.transpose(this.base[name] as tf.Tensor2D))
    }
  }

  get headDim() {
    return this.config.dModel / this.config.nHeads
  }

  /** names of every dense projection (the LoRA-able ones plus the output head) */
  projectionNames(): Array<string> {
    const out: Array<string> = []
    for (let i = 0; i < this.config.nLayers; i++) for (const t of LORA_TARGETS) out.push(`l${i}.${t}`)
    out.push("head")
    return out
  }

  /**
   * Frozen base plus (optionally) a trainable adapter: y = x·W + (alpha/r)·(x·A)·B.
   * Gradients flow to the adapter tensors only.
   */
  frozenView(lora?: { readonly tensors: TensorMap; readonly scale: number }): WeightView {
    return {
      lin: (name, x) => {
        const wT = this.baseT[name]
        // the token embedding's input (a one-hot) never needs a gradient
        const y: tf.Tensor2D = wT ? linearFrozen(x, this.base[name] as tf.Tensor2D, wT) : tf.matMul(x, this.base[name] as tf.Tensor2D)
        const a = lora?.tensors[`${name}.A`]
        if (!a || !lora) return y
        const b = lora.tensors[`${name}.B`] as tf.Tensor2D
        const h = linearTrainable(x, a as tf.Tensor2D)
        return tf.add(y, tf.mul(linearTrainable(h, b), lora.scale)) as tf.Tensor2D
      },
      get: (name) => this.base[name]!,
    }
  }

  /** Base weights with the adapter merged in: W' = W + (alpha/r)·A·B (caller owns the tensors). */
  mergedTensors(lora: TensorMap | undefined, scale: number): TensorMap {
    const out: TensorMap = { ...this.base }
    if (!lora) return out
    for (const name of this.projectionNames()) {
      const a = lora[`${name}.A`]
      const b = lora[`${name}.B`]
      if (!a || !b) continue
      out[name] = tf.tidy(() => tf.add(this.base[name]!, tf.mul(tf.matMul(a as tf.Tensor2D, b as tf.Tensor2D), scale)))
    }
    return out
  }

  /** [L, L] additive causal mask (0 on and below the diagonal, -1e9 above), cached */
  private causalMask(L: number): tf.Tensor2D {
    let m = this.masks.get(L)
    if (!m) {
      const data = new Float32Array(L * L)
      for (let i = 0; i < L; i++) for (let j = i + 1; j < L; j++) data[i * L + j] = -1e9
      m = tf.keep(tf.tensor2d(data, [L, L]))
      this.masks.set(L, m)
    }
    return m
  }

  private embed(w: WeightView, tokens: tf.Tensor1D, B: number, L: number, pos0: number): tf.Tensor2D {
    const D = this.config.dModel
    const oh = tf.oneHot(tokens, this.config.vocabSize).toFloat() as tf.Tensor2D
    const x = w.lin("tok_emb", oh)
    const pos = tf.slice(w.get("pos_emb"), [pos0, 0], [L, D])
    return tf.reshape(tf.add(tf.reshape(x, [B, L, D]), pos), [B * L, D])
  }

  /**
   * Full causal forward over right-padded rows. `tokens` is [B*L] row-major.
   * Returns logits [B*L, V]; with `collect` the per-layer K/V ([B, H, L, dh]) are
   * pushed into it (for the sampler's prompt prefill).
   */
  forward(w: WeightView, tokens: Int32Array, B: number, L: number, collect?: { k: Array<tf.Tensor4D>; v: Array<tf.Tensor4D> }): tf.Tensor2D {
    const { dModel: D, nHeads: H, nLayers } = this.config
    if (L > this.config.contextLength) throw new Error(`sequence length ${L} exceeds the context length ${this.config.contextLength}`)
    const dh = this.headDim
    const scale = 1 / Math.sqrt(dh)
    const tok = tf.tensor1d(tokens, "int32")
    let x = this.embed(w, tok, B, L, 0)
    const mask = this.causalMask(L)
    const heads = (t: tf.Tensor2D) => tf.transpose(tf.reshape(t, [B, L, H, dh]), [0, 2, 1, 3]) as tf.Tensor4D
    for (let i = 0; i < nLayers; i++) {
      const p = `l${i}.`
      const h = layerNorm(x, w.get(p + "ln1.g"), w.get(p + "ln1.b"))
      const q = heads(tf.mul(w.lin(p + "q", h), scale) as tf.Tensor2D)
      const k = heads(w.lin(p + "k", h))
      const v = heads(w.lin(p + "v", h))
      if (collect) {
        collect.k.push(k)
        collect.v.push(v)
      }
      const scores = tf.add(tf.matMul(q, k, false, true), mask)
      const att = tf.matMul(tf.softmax(scores), v)
      const merged = tf.reshape(tf.transpose(att, [0, 2, 1, 3]), [B * L, D]) as tf.Tensor2D
      x = tf.add(x, w.lin(p + "o", merged)) as tf.Tensor2D
      const h2 = layerNorm(x, w.get(p + "ln2.g"), w.get(p + "ln2.b"))
      x = tf.add(x, w.lin(p + "w2", gelu(w.lin(p + "w1", h2)) as tf.Tensor2D)) as tf.Tensor2D
    }
    const hf = layerNorm(x, w.get("ln_f.g"), w.get("ln_f.b"))
    return w.lin("head", hf)
  }

  /**
   * A chunked prefill that continues from cached K/V: `tokens` is [B*E] row-major, the
   * E new tokens of each row at positions `past.length` .. `past.length + E - 1`, attending
   * to the row's `past` K/V ([B, H, past.length, dh] per layer) and causally to each other.
   * Returns the logits [B*E, V] of the new positions and the K/V of every position
   * ([B, H, past.length + E, dh] per layer; the caller owns them). `past` is left alone.
   * With an empty past this is `forward` with `collect`.
   */
  extend(w: WeightView, tokens: Int32Array, B: number, E: number, past: KvCache): { logits: tf.Tensor2D; cache: KvCache } {
    const { dModel: D, nHeads: H, nLayers } = this.config
    const pos0 = past.length
    if (pos0 + E > this.config.contextLength) throw new Error(`sequence length ${pos0 + E} exceeds the context length ${this.config.contextLength}`)
    if (tokens.length !== B * E) throw new Error(`extend: ${tokens.length} tokens for ${B} rows of ${E}`)
    const k: Array<tf.Tensor4D> = []
    const v: Array<tf.Tensor4D> = []
    if (pos0 === 0) {
      const logits = tf.tidy(() => {
        const l = this.forward(w, tokens, B, E, { k, v })
        k.forEach((t) => tf.keep(t))
        v.forEach((t) => tf.keep(t))
        return l
      })
      return { logits, cache: { k, v, length: E } }
    }
    const dh = this.headDim
    const scale = 1 / Math.sqrt(dh)
    const logits = tf.tidy(() => {
      let x = this.embed(w, tf.tensor1d(tokens, "int32"), B, E, pos0)
      // rows pos0 .. pos0 + E - 1 of the causal mask over every position
      const mask = tf.slice(this.causalMask(pos0 + E), [pos0, 0], [E, pos0 + E])
      const heads = (t: tf.Tensor2D) => tf.transpose(tf.reshape(t, [B, E, H, dh]), [0, 2, 1, 3]) as tf.Tensor4D
      for (let i = 0; i < nLayers; i++) {
        const p = `l${i}.`
        const h = layerNorm(x, w.get(p + "ln1.g"), w.get(p + "ln1.b"))
        const q = heads(tf.mul(w.lin(p + "q", h), scale) as tf.Tensor2D)
        const ki = tf.keep(tf.concat([past.k[i]!, heads(w.lin(p + "k", h))], 2))
        const vi = tf.keep(tf.concat([past.v[i]!, heads(w.lin(p + "v", h))], 2))
        k.push(ki)
        v.push(vi)
        const scores = tf.add(tf.matMul(q, ki, false, true), mask)
        const att = tf.matMul(tf.softmax(scores), vi)
        const merged = tf.reshape(tf.transpose(att, [0, 2, 1, 3]), [B * E, D]) as tf.Tensor2D
        x = tf.add(x, w.lin(p + "o", merged)) as tf.Tensor2D
        const h2 = layerNorm(x, w.get(p + "ln2.g"), w.get(p + "ln2.b"))
        x = tf.add(x, w.lin(p + "w2", gelu(w.lin(p + "w1", h2)) as tf.Tensor2D)) as tf.Tensor2D
      }
      return w.lin("head", layerNorm(x, w.get("ln_f.g"), w.get("ln_f.b")))
    })
    return { logits, cache: { k, v, length: pos0 + E } }
  }

  /**
   * One decoding step with a KV cache: `tokens` [R] at position `cache.length`.
   * Returns the logits [R, V] and the extended cache (the old one is disposed).
   */
  decode(w: WeightView, tokens: Int32Array, cache: KvCache): { logits: tf.Tensor2D; cache: KvCache } {
    const { dModel: D, nHeads: H, nLayers } = this.config
    const R = tokens.length
    const dh = this.headDim
    const pos = cache.length
    if (pos >= this.config.contextLength) throw new Error("decode past the context length")
    const newK: Array<tf.Tensor4D> = []
    const newV: Array<tf.Tensor4D> = []
    const logits = tf.tidy(() => {
      let x = this.embed(w, tf.tensor1d(tokens, "int32"), R, 1, pos)
      for (let i = 0; i < nLayers; i++) {
        const p = `l${i}.`
        const h = layerNorm(x, w.get(p + "ln1.g"), w.get(p + "ln1.b"))
        const q = tf.reshape(tf.mul(w.lin(p + "q", h), 1 / Math.sqrt(dh)), [R, H, 1, dh]) as tf.Tensor4D
        const k = tf.concat([cache.k[i]!, tf.reshape(w.lin(p + "k", h), [R, H, 1, dh]) as tf.Tensor4D], 2)
        const v = tf.concat([cache.v[i]!, tf.reshape(w.lin(p + "v", h), [R, H, 1, dh]) as tf.Tensor4D], 2)
        newK.push(tf.keep(k))
        newV.push(tf.keep(v))
        const att = tf.matMul(tf.softmax(tf.matMul(q, k, false, true)), v)
        x = tf.add(x, w.lin(p + "o", tf.reshape(att, [R, D]) as tf.Tensor2D)) as tf.Tensor2D
        const h2 = layerNorm(x, w.get(p + "ln2.g"), w.get(p + "ln2.b"))
        x = tf.add(x, w.lin(p + "w2", gelu(w.lin(p + "w1", h2)) as tf.Tensor2D)) as tf.Tensor2D
      }
      return w.lin("head", layerNorm(x, w.get("ln_f.g"), w.get("ln_f.b")))
    })
    disposeCache(cache)
    return { logits, cache: { k: newK, v: newV, length: pos + 1 } }
  }

  dispose() {
    for (const t of Object.values(this.base)) t.dispose()
    for (const t of Object.values(this.baseT)) t.dispose()
    for (const t of this.masks.values()) t.dispose()
    this.masks.clear()
  }
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

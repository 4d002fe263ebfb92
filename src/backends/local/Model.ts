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
import { gelu, layerNorm, linearFrozen, linearTrainable, type TensorMap, weightOf, type WeightView } from "./Layers.ts"
import { at } from "../../util/Lookup.ts"
import { baseShapes, checkConfig, LORA_TARGETS, type ModelConfig, sizeOf, type Weights } from "./Config.ts"

export { baseShapes, checkConfig, checkLora, cloneWeights, countParams, defaultLora, forwardFlops, initBase, initLora, LORA_TARGETS, type LoraConfig, loraShapes, type LoraTarget, type ModelConfig, type Shapes, sizeOf, type Weights } from "./Config.ts"
export { inferenceView, type TensorMap, trainableView, type WeightView } from "./Layers.ts"

// ---------------------------------------------------------------------------
// the model
// ---------------------------------------------------------------------------

/** How a block's attention lays out its rows, masks, and finds the K/V it attends to. */
interface Attention {
  /** rows [N, D] as heads [B, H, T, dh] */
  readonly heads: (t: tf.Tensor2D) => tf.Tensor4D
  /** attention output [B, H, T, dh] back to rows [N, D] */
  readonly merge: (att: tf.Tensor4D) => tf.Tensor2D
  /** additive mask over the scores [T, S], if any */
  readonly mask?: tf.Tensor2D
  /** layer `i`'s K and V to attend to, given the new positions' own (e.g. after a cache) */
  readonly kv: (i: number, k: tf.Tensor4D, v: tf.Tensor4D) => readonly [tf.Tensor4D, tf.Tensor4D]
}

/**
 * A blocks' K/V hook that continues from cached K/V: layer i's new keys and values are
 * appended to `past`'s along the positions, kept (they outlive the step) and pushed to `into`.
 */
const appendKv =
  (past: { readonly k: ReadonlyArray<tf.Tensor4D>; readonly v: ReadonlyArray<tf.Tensor4D> }, into: { readonly k: Array<tf.Tensor4D>; readonly v: Array<tf.Tensor4D> }) =>
  (i: number, ki: tf.Tensor4D, vi: tf.Tensor4D): readonly [tf.Tensor4D, tf.Tensor4D] => {
    const kc = tf.keep(tf.concat([at(past.k, i, "a cached layer's keys"), ki], 2))
    const vc = tf.keep(tf.concat([at(past.v, i, "a cached layer's values"), vi], 2))
    into.k.push(kc)
    into.v.push(vc)
    return [kc, vc]
  }

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
      this.baseT[name] = tf.keep(tf.transpose(weightOf(this.base, name) as tf.Tensor2D))
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
        const w = weightOf(this.base, name) as tf.Tensor2D
        const y: tf.Tensor2D = wT ? linearFrozen(x, w, wT) : tf.matMul(x, w)
        const a = lora?.tensors[`${name}.A`]
        if (!a || !lora) return y
        // an adapter has both halves of every projection it adapts
        const b = weightOf(lora.tensors, `${name}.B`) as tf.Tensor2D
        const h = linearTrainable(x, a as tf.Tensor2D)
        return tf.add(y, tf.mul(linearTrainable(h, b), lora.scale)) as tf.Tensor2D
      },
      get: (name) => weightOf(this.base, name),
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
      out[name] = tf.tidy(() => tf.add(weightOf(this.base, name), tf.mul(tf.matMul(a as tf.Tensor2D, b as tf.Tensor2D), scale)))
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
   * One pre-LN block, layer `i`, over the rows `x` ([N, D]): causal self-attention, then
   * the GELU MLP, each added to the residual stream. `a` says how rows become heads and
   * back, the mask, and which K/V the new positions attend to.
   */
  private block(w: WeightView, i: number, x: tf.Tensor2D, a: Attention): tf.Tensor2D {
    const p = `l${i}.`
    const h = layerNorm(x, w.get(p + "ln1.g"), w.get(p + "ln1.b"))
    const q = a.heads(tf.mul(w.lin(p + "q", h), 1 / Math.sqrt(this.headDim)) as tf.Tensor2D)
    const [k, v] = a.kv(i, a.heads(w.lin(p + "k", h)), a.heads(w.lin(p + "v", h)))
    const qk = tf.matMul(q, k, false, true)
    const att = tf.matMul(tf.softmax(a.mask ? tf.add(qk, a.mask) : qk), v) as tf.Tensor4D
    const y = tf.add(x, w.lin(p + "o", a.merge(att))) as tf.Tensor2D
    const h2 = layerNorm(y, w.get(p + "ln2.g"), w.get(p + "ln2.b"))
    return tf.add(y, w.lin(p + "w2", gelu(w.lin(p + "w1", h2)) as tf.Tensor2D)) as tf.Tensor2D
  }

  /** Every block, then the final norm and the output head: logits [N, V]. */
  private blocks(w: WeightView, x: tf.Tensor2D, a: Attention): tf.Tensor2D {
    let y = x
    for (let i = 0; i < this.config.nLayers; i++) y = this.block(w, i, y, a)
    return w.lin("head", layerNorm(y, w.get("ln_f.g"), w.get("ln_f.b")))
  }

  /** Rows of B sequences of T positions as heads [B, H, T, dh], and back to [B·T, D]. */
  private layout(B: number, T: number): Pick<Attention, "heads" | "merge"> {
    const { dModel: D, nHeads: H } = this.config
    const dh = this.headDim
    return {
      heads: (t) => tf.transpose(tf.reshape(t, [B, T, H, dh]), [0, 2, 1, 3]) as tf.Tensor4D,
      merge: (att) => tf.reshape(tf.transpose(att, [0, 2, 1, 3]), [B * T, D]) as tf.Tensor2D,
    }
  }

  /**
   * Full causal forward over right-padded rows. `tokens` is [B*L] row-major.
   * Returns logits [B*L, V]; with `collect` the per-layer K/V ([B, H, L, dh]) are
   * pushed into it (for the sampler's prompt prefill).
   */
  forward(w: WeightView, tokens: Int32Array, B: number, L: number, collect?: { k: Array<tf.Tensor4D>; v: Array<tf.Tensor4D> }): tf.Tensor2D {
    if (L > this.config.contextLength) throw new Error(`sequence length ${L} exceeds the context length ${this.config.contextLength}`)
    const x = this.embed(w, tf.tensor1d(tokens, "int32"), B, L, 0)
    return this.blocks(w, x, {
      ...this.layout(B, L),
      mask: this.causalMask(L),
      kv: (_, k, v) => {
        if (collect) {
          collect.k.push(k)
          collect.v.push(v)
        }
        return [k, v]
      },
    })
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
    const logits = tf.tidy(() =>
      this.blocks(w, this.embed(w, tf.tensor1d(tokens, "int32"), B, E, pos0), {
        ...this.layout(B, E),
        // rows pos0 .. pos0 + E - 1 of the causal mask over every position
        mask: tf.slice(this.causalMask(pos0 + E), [pos0, 0], [E, pos0 + E]),
        kv: appendKv(past, { k, v }),
      })
    )
    return { logits, cache: { k, v, length: pos0 + E } }
  }

  /**
   * One decoding step with a KV cache: `tokens` [R] at position `cache.length`.
   * Returns the logits [R, V] and the extended cache (the old one is disposed).
   */
  decode(w: WeightView, tokens: Int32Array, cache: KvCache): { logits: tf.Tensor2D; cache: KvCache } {
    const { dModel: D, nHeads: H } = this.config
    const R = tokens.length
    const dh = this.headDim
    const pos = cache.length
    if (pos >= this.config.contextLength) throw new Error("decode past the context length")
    const newK: Array<tf.Tensor4D> = []
    const newV: Array<tf.Tensor4D> = []
    const logits = tf.tidy(() =>
      this.blocks(w, this.embed(w, tf.tensor1d(tokens, "int32"), R, 1, pos), {
        // one position per row: heads are a reshape, and it sees every cached position
        heads: (t) => tf.reshape(t, [R, H, 1, dh]) as tf.Tensor4D,
        merge: (att) => tf.reshape(att, [R, D]) as tf.Tensor2D,
        kv: appendKv(cache, { k: newK, v: newV }),
      })
    )
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

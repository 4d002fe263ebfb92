/**
 * The numeric core of the embedded trainer, as a plain class: forward(-backward)
 * with the built-in losses, gradient accumulation, Adam, adapter export and state
 * files. The Effect services in `index.ts` wrap it.
 *
 * How a loss is backpropagated: the forward pass yields logits; the log-probs, the
 * loss and `dloss/dlp` per position are computed in TypeScript (`src/Loss.ts`), then
 * the gradient `dloss/dlogits = dlp·(onehot - softmax)` is pushed back through the
 * network as the cotangent of the logits.
 *
 * @since 0.1.0
 */
import * as tf from "@tensorflow/tfjs"
import type { AdamParams, Datum, ForwardBackwardResult, LossFnOutput, OptimStepResult, TopK } from "../../Contract.ts"
import { modelInputTokens } from "../../Contract.ts"
import { activeCount } from "../../Datum.ts"
import { isActive, isClipped, type ResolvedLoss, tokenLoss } from "../../Loss.ts"
import { type AdamState, adamStep, initAdam } from "./Adam.ts"
import * as Checkpoint from "./Checkpoint.ts"
import { NonFiniteError } from "./Errors.ts"
import { PAD } from "./CharTokenizer.ts"
import { rowLse } from "./LogSoftmax.ts"
import {
  type LocalModel,
  type LoraConfig,
  type Shapes,
  type TensorMap,
  type WeightView,
  type Weights,
  baseShapes,
  cloneWeights,
  initLora,
  loraShapes,
  trainableView,
} from "./Model.ts"

const allFinite = (w: Weights): boolean => {
  for (const a of Object.values(w)) for (let i = 0; i < a.length; i++) if (!Number.isFinite(a[i]!)) return false
  return true
}

/** The adapter as published to a sampler. @since 0.1.0 @category models */
export interface PublishedAdapter {
  readonly version: number
  readonly scale: number
  readonly weights: Weights
}

/** @since 0.1.0 @category models */
export interface TrainerEngineOptions {
  /** "lora" trains an adapter on the frozen base; "full" trains every base weight (pretraining) */
  readonly mode?: "lora" | "full"
  readonly lora?: LoraConfig
  readonly seed?: number
  /** most padded tokens (rows x longest row) per forward pass; longer calls are split */
  readonly maxBatchTokens?: number
}

interface Prepared {
  readonly index: number
  readonly tokens: Array<number>
  /** per position (length L): target id or -100, sampler logprob, advantage, weight */
  readonly target: Array<number>
  readonly q: ArrayLike<number> | undefined
  readonly adv: ArrayLike<number> | undefined
  readonly weight: ArrayLike<number> | undefined
}

/** @since 0.1.0 @category models */
export class LocalTrainerEngine {
  readonly mode: "lora" | "full"
  readonly lora: LoraConfig | undefined
  readonly shapes: Shapes
  /** the trainable weights (adapter, or every base weight in "full" mode) */
  params: Weights
  grads: Weights
  adam: AdamState
  /** number of optimizer steps applied */
  version = 0
  private tensors: TensorMap | undefined = undefined
  private readonly maxBatchTokens: number
  /** a deferred call's gradient, until `commit` or `discard` */
  private deferred: Weights | undefined = undefined

  constructor(
    readonly model: LocalModel,
    options: TrainerEngineOptions = {},
  ) {
    this.mode = options.mode ?? "lora"
    this.maxBatchTokens = options.maxBatchTokens ?? 8192
    if (this.mode === "lora") {
      const lora = options.lora
      if (!lora) throw new Error("lora mode needs a LoraConfig")
      this.lora = lora
      this.shapes = loraShapes(model.config, lora)
      this.params = initLora(model.config, lora, options.seed ?? 0)
    } else {
      this.lora = undefined
      this.shapes = baseShapes(model.config)
      this.params = cloneWeights(model.baseWeights)
    }
    this.grads = this.zeros()
    this.adam = initAdam(this.params)
  }

  get scale(): number {
    return this.lora ? this.lora.alpha / this.lora.rank : 1
  }

  private zeros(): Weights {
    const g: Weights = {}
    for (const [k, p] of Object.entries(this.params)) g[k] = new Float32Array(p.length)
    return g
  }

  /** tensors of the current params, created on first use after a change */
  private paramTensors(): TensorMap {
    if (!this.tensors) {
      const t: TensorMap = {}
      for (const [k, p] of Object.entries(this.params)) t[k] = tf.keep(tf.tensor(p, [...this.shapes[k]!], "float32"))
      this.tensors = t
    }
    return this.tensors
  }

  /** call after changing `params` in place */
  invalidate() {
    if (this.tensors) for (const t of Object.values(this.tensors)) t.dispose()
    this.tensors = undefined
  }

  private view(t: TensorMap): WeightView {
    return this.mode === "lora" ? this.model.frozenView({ tensors: t, scale: this.scale }) : trainableView(t)
  }

  /** Replaces the trainable weights (tests, state loading). */
  setParams(w: Weights) {
    for (const [k, p] of Object.entries(this.params)) {
      const src = w[k]
      if (!src || src.length !== p.length) throw new Error(`weights for ${k} are missing or have the wrong size`)
      p.set(src)
    }
    this.invalidate()
  }

  /** Accumulated gradients (a copy). */
  gradients(): Weights {
    return cloneWeights(this.grads)
  }

  zeroGrad() {
    for (const g of Object.values(this.grads)) g.fill(0)
  }

  /**
   * Runs the loss over `data` (already validated). With `backward` the gradient
   * of the pooled mean loss is added to the buffer. `denominator` replaces this
   * call's active-position count as the pool size (when a call is split across
   * engines, each part is divided by the whole call's count).
   *
   * A non-finite loss term or gradient throws `NonFiniteError` naming the datum and
   * position, and the buffer stays as it was. With `defer` the call's gradient is held
   * until `commit()` (or dropped by `discard()`), so a call split across engines is added
   * everywhere or nowhere.
   */
  run(
    data: ReadonlyArray<Datum>,
    loss: ResolvedLoss,
    options: { readonly backward: boolean; readonly topK?: number; readonly denominator?: number; readonly defer?: boolean },
  ): ForwardBackwardResult {
    this.discard()
    const V = this.model.config.vocabSize
    const prepared: Array<Prepared> = data.map((d, index) => {
      const tokens = modelInputTokens(d.modelInput)
      const inputs = d.lossFnInputs
      const target = inputs["target_tokens"] ? inputs["target_tokens"].data.map((x) => x) : tokens.slice()
      return {
        index,
        tokens,
        target,
        q: inputs["logprobs"]?.data,
        adv: inputs["advantages"]?.data,
        weight: inputs["weights"]?.data,
      }
    })
    // pooled denominator over the whole call
    const active = activeCount(data, loss.lossFn)
    const pool = options.denominator ?? active
    const outputs: Array<LossFnOutput> = new Array(data.length)
    const callGrads = options.backward ? this.zeros() : undefined
    let lossSum = 0
    let clipped = 0
    // micro-batches of similar lengths
    const order = prepared.slice().sort((a, b) => a.tokens.length - b.tokens.length)
    const chunks: Array<Array<Prepared>> = []
    let cur: Array<Prepared> = []
    for (const p of order) {
      const L = Math.max(p.tokens.length, ...cur.map((c) => c.tokens.length))
      if (cur.length > 0 && (cur.length + 1) * L > this.maxBatchTokens) {
        chunks.push(cur)
        cur = []
      }
      cur.push(p)
    }
    if (cur.length > 0) chunks.push(cur)

    for (const chunk of chunks) {
      const B = chunk.length
      const L = Math.max(...chunk.map((c) => c.tokens.length))
      const tok = new Int32Array(B * L).fill(PAD)
      chunk.forEach((c, b) => c.tokens.forEach((t, i) => (tok[b * L + i] = t)))
      let chunkActive = 0
      for (const c of chunk) {
        for (let i = 1; i < c.tokens.length; i++) {
          if (isActive(loss.lossFn, i, c.target[i]!, c.weight ? c.weight[i]! : 1, c.adv ? c.adv[i]! : 0)) chunkActive++
        }
      }
      const doBackward = options.backward && chunkActive > 0
      // consumes the logits values: per-datum logprobs, loss, and (for backward) dloss/dlogits
      const evaluate = (logits: Float32Array): Float32Array | undefined => {
        const dlogits = doBackward ? new Float32Array(B * L * V) : undefined
        chunk.forEach((c, b) => {
          const Lb = c.tokens.length
          const lps = new Array<number>(Lb).fill(0)
          const topK: Array<TopK> = []
          for (let i = 1; i < Lb; i++) {
            const tgt = c.target[i]!
            if (tgt === -100) continue
            const off = (b * L + i - 1) * V
            const lse = rowLse(logits, off, V)
            const lp = logits[off + tgt]! - lse
            lps[i] = lp
            const w = c.weight ? c.weight[i]! : 1
            const A = c.adv ? c.adv[i]! : 0
            if (!isActive(loss.lossFn, i, tgt, w, A)) continue
            const q = c.q ? c.q[i]! : 0
            const t = tokenLoss(loss, lp, q, A, w)
            if (!Number.isFinite(t.loss) || !Number.isFinite(Math.fround(t.dlp / pool))) {
              throw new NonFiniteError(
                `data[${c.index}] position ${i}: the ${loss.lossFn} loss is ${t.loss} with gradient ${t.dlp / pool} ` +
                  `(lossFnInputs.advantages[${i}] = ${A}, lossFnInputs.logprobs[${i}] = ${q}, learner logprob ${lp}); nothing was applied`,
              )
            }
            lossSum += t.loss
            if (isClipped(loss, lp, q, A)) clipped++
            if (options.topK && options.topK > 0) topK.push(topKAt(logits, off, V, lse, options.topK, i))
            if (dlogits && t.dlp !== 0) {
              const coef = t.dlp / pool
              for (let v = 0; v < V; v++) dlogits[off + v] = -coef * Math.exp(logits[off + v]! - lse)
              dlogits[off + tgt] = dlogits[off + tgt]! + coef
            }
          }
          outputs[c.index] = options.topK && options.topK > 0 ? { logprobs: lps, topK } : { logprobs: lps }
        })
        return dlogits
      }
      if (!doBackward) {
        const logits = tf.tidy(() => this.model.forward(this.view(this.paramTensors()), tok, B, L))
        const vals = logits.dataSync() as Float32Array
        logits.dispose()
        evaluate(vals)
        continue
      }
      const params = this.paramTensors()
      const names = Object.keys(params)
      const xs = names.map((n) => params[n]!)
      const grads = tf.tidy(() => {
        const { grads: g } = tf.valueAndGrads(() => {
          const logits = this.model.forward(this.view(params), tok, B, L)
          const dl = evaluate(logits.dataSync() as Float32Array)!
          return tf.sum(tf.mul(logits, tf.tensor2d(dl, [B * L, V])))
        })(xs)
        return g
      })
      grads.forEach((g, j) => {
        const acc = callGrads![names[j]!]!
        const vals = g.dataSync()
        for (let i = 0; i < acc.length; i++) acc[i] = acc[i]! + vals[i]!
        g.dispose()
      })
    }
    if (callGrads) {
      if (!allFinite(callGrads)) {
        throw new NonFiniteError(`the gradient of data[0..${data.length - 1}] is not finite (every loss term was); nothing was applied`)
      }
      if (options.defer) this.deferred = callGrads
      else this.addGrads(callGrads)
    }
    const metrics: Record<string, number> = {
      loss: active > 0 ? lossSum / active : 0,
      "loss:sum": lossSum,
      active_tokens: active,
    }
    if (loss.lossFn === "ppo" || loss.lossFn === "cispo" || loss.lossFn === "dppo") metrics["clip_fraction"] = active > 0 ? clipped / active : 0
    return { lossFnOutputs: outputs, metrics }
  }

  /** Adds a deferred call's gradient to the buffer. */
  commit() {
    if (this.deferred) this.addGrads(this.deferred)
    this.deferred = undefined
  }

  /** Drops a deferred call's gradient. */
  discard() {
    this.deferred = undefined
  }

  /** Adds gradients to the buffer (a worker's share of a split call, say). */
  addGrads(g: Weights) {
    for (const [k, acc] of Object.entries(this.grads)) {
      const src = g[k]
      if (!src || src.length !== acc.length) throw new Error(`gradient ${k} is missing or has the wrong size`)
      for (let i = 0; i < acc.length; i++) acc[i] = acc[i]! + src[i]!
    }
  }

  /**
   * Applies the accumulated gradients, clears them and bumps the version.
   *
   * A refused step (a non-finite gradient norm, or an update that overflows float32)
   * throws `NonFiniteError` and leaves weights, optimizer moments and version as they
   * were, but drops the accumulated gradient: kept, it would refuse every later step
   * too. The next `forward_backward` + `optim_step` trains on fresh gradients.
   */
  optimStep(hp: AdamParams): OptimStepResult {
    let gradNorm: number
    try {
      gradNorm = adamStep(this.params, this.grads, this.adam, hp).gradNorm
    } catch (e) {
      if (!(e instanceof NonFiniteError)) throw e
      this.zeroGrad()
      throw new NonFiniteError(`${e.message}; the accumulated gradient was dropped, so the next forward_backward starts afresh`)
    }
    this.invalidate()
    this.zeroGrad()
    this.version += 1
    return { version: this.version, metrics: { grad_norm: gradNorm, learning_rate: hp.learningRate, step: this.version } }
  }

  /** A copy of the adapter for a sampler. */
  publish(): PublishedAdapter {
    return { version: this.version, scale: this.scale, weights: cloneWeights(this.params) }
  }

  async saveState(file: string): Promise<void> {
    const tensors: Weights = {}
    const shapes: Record<string, ReadonlyArray<number>> = {}
    for (const [k, p] of Object.entries(this.params)) {
      tensors[`param/${k}`] = p
      tensors[`adam_m/${k}`] = this.adam.m[k]!
      tensors[`adam_v/${k}`] = this.adam.v[k]!
      shapes[`param/${k}`] = shapes[`adam_m/${k}`] = shapes[`adam_v/${k}`] = this.shapes[k]!
    }
    await Checkpoint.write(
      file,
      { kind: "trainer-state", mode: this.mode, lora: this.lora ?? null, version: this.version, adamStep: this.adam.t },
      tensors,
      shapes,
    )
  }

  async loadState(file: string, withOptimizer: boolean): Promise<void> {
    const ck = await Checkpoint.read(file)
    if (ck.meta["kind"] !== "trainer-state") throw new Error(`${file} is not a trainer state file`)
    if (ck.meta["mode"] !== this.mode) throw new Error(`${file} holds ${String(ck.meta["mode"])} weights; this trainer trains ${this.mode}`)
    const params: Weights = {}
    for (const [k, p] of Object.entries(this.params)) {
      const src = ck.tensors[`param/${k}`]
      if (!src || src.length !== p.length) throw new Error(`${file}: ${k} is missing or has the wrong size (is the LoRA config the same?)`)
      params[k] = src
    }
    this.setParams(params)
    if (withOptimizer) {
      for (const k of Object.keys(this.params)) {
        this.adam.m[k]!.set(ck.tensors[`adam_m/${k}`]!)
        this.adam.v[k]!.set(ck.tensors[`adam_v/${k}`]!)
      }
      this.adam.t = Number(ck.meta["adamStep"] ?? 0)
    } else {
      for (const k of Object.keys(this.params)) {
        this.adam.m[k]!.fill(0)
        this.adam.v[k]!.fill(0)
      }
      this.adam.t = 0
    }
    this.version = Number(ck.meta["version"] ?? 0)
    this.zeroGrad()
  }

  dispose() {
    this.invalidate()
  }
}

const topKAt = (logits: Float32Array, off: number, V: number, lse: number, k: number, position: number): TopK => {
  const idx = Array.from({ length: V }, (_, v) => v)
  idx.sort((a, b) => logits[off + b]! - logits[off + a]! || a - b)
  const tokens = idx.slice(0, Math.min(k, V))
  return { position, tokens, logprobs: tokens.map((t) => logits[off + t]! - lse) }
}

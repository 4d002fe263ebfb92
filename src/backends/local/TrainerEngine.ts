/**
 * The numeric core of the embedded trainer, as a plain class: forward(-backward)
 * with the built-in losses, gradient accumulation, Adam, adapter export and state
 * files. The Effect services in `index.ts` wrap it.
 *
 * How a loss is backpropagated: the forward pass yields logits; the log-probs, the
 * loss and `dloss/dlp` per position are computed in TypeScript (`src/loss/Loss.ts`), then
 * the gradient `dloss/dlogits = dlp·(onehot - softmax)` is pushed back through the
 * network as the cotangent of the logits.
 *
 * @since 0.1.0
 */
import * as tf from "@tensorflow/tfjs"
import type { AdamParams, Datum, ForwardBackwardResult, OptimStepResult } from "../../contract/Contract.ts"
import { activeCount } from "../../loss/Loss.ts"
import { canClip, type ResolvedLoss } from "../../loss/Loss.ts"
import { type AdamState, adamStep, initAdam } from "./Adam.ts"
import * as Checkpoint from "./Checkpoint.ts"
import { NonFiniteError } from "./Errors.ts"
import { PAD } from "./CharTokenizer.ts"
import { activeIn, type CallTotals, chunksOf, evaluateChunk, prepare } from "./ChunkLoss.ts"
import { present } from "../../util/Lookup.ts"
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
  /** most padded tokens (rows x longest row) per forward pass; longer calls are split (default `batchTokensFor` the vocabulary) */
  readonly maxBatchTokens?: number
}

/** Logits one forward pass may hold: a pass keeps several copies of them (logits, dloss/dlogits, their product). */
const LOGITS_PER_PASS = 2 ** 24

/**
 * Padded tokens per forward pass for a vocabulary: 8,192 for the char models, fewer for a
 * real tokenizer's (110 for Qwen3's 151,669 ids), so the logits fit WebAssembly's memory.
 * @since 0.1.0 @category combinators
 */
export const batchTokensFor = (vocabSize: number): number => Math.max(1, Math.min(8192, Math.floor(LOGITS_PER_PASS / vocabSize)))

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
    this.maxBatchTokens = options.maxBatchTokens ?? batchTokensFor(model.config.vocabSize)
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
      for (const [k, p] of Object.entries(this.params)) t[k] = tf.keep(tf.tensor(p, [...this.shapeOf(k)], "float32"))
      this.tensors = t
    }
    return this.tensors
  }

  private shapeOf(k: string): ReadonlyArray<number> {
    return present(this.shapes[k], `the shape of weight ${k}`)
  }

  /** weight `k`'s optimizer moments */
  private momentsOf(k: string): { readonly m: Float32Array; readonly v: Float32Array } {
    return { m: present(this.adam.m[k], `the first moment of ${k}`), v: present(this.adam.v[k], `the second moment of ${k}`) }
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
    const prepared = data.map(prepare)
    // pooled denominator over the whole call
    const active = activeCount(data, loss.lossFn)
    const pool = options.denominator ?? active
    const totals: CallTotals = { outputs: new Array(data.length), lossSum: 0, clipped: 0 }
    const callGrads = options.backward ? this.zeros() : undefined
    for (const chunk of chunksOf(prepared, this.maxBatchTokens)) {
      const B = chunk.length
      const L = Math.max(...chunk.map((c) => c.tokens.length))
      const tok = new Int32Array(B * L).fill(PAD)
      chunk.forEach((c, b) => c.tokens.forEach((t, i) => (tok[b * L + i] = t)))
      const doBackward = callGrads !== undefined && activeIn(chunk, loss) > 0
      // consumes the logits values: per-datum logprobs, loss, and (for backward) dloss/dlogits
      const evaluate = (logits: Float32Array) =>
        evaluateChunk(chunk, L, V, logits, loss, { pool, backward: doBackward, ...(options.topK === undefined ? {} : { topK: options.topK }) }, totals)
      if (!doBackward) {
        const logits = tf.tidy(() => this.model.forward(this.view(this.paramTensors()), tok, B, L))
        const vals = logits.dataSync() as Float32Array
        logits.dispose()
        evaluate(vals)
        continue
      }
      const params = this.paramTensors()
      const named = Object.entries(params)
      const xs = named.map(([, t]) => t)
      const grads = tf.tidy(() => {
        const { grads: g } = tf.valueAndGrads(() => {
          const logits = this.model.forward(this.view(params), tok, B, L)
          const dl = present(evaluate(logits.dataSync() as Float32Array), "dloss/dlogits of a backward pass")
          return tf.sum(tf.mul(logits, tf.tensor2d(dl, [B * L, V])))
        })(xs)
        return g
      })
      // one gradient per input, in the order of `xs`
      named.forEach(([name], j) => {
        const g = present(grads[j], `the gradient of ${name}`)
        const acc = present(callGrads[name], `the gradient buffer of ${name}`)
        const vals = g.dataSync()
        if (vals.length !== acc.length) throw new Error(`the gradient of ${name} has ${vals.length} values for ${acc.length} weights`)
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
    const { outputs, lossSum, clipped } = totals
    const metrics: Record<string, number> = {
      loss: active > 0 ? lossSum / active : 0,
      "loss:sum": lossSum,
      active_tokens: active,
    }
    if (canClip(loss)) metrics["clip_fraction"] = active > 0 ? clipped / active : 0
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
   *
   * An update whose weights are finite but whose forward pass is not (a learning rate of
   * 1e20 makes adapter weights of 1e20, whose product overflows float32) is checked on a
   * short probe sequence and refused the same way, restoring the weights and moments; the
   * gradient is kept, since a smaller learning rate can still apply it.
   */
  optimStep(hp: AdamParams): OptimStepResult {
    const before = { params: cloneWeights(this.params), m: cloneWeights(this.adam.m), v: cloneWeights(this.adam.v), t: this.adam.t }
    let gradNorm: number
    try {
      gradNorm = adamStep(this.params, this.grads, this.adam, hp).gradNorm
    } catch (e) {
      if (!(e instanceof NonFiniteError)) throw e
      this.zeroGrad()
      throw new NonFiniteError(`${e.message}; the accumulated gradient was dropped, so the next forward_backward starts afresh`)
    }
    this.invalidate()
    // finite weights can still overflow the forward pass (an adapter of 1e20 squared): check before keeping them
    const probe = this.probeForward()
    if (probe !== undefined) {
      this.setParams(before.params)
      for (const k of Object.keys(before.m)) {
        const { m, v } = this.momentsOf(k)
        m.set(present(before.m[k], `the first moment of ${k}`))
        v.set(present(before.v[k], `the second moment of ${k}`))
      }
      this.adam.t = before.t
      throw new NonFiniteError(
        `the learning rate ${hp.learningRate >= 1e6 ? hp.learningRate.toExponential() : hp.learningRate} made the weights non-finite (after the step the forward pass gives ${probe}); the step was refused and the weights are kept as they were, ` +
          `and so is the accumulated gradient: send optim_step again with a smaller learning rate`,
      )
    }
    this.zeroGrad()
    this.version += 1
    return { version: this.version, metrics: { grad_norm: gradNorm, learning_rate: hp.learningRate, step: this.version } }
  }

  /** The first non-finite logit of a forward pass over a short fixed sequence, or undefined when all are finite. */
  private probeForward(): number | undefined {
    const { vocabSize: V, contextLength } = this.model.config
    const L = Math.max(1, Math.min(16, contextLength))
    // a few tokens spread over the vocabulary
    const tok = Int32Array.from({ length: L }, (_, i) => (1 + i * 7) % V)
    const logits = tf.tidy(() => this.model.forward(this.view(this.paramTensors()), tok, 1, L))
    const values = logits.dataSync() as Float32Array
    logits.dispose()
    return values.find((x) => !Number.isFinite(x))
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
      const { m, v } = this.momentsOf(k)
      tensors[`adam_m/${k}`] = m
      tensors[`adam_v/${k}`] = v
      shapes[`param/${k}`] = shapes[`adam_m/${k}`] = shapes[`adam_v/${k}`] = this.shapeOf(k)
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
    // every tensor is read and checked before any is applied: a file that fails leaves the trainer as it was
    const params: Weights = {}
    const moments: Record<string, { readonly m: Float32Array; readonly v: Float32Array }> = {}
    for (const [k, p] of Object.entries(this.params)) {
      params[k] = stateOf(ck, `param/${k}`, k, p.length, file)
      if (withOptimizer) moments[k] = { m: stateOf(ck, `adam_m/${k}`, `adam_m/${k}`, p.length, file), v: stateOf(ck, `adam_v/${k}`, `adam_v/${k}`, p.length, file) }
    }
    this.setParams(params)
    if (withOptimizer) {
      for (const [k, read] of Object.entries(moments)) {
        const { m, v } = this.momentsOf(k)
        m.set(read.m)
        v.set(read.v)
      }
      this.adam.t = Number(ck.meta["adamStep"] ?? 0)
    } else {
      for (const k of Object.keys(this.params)) {
        const { m, v } = this.momentsOf(k)
        m.fill(0)
        v.fill(0)
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

/** The state file's tensor `name` (called `label` in the error), which must hold `size` values. */
const stateOf = (ck: Checkpoint.CheckpointFile, name: string, label: string, size: number, file: string): Float32Array => {
  const src = ck.tensors[name]
  if (!src || src.length !== size) throw new Error(`${file}: ${label} is missing or has the wrong size (is the LoRA config the same?)`)
  return src
}

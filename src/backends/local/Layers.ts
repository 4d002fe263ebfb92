/**
 * The dense layers of the embedded transformer, written for the tfjs wasm backend (every
 * dense layer a 2-D non-transposed `matMul` in `tf.customGrad` with explicit transposes;
 * frozen weights keep a cached transpose and return only dX), and the views through which
 * the forward pass reads its weights.
 *
 * @since 0.1.0
 */
import * as tf from "@tensorflow/tfjs"

// ---------------------------------------------------------------------------
// dense layers with wasm-friendly gradients
// ---------------------------------------------------------------------------

type GradArgs = Array<tf.Tensor | tf.GradSaveFunc>

/** x @ W with both inputs differentiable; dX = dY·Wᵀ, dW = Xᵀ·dY with explicit transposes. */
/** @internal */
export const linearTrainable = tf.customGrad(((...args: GradArgs) => {
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
/** @internal */
export const linearFrozen = (x: tf.Tensor2D, w: tf.Tensor2D, wT: tf.Tensor2D): tf.Tensor2D =>
  (tf.customGrad(((...args: GradArgs) => {
    const xi = args[0] as tf.Tensor2D
    return {
      value: tf.matMul(xi, w),
      gradFunc: (dy: tf.Tensor) => [tf.matMul(dy as tf.Tensor2D, wT)],
    }
  }) as (...args: GradArgs) => { value: tf.Tensor; gradFunc: (dy: tf.Tensor) => Array<tf.Tensor> }) as (x: tf.Tensor2D) => tf.Tensor2D)(x)

/** @internal */
export const gelu = (x: tf.Tensor): tf.Tensor => tf.mul(x, tf.sigmoid(tf.mul(x, 1.702)))

/** @internal */
export const layerNorm = (x: tf.Tensor2D, g: tf.Tensor, b: tf.Tensor): tf.Tensor2D => {
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

/** The weight `name` of `t`; a name the model does not have is a bug in the forward pass. @since 0.1.0 @category combinators */
export const weightOf = (t: TensorMap, name: string): tf.Tensor => {
  const w = t[name]
  if (!w) throw new Error(`weight ${name} is missing`)
  return w
}

/** Every weight trainable (full fine-tuning / pretraining). @since 0.1.0 @category constructors */
export const trainableView = (t: TensorMap): WeightView => ({
  lin: (name, x) => linearTrainable(x, weightOf(t, name) as tf.Tensor2D),
  get: (name) => weightOf(t, name),
})

/** Plain matMul, no gradients needed (sampling with merged weights). @since 0.1.0 @category constructors */
export const inferenceView = (t: TensorMap): WeightView => ({
  lin: (name, x) => tf.matMul(x, weightOf(t, name) as tf.Tensor2D),
  get: (name) => weightOf(t, name),
})

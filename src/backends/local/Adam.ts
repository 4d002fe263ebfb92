/**
 * Adam with decoupled weight decay and global-norm gradient clipping, on plain
 * Float32Arrays (the adapter is small; this keeps optimizer state trivially
 * serialisable and bit-for-bit reproducible).
 *
 * @since 0.1.0
 */
import type { AdamParams } from "../../contract/Contract.ts"
import { NonFiniteError } from "./Errors.ts"
import type { Weights } from "./Model.ts"

/** @since 0.1.0 @category models */
export interface AdamState {
  readonly m: Weights
  readonly v: Weights
  /** number of steps taken */
  t: number
}

/** @since 0.1.0 @category constructors */
export const initAdam = (params: Weights): AdamState => {
  const m: Weights = {}
  const v: Weights = {}
  for (const [k, p] of Object.entries(params)) {
    m[k] = new Float32Array(p.length)
    v[k] = new Float32Array(p.length)
  }
  return { m, v, t: 0 }
}

/** Global L2 norm of a set of arrays. @since 0.1.0 @category combinators */
export const globalNorm = (w: Weights): number => {
  let s = 0
  for (const a of Object.values(w)) for (let i = 0; i < a.length; i++) s += a[i]! * a[i]!
  return Math.sqrt(s)
}

/**
 * One update, in place. Returns the gradient norm before clipping. A gradient whose
 * norm is not finite (NaN, or an overflow) throws before anything changes: the clip
 * cannot repair it, and applying it would poison every weight.
 * @since 0.1.0 @category combinators
 */
export const adamStep = (params: Weights, grads: Weights, state: AdamState, hp: AdamParams): { readonly gradNorm: number } => {
  const gradNorm = globalNorm(grads)
  if (!Number.isFinite(gradNorm)) throw new NonFiniteError(`the gradient norm is ${gradNorm}; the optimizer step was not applied`)
  const clip = hp.gradClipNorm > 0 && gradNorm > hp.gradClipNorm ? hp.gradClipNorm / gradNorm : 1
  const t = state.t + 1
  const { beta1: b1, beta2: b2, eps, learningRate: lr, weightDecay: wd } = hp
  const c1 = 1 - Math.pow(b1, t)
  const c2 = 1 - Math.pow(b2, t)
  const decay = 1 - lr * wd
  const update = (write: boolean) => {
    for (const [k, p] of Object.entries(params)) {
      const g = grads[k]
      const m = state.m[k]
      const v = state.v[k]
      if (!g || !m || !v) throw new Error(`optimizer state misses ${k}`)
      // the loop below reads all four at every index of p
      if (g.length !== p.length || m.length !== p.length || v.length !== p.length) throw new Error(`the gradient or optimizer state of ${k} has the wrong size`)
      for (let i = 0; i < p.length; i++) {
        const gi = g[i]! * clip
        const mi = b1 * m[i]! + (1 - b1) * gi
        const vi = b2 * v[i]! + (1 - b2) * gi * gi
        const pi = p[i]! * decay - (lr * (mi / c1)) / (Math.sqrt(vi / c2) + eps)
        if (write) {
          m[i] = mi
          v[i] = vi
          p[i] = pi
        } else if (!Number.isFinite(Math.fround(vi)) || !Number.isFinite(Math.fround(pi))) {
          // e.g. an unclipped gradient of 1e20: its square overflows the float32 moment
          throw new NonFiniteError(`${k}[${i}]: the update overflows float32 (gradient ${gi}); the optimizer step was not applied`)
        }
      }
    }
  }
  // check everything first, so a refused step leaves weights and moments as they were
  update(false)
  update(true)
  state.t = t
  return { gradNorm }
}

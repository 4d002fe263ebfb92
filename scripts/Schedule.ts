/**
 * The optimizer settings the shipped base models were pretrained with, and their learning
 * rate schedule: linear warmup over `warmupSteps`, constant, then linear decay to 0 over
 * the last `decayFraction` of the budget.
 */
import type { AdamParams } from "../src/contract/Contract.ts"

export const PRETRAIN_OPTIMIZER = {
  batchSize: 32,
  learningRate: 3e-3,
  warmupSteps: 30,
  decayFraction: 0.3,
  beta1: 0.9,
  beta2: 0.99,
  eps: 1e-8,
  gradClipNorm: 1,
}

export type PretrainOptimizer = typeof PRETRAIN_OPTIMIZER

/** Adam's settings for step `step` (1-based), with `before` the fraction of the budget spent before it. */
export const adamAt = (o: PretrainOptimizer, step: number, before: number): AdamParams => {
  const decay = Math.max(0, Math.min(1, (1 - before) / o.decayFraction))
  const lr = o.learningRate * Math.min(1, step / o.warmupSteps) * decay
  return { learningRate: lr, beta1: o.beta1, beta2: o.beta2, eps: o.eps, weightDecay: 0, gradClipNorm: o.gradClipNorm }
}

/**
 * Log-softmax of logits rows in float64, shared by the trainer and the sampler so
 * that both compute a token's log-prob with exactly the same arithmetic.
 *
 * @since 0.1.0
 */

/** log Σ exp(row) of `logits[off .. off+V)`. @since 0.1.0 @category combinators */
export const rowLse = (logits: Float32Array, off: number, V: number): number => {
  let m = -Infinity
  for (let v = 0; v < V; v++) if (logits[off + v]! > m) m = logits[off + v]!
  let s = 0
  for (let v = 0; v < V; v++) s += Math.exp(logits[off + v]! - m)
  return m + Math.log(s)
}

/** log-softmax of one row at `token`. @since 0.1.0 @category combinators */
export const logprobAt = (logits: Float32Array, off: number, V: number, token: number): number => logits[off + token]! - rowLse(logits, off, V)

/**
 * The per-row sampling math of the embedded sampler: one token drawn from a logits row
 * under temperature, top-k and top-p, with its log-prob under the distribution actually
 * sampled from. Kept apart from the engine because it is pure arithmetic on one row (no
 * model, no batching, no cache) and is tested on its own against designed logits.
 *
 * @since 0.1.0
 */
import type { SamplingParams } from "../../contract/Contract.ts"
import { rowLse } from "./LogSoftmax.ts"
import type { Rng } from "./Rng.ts"

/**
 * Draws one token from a logits row under temperature / top-k / top-p and returns
 * its log-prob under that (renormalised) distribution:
 *
 * - q = softmax(logits / T);
 * - top-k keeps the `topK` most probable tokens under q (0: no limit; ties: lower id);
 * - top-p keeps the smallest set of most probable tokens whose mass under q reaches
 *   `topP` (the token that crosses `topP` is kept; the most probable token always is);
 * - both filters are measured on q itself, so the kept set is their intersection (top-p
 *   is not recomputed on the top-k renormalised distribution, as vLLM and Hugging Face
 *   do; the two differ only when both filters are set and top-p cuts inside the top k);
 * - the token is drawn from q restricted to the kept set and renormalised, and the
 *   returned logprob is log of that probability, not the model's log-softmax.
 *
 * Temperature 0 is greedy (the first maximal logit) and reports logprob 0.
 * @since 0.1.0 @category combinators
 */
export const sampleRow = (logits: Float32Array, off: number, V: number, params: SamplingParams, rng: Rng): { token: number; logprob: number } => {
  if (params.temperature === 0) {
    let best = 0
    for (let v = 1; v < V; v++) if (logits[off + v]! > logits[off + best]!) best = v
    return { token: best, logprob: 0 }
  }
  const T = params.temperature
  const topK = params.topK ?? 0
  const topP = params.topP ?? 1
  if (T === 1 && (topK === 0 || topK >= V) && topP >= 1) {
    // plain softmax: the trainer's arithmetic
    const lse = rowLse(logits, off, V)
    const u = rng.next()
    let acc = 0
    let token = V - 1
    for (let v = 0; v < V; v++) {
      acc += Math.exp(logits[off + v]! - lse)
      if (u < acc) {
        token = v
        break
      }
    }
    return { token, logprob: logits[off + token]! - lse }
  }
  const z = new Float64Array(V)
  let m = -Infinity
  for (let v = 0; v < V; v++) {
    z[v] = logits[off + v]! / T
    if (z[v]! > m) m = z[v]!
  }
  const p = new Float64Array(V)
  for (let v = 0; v < V; v++) p[v] = Math.exp(z[v]! - m)
  const keep = new Uint8Array(V).fill(1)
  if ((topK > 0 && topK < V) || topP < 1) {
    const order = Array.from({ length: V }, (_, v) => v).sort((a, b) => p[b]! - p[a]! || a - b)
    let total = 0
    for (let v = 0; v < V; v++) total += p[v]!
    let cum = 0
    order.forEach((v, rank) => {
      const inTopK = topK === 0 || rank < topK
      const inTopP = cum < topP * total || rank === 0
      if (!inTopK || !inTopP) keep[v] = 0
      cum += p[v]!
    })
  }
  let s = 0
  for (let v = 0; v < V; v++) if (keep[v]) s += p[v]!
  const u = rng.next() * s
  let acc = 0
  let token = -1
  for (let v = 0; v < V; v++) {
    if (!keep[v]) continue
    token = v
    acc += p[v]!
    if (u < acc) break
  }
  // token >= 0: the most probable token is always kept
  return { token, logprob: z[token]! - m - Math.log(s) }
}

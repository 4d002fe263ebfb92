/**
 * A small in-memory Trainer + Sampler for the HTTP tests: a bigram model whose
 * logits table is the "adapter". It follows the Loops conventions of the contract
 * (losses and activity from `src/loss/Loss.ts`, validation from `src/vocabulary/Datum.ts`), is
 * deterministic given its seed and the sampling seeds, and counts every call, so a
 * test can tell whether an optimizer step ran twice. The log-probs it hands out are
 * rounded to float32, as a real backend's are (and as the wire carries them), so a run
 * in process and one over HTTP see the same numbers.
 */
import { Context, Effect, Layer } from "effect"
import {
  type AdamParams,
  BackendError,
  type Datum,
  type ForwardOptions,
  type LossFn,
  type ModelInput,
  modelInputTokens,
  type SampleOptions,
  type SamplingParams,
} from "../../../src/contract/Contract.ts"
import { checkAll, invalid } from "../../../src/vocabulary/Datum.ts"
import { isActive, resolveLoss, tokenLoss } from "../../../src/loss/Loss.ts"
import { Sampler, type SamplerShape } from "../../../src/services/Sampler.ts"
import { Trainer, type TrainerShape } from "../../../src/services/Trainer.ts"
import { random } from "../../../src/vocabulary/Env.ts"

export interface ToyOptions {
  readonly vocab?: number
  readonly seed?: number
  readonly modelName?: string
  readonly loraRank?: number
  readonly maxSequenceLength?: number
  /** EOS token id (ends a sample with "stop") */
  readonly eos?: number
}

export interface ToyCounters {
  forwardBackward: number
  forward: number
  optimSteps: number
  samples: number
  publishes: number
}

/** A seeded uniform [0, 1) stream (the env's PRNG). */
const seededUniform = (seed: number) => random(`seed/${seed}`).next

const logSoftmaxRow = (w: Float64Array, row: number, V: number, temperature = 1): Array<number> => {
  const xs = Array.from({ length: V }, (_, j) => w[row * V + j]! / temperature)
  const m = Math.max(...xs)
  const lse = m + Math.log(xs.reduce((s, x) => s + Math.exp(x - m), 0))
  return xs.map((x) => x - lse)
}

export interface Toy {
  readonly trainer: TrainerShape
  readonly sampler: SamplerShape
  readonly counters: ToyCounters
  /** the trained table */
  readonly weights: () => Float64Array
  readonly vocab: number
}

export const makeToy = (options: ToyOptions = {}): Toy => {
  const V = options.vocab ?? 16
  const eos = options.eos ?? 0
  const rand = seededUniform(options.seed ?? 1)
  const W = new Float64Array(V * V).map(() => (rand() - 0.5) * 0.5)
  const grad = new Float64Array(V * V)
  let version = 0
  let published = { version: 0, weights: Float64Array.from(W) }
  const states = new Map<string, { weights: Float64Array; version: number }>()
  const counters: ToyCounters = { forwardBackward: 0, forward: 0, optimSteps: 0, samples: 0, publishes: 0 }
  const maxLen = options.maxSequenceLength ?? 64

  const run = (operation: string, data: ReadonlyArray<Datum>, lossFn: LossFn, opts: ForwardOptions | undefined, accumulate: boolean) =>
    Effect.suspend(() => {
      const resolved = resolveLoss(lossFn, opts?.lossFnConfig)
      if (!resolved.ok) return Effect.fail(new BackendError({ reason: "InvalidInput", operation, message: resolved.message }))
      const issue = checkAll(data, lossFn, { vocabSize: V, maxLength: maxLen })
      if (issue !== undefined) return Effect.fail(invalid(operation, issue))
      let sum = 0
      let active = 0
      const outputs: Array<{ logprobs: Array<number> }> = []
      const contributions: Array<{ row: number; target: number; dlp: number }> = []
      for (const datum of data) {
        const x = modelInputTokens(datum.modelInput)
        const t = datum.lossFnInputs["target_tokens"]?.data
        const w = datum.lossFnInputs["weights"]?.data
        const q = datum.lossFnInputs["logprobs"]?.data
        const a = datum.lossFnInputs["advantages"]?.data
        const lps = [0]
        for (let i = 1; i < x.length; i++) {
          const target = t === undefined ? x[i]! : t[i]!
          if (target === -100) {
            lps.push(0)
            continue
          }
          const lp = logSoftmaxRow(W, x[i - 1]!, V)[target]!
          lps.push(lp)
          const weight = w?.[i] ?? 1
          const adv = a?.[i] ?? 0
          if (!isActive(lossFn, i, target, weight, adv)) continue
          const r = tokenLoss(resolved.value, lp, q?.[i] ?? 0, adv, weight)
          sum += r.loss
          active++
          contributions.push({ row: x[i - 1]!, target, dlp: r.dlp })
        }
        outputs.push({ logprobs: lps.map(Math.fround) })
      }
      if (accumulate && active > 0) {
        for (const c of contributions) {
          const lsm = logSoftmaxRow(W, c.row, V)
          for (let j = 0; j < V; j++) {
            grad[c.row * V + j] = grad[c.row * V + j]! + (c.dlp / active) * ((j === c.target ? 1 : 0) - Math.exp(lsm[j]!))
          }
        }
      }
      return Effect.succeed({ lossFnOutputs: outputs, metrics: { loss: active > 0 ? sum / active : 0, "loss:sum": sum, active_tokens: active } })
    })

  const trainer: TrainerShape = {
    forwardBackward: (data, lossFn, opts) => Effect.tap(run("forward_backward", data, lossFn, opts, true), () => Effect.sync(() => counters.forwardBackward++)),
    forward: (data, lossFn, opts) => Effect.tap(run("forward", data, lossFn, opts, false), () => Effect.sync(() => counters.forward++)),
    optimStep: (adam: AdamParams) =>
      Effect.sync(() => {
        let norm = 0
        for (let k = 0; k < W.length; k++) {
          norm += grad[k]! * grad[k]!
          W[k] = W[k]! - adam.learningRate * grad[k]!
          grad[k] = 0
        }
        version++
        counters.optimSteps++
        return { version, metrics: { grad_norm: Math.sqrt(norm), learning_rate: adam.learningRate } }
      }),
    saveWeightsForSampler: (name) =>
      Effect.sync(() => {
        published = { version, weights: Float64Array.from(W) }
        counters.publishes++
        return { version, path: `mem://sampler/${name}` }
      }),
    saveState: (name) =>
      Effect.sync(() => {
        states.set(name, { weights: Float64Array.from(W), version })
        return { path: `mem://state/${name}` }
      }),
    loadState: (path) =>
      Effect.suspend(() => {
        const s = states.get(path.replace("mem://state/", ""))
        if (s === undefined) return Effect.fail(new BackendError({ reason: "InvalidInput", operation: "load_state", message: `no state at ${path}` }))
        W.set(s.weights)
        version = s.version
        grad.fill(0)
        return Effect.void
      }),
    info: Effect.sync(() => ({
      modelName: options.modelName ?? "toy-bigram",
      loraRank: options.loraRank ?? 4,
      version,
      maxSequenceLength: maxLen,
    })),
  }

  const waitFor = (operation: string, min: number | undefined) =>
    Effect.gen(function* () {
      if (min === undefined) return
      for (let i = 0; i < 400 && published.version < min; i++) yield* Effect.sleep("5 millis")
      if (published.version < min) {
        return yield* new BackendError({ reason: "Unavailable", operation, message: `version ${min} was never published (serving ${published.version})` })
      }
    })

  const promptLps = (tokens: ReadonlyArray<number>, w: Float64Array) => tokens.map((x, i) => (i === 0 ? 0 : logSoftmaxRow(w, tokens[i - 1]!, V)[x]!))

  const sampler: SamplerShape = {
    sample: (prompt: ModelInput, params: SamplingParams, opts: SampleOptions) =>
      Effect.gen(function* () {
        yield* waitFor("sample", opts.minPolicyVersion)
        const tokens = modelInputTokens(prompt)
        if (tokens.some((t) => t < 0 || t >= V)) return yield* new BackendError({ reason: "InvalidInput", operation: "sample", message: "token outside the vocabulary" })
        counters.samples++
        const { weights, version: v } = published
        const rng = seededUniform(params.seed ?? 12345)
        const sequences = []
        for (let n = 0; n < opts.numSamples; n++) {
          const out: Array<number> = []
          const lps: Array<number> = []
          let last = tokens[tokens.length - 1]!
          let stop: "stop" | "length" = "length"
          for (let k = 0; k < params.maxTokens; k++) {
            const lsm = logSoftmaxRow(weights, last, V, params.temperature > 0 ? params.temperature : 1)
            const u = rng()
            let acc = 0
            let tok = V - 1
            for (let j = 0; j < V; j++) {
              acc += Math.exp(lsm[j]!)
              if (u < acc) {
                tok = j
                break
              }
            }
            out.push(tok)
            lps.push(lsm[tok]!)
            last = tok
            if (tok === eos) {
              stop = "stop"
              break
            }
          }
          sequences.push({ tokens: out, logprobs: lps.map(Math.fround), stopReason: stop })
        }
        return {
          sequences,
          policyVersion: v,
          ...(opts.includePromptLogprobs ? { promptLogprobs: promptLps(tokens, weights).map(Math.fround) } : {}),
        }
      }),
    computeLogprobs: (input, opts) =>
      Effect.gen(function* () {
        yield* waitFor("compute_logprobs", opts?.minPolicyVersion)
        return promptLps(modelInputTokens(input), published.weights).map(Math.fround)
      }),
    version: Effect.sync(() => published.version),
  }

  return { trainer, sampler, counters, weights: () => Float64Array.from(W), vocab: V }
}

/** The toy as a layer, with the toy itself to inspect. */
export class ToyHandle extends Context.Service<ToyHandle, Toy>()("test/ToyHandle") {}

export const toyLayer = (options: ToyOptions = {}) =>
  Layer.effectContext(
    Effect.sync(() => {
      const toy = makeToy(options)
      return Context.make(Trainer, toy.trainer).pipe(Context.add(Sampler, toy.sampler), Context.add(ToyHandle, toy))
    }),
  )

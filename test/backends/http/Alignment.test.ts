import { assert, describe, it } from "@effect/vitest"
import { Result } from "effect"
import * as fc from "fast-check"
import * as Alignment from "../../../src/backends/http/wire/Alignment.ts"
import type * as Wire from "../../../src/backends/http/wire/Wire.ts"
import { type Datum, float32, int64, type LossFn, modelInputFromTokens, modelInputTokens, type TensorData } from "../../../src/contract/Contract.ts"
import { isActive, resolveLoss, tokenLoss } from "../../../src/loss/Loss.ts"

const V = 40
const LOSSES: ReadonlyArray<LossFn> = ["cross_entropy", "importance_sampling", "ppo", "cispo", "dro", "dppo"]

const failureOf = <A>(r: Result.Result<A, string>): string => (Result.isFailure(r) ? r.failure : "(no failure)")

const get = <A, E>(r: Result.Result<A, E>): A => {
  if (Result.isFailure(r)) throw new Error(String(r.failure))
  return r.success
}

/** A gyre datum under `lossFn`, with arbitrary junk at position 0, masks and relabels. */
const gyreDatum = (lossFn: LossFn) =>
  fc.integer({ min: 2, max: 10 }).chain((L) =>
    fc
      .record({
        tokens: fc.array(fc.integer({ min: 0, max: V - 1 }), { minLength: L, maxLength: L }),
        target: fc.option(fc.array(fc.oneof(fc.constant(-100), fc.constant("same" as const), fc.integer({ min: 0, max: V - 1 })), { minLength: L, maxLength: L }), { nil: undefined }),
        weights: fc.option(fc.array(fc.constantFrom(0, 1, 0.5, 2), { minLength: L, maxLength: L }), { nil: undefined }),
        logprobs: fc.array(fc.double({ min: -8, max: 0, noNaN: true }), { minLength: L, maxLength: L }),
        advantages: fc.array(fc.oneof(fc.constant(0), fc.double({ min: -3, max: 3, noNaN: true })), { minLength: L, maxLength: L }),
        chunks: fc.integer({ min: 1, max: 3 }),
      })
      .map(({ tokens, target, weights, logprobs, advantages, chunks }): Datum => {
        const inputs: Record<string, TensorData> = {}
        if (target !== undefined) inputs["target_tokens"] = int64(target.map((t, i) => (t === "same" ? tokens[i]! : t)))
        if (weights !== undefined && lossFn === "cross_entropy") inputs["weights"] = float32(weights)
        if (lossFn !== "cross_entropy") {
          inputs["logprobs"] = float32(logprobs)
          inputs["advantages"] = float32(advantages)
        }
        // split the tokens into several chunks to check that only the tokens matter
        const size = Math.ceil(tokens.length / chunks)
        const parts = Array.from({ length: chunks }, (_, c) => tokens.slice(c * size, (c + 1) * size)).filter((p) => p.length > 0)
        return { modelInput: { chunks: parts.map((p) => ({ type: "encoded_text" as const, tokens: p })) }, lossFnInputs: inputs }
      }),
  )

const withLoss = fc.constantFrom(...LOSSES).chain((lossFn) => gyreDatum(lossFn).map((datum) => ({ lossFn, datum })))

/** A deterministic stand-in for the learner: log p(token | prefix) in (-6, 0). */
const learner = (prefix: ReadonlyArray<number>, token: number) => {
  let h = 2166136261
  for (const x of [...prefix, 7777, token]) h = Math.imul(h ^ x, 16777619) >>> 0
  return -0.01 - (h % 600) / 100
}

/** Loss sum and active count of a gyre datum under the Loops rules. */
const gyreLoss = (d: Datum, lossFn: LossFn) => {
  const resolved = resolveLoss(lossFn, undefined)
  if (!resolved.ok) throw new Error(resolved.message)
  const r = resolved.value
  const x = modelInputTokens(d.modelInput)
  const t = d.lossFnInputs["target_tokens"]?.data
  const w = d.lossFnInputs["weights"]?.data
  const q = d.lossFnInputs["logprobs"]?.data
  const a = d.lossFnInputs["advantages"]?.data
  let sum = 0
  let active = 0
  const lps: Array<number> = []
  for (let i = 0; i < x.length; i++) {
    const target = t?.[i] ?? x[i]!
    if (!isActive(lossFn, i, target, w?.[i] ?? 1, a?.[i] ?? 0)) continue
    const lp = learner(x.slice(0, i), target)
    lps.push(lp)
    sum += tokenLoss(r, lp, q?.[i] ?? 0, a?.[i] ?? 0, w?.[i] ?? 1).loss
    active++
  }
  return { sum, active, lps }
}

/** Loss sum and active count of a wire datum: position j predicts target[j] from input[0..j]. */
const wireLoss = (d: Wire.Datum, lossFn: LossFn) => {
  const resolved = resolveLoss(lossFn, undefined)
  if (!resolved.ok) throw new Error(resolved.message)
  const x = d.model_input.chunks.flatMap((c) => c.tokens)
  const t = d.loss_fn_inputs["target_tokens"]!.data
  const w = d.loss_fn_inputs["weights"]?.data
  const q = d.loss_fn_inputs["logprobs"]?.data
  const a = d.loss_fn_inputs["advantages"]?.data
  let sum = 0
  let active = 0
  const lps: Array<number> = []
  for (let j = 0; j < x.length; j++) {
    const target = t[j]!
    const weight = w?.[j] ?? 1
    const adv = a?.[j] ?? 0
    const on = target !== -100 && (lossFn === "cross_entropy" ? weight > 0 : adv !== 0)
    if (!on) continue
    const lp = learner(x.slice(0, j + 1), target)
    lps.push(lp)
    sum += tokenLoss(resolved.value, lp, q?.[j] ?? 0, adv, weight).loss
    active++
  }
  return { sum, active, lps }
}

describe("Alignment (Loops <-> Tinker)", () => {
  it("a known datum: model_input = full[:-1], target_tokens = full[1:], tensors lose position 0", () => {
    const d: Datum = {
      modelInput: modelInputFromTokens([5, 6, 7, 8]),
      lossFnInputs: { logprobs: float32([0, 0, -1, -2]), advantages: float32([0, 0, 1.5, 1.5]) },
    }
    const w = get(Alignment.datumToWire(d, "importance_sampling"))
    assert.deepStrictEqual(w.model_input.chunks[0]!.tokens, [5, 6, 7])
    assert.deepStrictEqual(w.loss_fn_inputs["target_tokens"]!.data, [6, 7, 8])
    assert.deepStrictEqual(w.loss_fn_inputs["logprobs"]!.data, [0, -1, -2])
    assert.deepStrictEqual(w.loss_fn_inputs["advantages"]!.data, [0, 1.5, 1.5])
    assert.deepStrictEqual(get(Alignment.datumFromWire(w, "importance_sampling")), d)
  })

  it("an SFT datum: -100 becomes weight 0 on the wire, and a masked position keeps its real label (weight 0) on the way back", () => {
    const d: Datum = { modelInput: modelInputFromTokens([1, 2, 3, 4]), lossFnInputs: { target_tokens: int64([-100, -100, 3, 4]) } }
    const w = get(Alignment.datumToWire(d, "cross_entropy"))
    assert.deepStrictEqual(w.loss_fn_inputs["target_tokens"]!.data, [2, 3, 4])
    assert.deepStrictEqual(w.loss_fn_inputs["weights"]!.data, [0, 1, 1])
    const back = get(Alignment.datumFromWire(w, "cross_entropy"))
    assert.deepStrictEqual(back, Alignment.canonical(d, "cross_entropy"))
    assert.deepStrictEqual(modelInputTokens(back.modelInput), [1, 2, 3, 4])
    // the label stays (its learner log-prob is reported); the zero weight keeps it out of the loss
    assert.isUndefined(back.lossFnInputs["target_tokens"])
    assert.deepStrictEqual(back.lossFnInputs["weights"]!.data, [0, 0, 1, 1])
  })

  it("a wire datum with weight 0 keeps its targets, so forward reports their log-probs", () => {
    const w: Wire.Datum = {
      model_input: { chunks: [{ type: "encoded_text", tokens: [1, 2, 3] }] },
      loss_fn_inputs: { target_tokens: { data: [2, 3, 4], dtype: "int64" }, weights: { data: [0, 0, 1], dtype: "float32" } },
    }
    const d = get(Alignment.datumFromWire(w, "cross_entropy"))
    assert.deepStrictEqual(modelInputTokens(d.modelInput), [1, 2, 3, 4])
    assert.isUndefined(d.lossFnInputs["target_tokens"])
    assert.deepStrictEqual(d.lossFnInputs["weights"]!.data, [0, 0, 0, 1])
  })

  it("a Loops-style wire datum with -100 targets decodes", () => {
    const w: Wire.Datum = {
      model_input: { chunks: [{ type: "encoded_text", tokens: [1, 2, 3] }] },
      loss_fn_inputs: { target_tokens: { data: [-100, 3, 4], dtype: "int64" } },
    }
    const d = get(Alignment.datumFromWire(w, "cross_entropy"))
    assert.deepStrictEqual(modelInputTokens(d.modelInput), [1, 2, 3, 4])
    // masked: weight 0 at the -100 position (and at position 0, which predicts nothing)
    assert.deepStrictEqual(d.lossFnInputs["weights"]!.data, [0, 0, 1, 1])
  })

  it("rejects what cannot be aligned, naming the field", () => {
    const one: Datum = { modelInput: modelInputFromTokens([1]), lossFnInputs: {} }
    assert.match(failureOf(Alignment.datumToWire(one, "cross_entropy", "data[3]")), /data\[3\]\.modelInput has 1 token/)
    const noTargets: Wire.Datum = { model_input: { chunks: [{ type: "encoded_text", tokens: [1, 2] }] }, loss_fn_inputs: {} }
    assert.match(failureOf(Alignment.datumFromWire(noTargets, "cross_entropy", "x.data[0]")), /x\.data\[0\]\.loss_fn_inputs\.target_tokens is missing/)
    const short: Wire.Datum = {
      model_input: { chunks: [{ type: "encoded_text", tokens: [1, 2] }] },
      loss_fn_inputs: { target_tokens: { data: [2, 3], dtype: "int64" }, advantages: { data: [1], dtype: "float32" } },
    }
    assert.match(failureOf(Alignment.datumFromWire(short, "ppo")), /advantages has length 1/)
  })

  it("gyre -> wire -> gyre gives the canonical datum (property)", () =>
    fc.assert(
      fc.property(withLoss, ({ lossFn, datum }) => {
        const back = get(Alignment.datumFromWire(get(Alignment.datumToWire(datum, lossFn)), lossFn))
        assert.deepStrictEqual(back, Alignment.canonical(datum, lossFn))
      }),
      { numRuns: 400 },
    ))

  it("wire -> gyre -> wire is the identity on what the client sends (property)", () =>
    fc.assert(
      fc.property(withLoss, ({ lossFn, datum }) => {
        const wire = get(Alignment.datumToWire(datum, lossFn))
        assert.deepStrictEqual(get(Alignment.datumToWire(get(Alignment.datumFromWire(wire, lossFn)), lossFn)), wire)
      }),
      { numRuns: 400 },
    ))

  it("canonical is idempotent and does not change the wire form (property)", () =>
    fc.assert(
      fc.property(withLoss, ({ lossFn, datum }) => {
        const c = Alignment.canonical(datum, lossFn)
        assert.deepStrictEqual(Alignment.canonical(c, lossFn), c)
        assert.deepStrictEqual(get(Alignment.datumToWire(c, lossFn)), get(Alignment.datumToWire(datum, lossFn)))
      }),
      { numRuns: 300 },
    ))

  it("the loss, its active positions and the learner log-probs are the same on both sides (property)", () =>
    fc.assert(
      fc.property(withLoss, ({ lossFn, datum }) => {
        const g = gyreLoss(datum, lossFn)
        const w = wireLoss(get(Alignment.datumToWire(datum, lossFn)), lossFn)
        const c = gyreLoss(Alignment.canonical(datum, lossFn), lossFn)
        assert.strictEqual(w.active, g.active)
        assert.strictEqual(c.active, g.active)
        assert.deepStrictEqual(w.lps, g.lps)
        assert.closeTo(w.sum, g.sum, 1e-9)
        assert.closeTo(c.sum, g.sum, 1e-9)
      }),
      { numRuns: 400 },
    ))

  it("any well-formed wire datum decodes with the same loss (property)", () =>
    fc.assert(
      fc.property(
        fc.constantFrom(...LOSSES),
        fc.integer({ min: 1, max: 9 }).chain((N) =>
          fc.record({
            input: fc.array(fc.integer({ min: 0, max: V - 1 }), { minLength: N, maxLength: N }),
            target: fc.array(fc.oneof(fc.constant(-100), fc.integer({ min: 0, max: V - 1 })), { minLength: N, maxLength: N }),
            weights: fc.array(fc.constantFrom(0, 1, 0.25, 3), { minLength: N, maxLength: N }),
            logprobs: fc.array(fc.double({ min: -8, max: 0, noNaN: true }), { minLength: N, maxLength: N }),
            advantages: fc.array(fc.oneof(fc.constant(0), fc.double({ min: -3, max: 3, noNaN: true })), { minLength: N, maxLength: N }),
          }),
        ),
        (lossFn, r) => {
          const wire: Wire.Datum = {
            model_input: { chunks: [{ type: "encoded_text", tokens: r.input }] },
            loss_fn_inputs: {
              target_tokens: { data: r.target, dtype: "int64" },
              ...(lossFn === "cross_entropy"
                ? { weights: { data: r.weights, dtype: "float32" } }
                : { logprobs: { data: r.logprobs, dtype: "float32" }, advantages: { data: r.advantages, dtype: "float32" } }),
            },
          }
          const d = get(Alignment.datumFromWire(wire, lossFn))
          const g = gyreLoss(d, lossFn)
          const w = wireLoss(wire, lossFn)
          assert.strictEqual(g.active, w.active)
          assert.closeTo(g.sum, w.sum, 1e-9)
          // and it is stable from there on
          assert.deepStrictEqual(get(Alignment.datumFromWire(get(Alignment.datumToWire(d, lossFn)), lossFn)), d)
        },
      ),
      { numRuns: 400 },
    ))

  // values are float32 (fc.float), as the wire carries them: outputToWire rounds to float32
  it("learner outputs round trip both ways (property)", () =>
    fc.assert(
      fc.property(
        fc.array(fc.float({ min: -10, max: 0, noNaN: true, noDefaultInfinity: true }), { minLength: 1, maxLength: 12 }),
        fc.array(
          fc.record({
            position: fc.integer({ min: 1, max: 11 }),
            tokens: fc.array(fc.integer({ min: 0, max: V - 1 }), { maxLength: 4 }),
          }),
          { maxLength: 4 },
        ),
        (lps, topK) => {
          const output = {
            logprobs: [0, ...lps],
            topK: topK.map((e) => ({ position: e.position, tokens: e.tokens, logprobs: e.tokens.map((t) => Math.fround(-t / 10)) })),
          }
          const wire = Alignment.outputToWire(output)
          assert.deepStrictEqual(wire["logprobs"]!.data, lps)
          assert.deepStrictEqual(get(Alignment.outputFromWire(wire)), output)
          assert.deepStrictEqual(Alignment.outputToWire(get(Alignment.outputFromWire(wire))), wire)
        },
      ),
      { numRuns: 200 },
    ))

  it("learner outputs and prompt log-probs go out rounded to float32 (property)", () =>
    fc.assert(
      fc.property(fc.array(fc.double({ min: -10, max: 0, noNaN: true }), { minLength: 1, maxLength: 12 }), (lps) => {
        const wire = Alignment.outputToWire({ logprobs: [0, ...lps], topK: [{ position: 1, tokens: [1], logprobs: [lps[0]!] }] })
        assert.deepStrictEqual(wire["logprobs"]!.data, lps.map(Math.fround))
        assert.deepStrictEqual(wire["topk_logprobs"]!.data, [Math.fround(lps[0]!)])
        assert.deepStrictEqual(Alignment.promptLogprobsToWire([0, ...lps]), [null, ...lps.map(Math.fround)])
      }),
      { numRuns: 100 },
    ))

  it("prompt log-probs: 0 at position 0 <-> null", () => {
    assert.deepStrictEqual(Alignment.promptLogprobsToWire([0, -1, -2]), [null, -1, -2])
    assert.deepStrictEqual(get(Alignment.promptLogprobsFromWire([null, -1, -2])), [0, -1, -2])
    assert.isTrue(Result.isFailure(Alignment.promptLogprobsFromWire([null, null, -2])))
  })
})

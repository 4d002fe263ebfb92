/**
 * The KL penalty folded into the advantages (tinker-cookbook's `kl_penalty_coef` rule),
 * checked against numbers worked out by hand, plus its laws.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Result } from "effect"
import * as fc from "fast-check"
import { BackendError, type Datum, float32, modelInputFromTokens, modelInputTokens } from "../../src/contract/Contract.ts"
import * as KlPenalty from "../../src/loss/KlPenalty.ts"
import * as Reference from "../../src/services/Reference.ts"
import * as ReferencePenalty from "../../src/loss/ReferencePenalty.ts"

const datum = (tokens: Array<number>, logprobs: Array<number>, advantages: Array<number>): Datum => ({
  modelInput: modelInputFromTokens(tokens),
  lossFnInputs: { logprobs: float32(logprobs), advantages: float32(advantages) },
})

const advOf = (d: Datum) => d.lossFnInputs["advantages"]!.data

const close = (actual: ReadonlyArray<number>, expected: ReadonlyArray<number>, tol = 1e-6) => {
  assert.strictEqual(actual.length, expected.length)
  actual.forEach((a, i) => assert.approximately(a, expected[i]!, tol, `position ${i}: ${JSON.stringify(actual)} vs ${JSON.stringify(expected)}`))
}

// two Datums; prompt positions have advantage 0
const d1 = datum([1, 2, 3, 4], [0, 0, -1, -2], [0, 0, 0.5, 0.5])
const d2 = datum([5, 6, 7], [0, -0.5, -3], [0, -1, -1])
// the reference disagrees at a prompt position too (-9): it must not count
const ref1 = [0, -9, -1.5, -1]
const ref2 = [0, -0.5, -2]

describe("KlPenalty.apply", () => {
  it("folds coef * (batch mean d - d_t) into each sampled token's advantage (worked by hand)", () => {
    // d = sampler - reference on the sampled tokens: d1 -> [0.5, -1], d2 -> [0, -1]
    // batch mean = (0.5 - 1 + 0 - 1) / 4 = -0.375
    const out = KlPenalty.apply({ data: [d1, d2], reference: [ref1, ref2], coef: 2 })
    assert.isTrue(Result.isSuccess(out))
    const { data, metrics } = Result.getOrThrow(out)
    // 0.5 + 2(-0.375 - 0.5) = -1.25 ; 0.5 + 2(-0.375 + 1) = 1.75
    close(advOf(data[0]!), [0, 0, -1.25, 1.75])
    // -1 + 2(-0.375 - 0) = -1.75 ; -1 + 2(-0.375 + 1) = 0.25
    close(advOf(data[1]!), [0, -1.75, 0.25])
    assert.approximately(metrics[KlPenalty.METRICS.v1]!, -0.375, 1e-12)
    // k3 per token = e^{-d} - 1 + d: 0.5 -> 0.1065307, -1 -> 0.7182818 (twice), 0 -> 0
    assert.approximately(metrics[KlPenalty.METRICS.k3]!, (Math.exp(-0.5) - 0.5 + 2 * (Math.E - 2)) / 4, 1e-12)
    assert.approximately(metrics[KlPenalty.METRICS.k3]!, 0.3857731, 1e-6)
    assert.strictEqual(metrics[KlPenalty.METRICS.tokens], 4)
    // the other inputs are untouched
    assert.deepStrictEqual(data[0]!.lossFnInputs["logprobs"], d1.lossFnInputs["logprobs"])
    assert.deepStrictEqual(data[0]!.modelInput, d1.modelInput)
  })

  it("uncentred (tinker-cookbook's on-policy distillation): -coef * d_t, no batch mean", () => {
    const { data, metrics } = Result.getOrThrow(KlPenalty.apply({ data: [d1, d2], reference: [ref1, ref2], coef: 2, centred: false }))
    // d1 -> [0.5, -1]: 0.5 - 2(0.5) = -0.5 ; 0.5 - 2(-1) = 2.5 ; d2 -> [0, -1]: -1 - 0 = -1 ; -1 + 2 = 1
    close(advOf(data[0]!), [0, 0, -0.5, 2.5])
    close(advOf(data[1]!), [0, -1, 1])
    // the estimates are the same whichever way the advantages are shaped
    assert.approximately(metrics[KlPenalty.METRICS.v1]!, -0.375, 1e-12)
  })

  it("penalizes tokens of zero-advantage samples when masks name them", () => {
    const d3 = datum([8, 9, 10], [0, -2, -2], [0, 0, 0])
    const ref3 = [0, -1, -3] // d = [-1, 1]
    const without = Result.getOrThrow(KlPenalty.apply({ data: [d3], reference: [ref3], coef: 1 }))
    close(advOf(without.data[0]!), [0, 0, 0])
    assert.deepStrictEqual(without.metrics, {}, "no sampled token: no estimate")
    const withMask = Result.getOrThrow(KlPenalty.apply({ data: [d3], reference: [ref3], coef: 1, masks: [[0, 1, 1]] }))
    // mean d = 0: A = 0 + (0 - d)
    close(advOf(withMask.data[0]!), [0, 1, -1])
    assert.strictEqual(withMask.metrics[KlPenalty.METRICS.v1], 0)
  })

  it("with coef 0 the advantages stay as they are and the KL is still measured", () => {
    const { data, metrics } = Result.getOrThrow(KlPenalty.apply({ data: [d1, d2], reference: [ref1, ref2], coef: 0 }))
    assert.deepStrictEqual(data, [d1, d2])
    assert.approximately(metrics[KlPenalty.METRICS.v1]!, -0.375, 1e-12)
  })

  it("refuses inputs that do not line up, naming the Datum", () => {
    const short = KlPenalty.apply({ data: [d1, d2], reference: [ref1, [0, -1]], coef: 1 })
    assert.isTrue(Result.isFailure(short))
    assert.include(Result.isFailure(short) ? short.failure : "", "data[1]")
    const count = KlPenalty.apply({ data: [d1, d2], reference: [ref1], coef: 1 })
    assert.include(Result.isFailure(count) ? count.failure : "", "1 Datums, but the step has 2")
    const nan = KlPenalty.apply({ data: [d1], reference: [[0, 0, Number.NaN, -1]], coef: 1 })
    assert.include(Result.isFailure(nan) ? nan.failure : "", "data[0] at position 2")
    const negative = KlPenalty.apply({ data: [d1], reference: [ref1], coef: -1 })
    assert.include(Result.isFailure(negative) ? negative.failure : "", ">= 0")
  })

  it("checkCoef names the flag and the allowed range", () => {
    assert.isUndefined(KlPenalty.checkCoef(0))
    assert.isUndefined(KlPenalty.checkCoef(0.05))
    assert.strictEqual(KlPenalty.checkCoef(-0.1), "--kl-coef must be a finite number >= 0 (0 turns the KL penalty off), got -0.1")
    assert.include(KlPenalty.checkCoef(Number.POSITIVE_INFINITY)!, "--kl-coef")
    assert.include(KlPenalty.checkCoef(Number.NaN)!, "got NaN")
  })

  it("laws: the added term sums to zero over the batch, prompt positions never move, k3 >= 0", () => {
    const seq = fc.record({
      prompt: fc.integer({ min: 1, max: 4 }),
      sampled: fc.array(fc.record({ s: fc.double({ min: -8, max: 0, noNaN: true }), r: fc.double({ min: -8, max: 0, noNaN: true }) }), { minLength: 1, maxLength: 6 }),
      a: fc.double({ min: -2, max: 2, noNaN: true }).filter((a) => Math.abs(a) > 1e-3),
    })
    fc.assert(
      fc.property(fc.array(seq, { minLength: 1, maxLength: 5 }), fc.double({ min: 0, max: 5, noNaN: true }), (seqs, coef) => {
        const data = seqs.map((q) =>
          datum(
            Array.from({ length: q.prompt + q.sampled.length }, (_, i) => i + 1),
            [...new Array<number>(q.prompt).fill(0), ...q.sampled.map((x) => x.s)],
            [...new Array<number>(q.prompt).fill(0), ...q.sampled.map(() => q.a)],
          )
        )
        const reference = seqs.map((q) => [...new Array<number>(q.prompt).fill(-1), ...q.sampled.map((x) => x.r)])
        const out = Result.getOrThrow(KlPenalty.apply({ data, reference, coef }))
        let added = 0
        out.data.forEach((d, i) => {
          const before = advOf(data[i]!)
          advOf(d).forEach((a, t) => {
            if (t < seqs[i]!.prompt) assert.strictEqual(a, 0)
            else added += a - before[t]!
          })
        })
        // float32 storage rounds each advantage
        const n = seqs.reduce((m, q) => m + q.sampled.length, 0)
        assert.isBelow(Math.abs(added), 1e-5 * n * (1 + coef * 16))
        assert.isAtLeast(out.metrics[KlPenalty.METRICS.k3]!, 0)
      }),
      { numRuns: 200 },
    )
  })
})

/** A test double: a Reference whose log-probs are -0.5 at every position after the first. */
const constantReference = Layer.succeed(Reference.Reference, {
  logprobs: (inputs) => Effect.succeed(inputs.map((i) => modelInputTokens(i).map((_, t) => (t === 0 ? 0 : -0.5)))),
  check: Effect.void,
})

describe("ReferencePenalty.penalize", () => {
  it.effect("asks the Reference for every Datum's full sequence and folds the penalty in", () =>
    Effect.gen(function* () {
      // d1 vs -0.5: [-0.5, -1.5]; d2: [0, -2.5]; mean -1.125
      const { data, metrics } = yield* ReferencePenalty.penalize([d1, d2], 1)
      close(advOf(data[0]!), [0, 0, 0.5 + (-1.125 + 0.5), 0.5 + (-1.125 + 1.5)])
      close(advOf(data[1]!), [0, -1 + (-1.125 - 0), -1 + (-1.125 + 2.5)])
      assert.approximately(metrics[KlPenalty.METRICS.v1]!, -1.125, 1e-12)
    }).pipe(Effect.provide(constantReference)))

  it.effect("with coef 0 it never asks the Reference", () =>
    Effect.gen(function* () {
      const out = yield* ReferencePenalty.penalize([d1, d2], 0)
      assert.deepStrictEqual(out.data, [d1, d2])
    }).pipe(Effect.provide(Reference.layerUnavailable("must not be called"))))

  it.effect("without a Reference in context: coef 0 runs, coef > 0 fails saying the backend has none", () =>
    Effect.gen(function* () {
      const off = yield* ReferencePenalty.penalize([d1], 0)
      assert.deepStrictEqual(off.data, [d1])
      yield* ReferencePenalty.ensure(0)
      const e = yield* Effect.flip(ReferencePenalty.ensure(0.2))
      assert.include(e.message, "--kl-coef 0.2 needs the base model's log-probs")
      assert.include(e.message, "provides no Reference service")
      assert.include(e.message, "or --kl-coef 0")
      const p = yield* Effect.flip(ReferencePenalty.penalize([d1], 0.2))
      assert.strictEqual(p.reason, "Unavailable")
    }))

  it.effect("ensure refuses a bad coefficient, naming the flag and the range", () =>
    Effect.gen(function* () {
      const e = yield* Effect.flip(ReferencePenalty.ensure(-1))
      assert.strictEqual(e.reason, "InvalidInput")
      assert.strictEqual(e.message, "--kl-coef must be a finite number >= 0 (0 turns the KL penalty off), got -1")
    }).pipe(Effect.provide(constantReference)))

  it.effect("a Reference that cannot serve fails with its reason", () =>
    Effect.gen(function* () {
      const e = yield* Effect.flip(ReferencePenalty.penalize([d1], 0.1))
      assert.instanceOf(e, BackendError)
      assert.strictEqual(e.message, "no base model here")
      const c = yield* Effect.flip(Effect.flatMap(Reference.Reference, (r) => r.check))
      assert.strictEqual(c.reason, "Unavailable")
    }).pipe(Effect.provide(Reference.layerUnavailable("no base model here"))))
})

import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fc from "fast-check"
import { Contract, Datum } from "gyre"
import * as DatumIssue from "../src/contract/DatumIssue.ts"

const V = 50
const token = fc.integer({ min: 0, max: V - 1 })
const rlInput = fc
  .tuple(fc.array(token, { maxLength: 12 }), fc.array(token, { minLength: 1, maxLength: 12 }), fc.double({ min: -10, max: 10, noNaN: true }))
  .chain(([prompt, completion, advantage]) =>
    fc.tuple(
      fc.constant(prompt),
      fc.constant(completion),
      fc.array(fc.double({ min: -20, max: 0, noNaN: true }), { minLength: completion.length, maxLength: completion.length }),
      fc.constant(advantage),
    )
  )
  .map(([prompt, completion, samplerLogprobs, advantage]) => ({ prompt, completion, samplerLogprobs, advantage }))

const tokens = (d: Contract.Datum) => Contract.modelInputTokens(d.modelInput)
const messageOf = (data: ReadonlyArray<Contract.Datum>, lossFn: Contract.LossFn, options: { readonly vocabSize?: number; readonly maxLength?: number } = {}) =>
  Effect.gen(function* () {
    const error = yield* Effect.flip(Datum.validate(data, lossFn, { vocabSize: V, ...options }))
    assert.strictEqual(error._tag, "BackendError")
    assert.strictEqual(error.reason, "InvalidInput")
    return error.message
  })

const good = () => Datum.rl({ prompt: [1, 2, 3], completion: [4, 5], samplerLogprobs: [-0.5, -1], advantage: 0.7 })
const withInput = (d: Contract.Datum, key: string, data: ReadonlyArray<number>, dtype: "float32" | "int64" = "float32"): Contract.Datum => ({
  ...d,
  lossFnInputs: { ...d.lossFnInputs, [key]: dtype === "float32" ? Contract.float32(data) : Contract.int64(data) },
})

describe("Datum.rl", () => {
  it("is prompt ++ completion, with [0]*P ++ logprobs and [0]*P ++ [A]*T, all of shape [L]", () =>
    fc.assert(fc.property(rlInput, ({ prompt, completion, samplerLogprobs, advantage }) => {
      const d = Datum.rl({ prompt, completion, samplerLogprobs, advantage })
      const P = prompt.length
      const L = P + completion.length
      assert.deepStrictEqual(tokens(d), [...prompt, ...completion])
      const { logprobs, advantages } = d.lossFnInputs
      assert.deepStrictEqual(logprobs, { data: [...Array<number>(P).fill(0), ...samplerLogprobs], dtype: "float32", shape: [L] })
      assert.deepStrictEqual(advantages, { data: [...Array<number>(P).fill(0), ...completion.map(() => advantage)], dtype: "float32", shape: [L] })
      assert.isUndefined(Datum.checkAll([d], "ppo", { vocabSize: V }))
    })))
})

describe("Datum.sft", () => {
  it("targets the completion and ignores the prompt with -100", () =>
    fc.assert(fc.property(fc.array(token, { maxLength: 10 }), fc.array(token, { minLength: 1, maxLength: 10 }), (prompt, completion) => {
      const d = Datum.sft({ prompt, completion })
      assert.deepStrictEqual(tokens(d), [...prompt, ...completion])
      assert.deepStrictEqual(d.lossFnInputs.target_tokens, Contract.int64([...prompt.map(() => -100), ...completion]))
      assert.isUndefined(Datum.checkAll([d], "cross_entropy", { vocabSize: V }))
    })))
})

describe("Datum.validate", () => {
  it.effect("passes a good batch", () => Datum.validate([good(), good()], "importance_sampling", { vocabSize: V }))

  it.effect("names the datum and the field of a length mismatch", () =>
    Effect.gen(function* () {
      const message = yield* messageOf([good(), withInput(good(), "advantages", [0, 0, 0, 1])], "ppo")
      assert.strictEqual(message, "data[1].lossFnInputs.advantages has length 4, but modelInput has length 5; every per-token input has shape [L]")
    }))

  it.effect("names the field and position of a NaN", () =>
    Effect.gen(function* () {
      const message = yield* messageOf([withInput(good(), "logprobs", [0, 0, 0, Number.NaN, -1])], "ppo")
      assert.strictEqual(message, "data[0].lossFnInputs.logprobs[3] is NaN, not a finite number")
    }))

  it.effect("names out-of-vocabulary tokens in the input and in the targets", () =>
    Effect.gen(function* () {
      const input = Datum.rl({ prompt: [1, 99], completion: [4], samplerLogprobs: [-1], advantage: 1 })
      assert.strictEqual(yield* messageOf([input], "ppo"), "data[0].modelInput token 99 at position 1 is outside the vocabulary [0, 50)")
      const negative = Datum.rl({ prompt: [1], completion: [-3], samplerLogprobs: [-1], advantage: 1 })
      assert.match(yield* messageOf([negative], "ppo"), /^data\[0\]\.modelInput token -3 at position 1/)
      const target = withInput(Datum.sft({ prompt: [1], completion: [2, 3] }), "target_tokens", [-100, 2, 77], "int64")
      assert.strictEqual(yield* messageOf([target], "cross_entropy"), "data[0].lossFnInputs.target_tokens[2] = 77 is outside the vocabulary [0, 50) (use -100 to ignore a position)")
    }))

  it.effect("names a missing input and what the loss needs", () =>
    Effect.gen(function* () {
      const sft = Datum.sft({ prompt: [1], completion: [2] })
      assert.strictEqual(yield* messageOf([sft], "cispo"), "data[0].lossFnInputs.logprobs is required by cispo (inputs: logprobs, advantages, target_tokens)")
      const { advantages: _, ...rest } = good().lossFnInputs
      assert.strictEqual(yield* messageOf([{ ...good(), lossFnInputs: rest }], "ppo"), "data[0].lossFnInputs.advantages is required by ppo (inputs: logprobs, advantages, target_tokens)")
    }))

  it.effect("rejects an empty batch, an empty input, unknown inputs, bad shapes, positive log-probs, negative weights and overlong inputs", () =>
    Effect.gen(function* () {
      assert.match(yield* messageOf([], "ppo"), /data is empty/)
      assert.match(yield* messageOf([Datum.sft({ prompt: [], completion: [] })], "cross_entropy"), /data\[0\]\.modelInput is empty/)
      assert.match(yield* messageOf([withInput(good(), "mask", [1, 1, 1, 1, 1])], "ppo"), /data\[0\]\.lossFnInputs\.mask is not an input of ppo; allowed inputs: logprobs, advantages, target_tokens/)
      const badShape = { ...good(), lossFnInputs: { ...good().lossFnInputs, advantages: { data: [0, 0, 0, 1, 1], dtype: "float32" as const, shape: [5, 1] } } }
      assert.match(yield* messageOf([badShape], "ppo"), /data\[0\]\.lossFnInputs\.advantages has shape \[5,1\], expected \[5\]/)
      assert.match(yield* messageOf([withInput(good(), "logprobs", [0, 0, 0, 0.5, -1])], "ppo"), /logprobs\[3\] = 0\.5; a log-probability must be <= 0/)
      const weighted = withInput(Datum.sft({ prompt: [1], completion: [2] }), "weights", [0, -1])
      assert.match(yield* messageOf([weighted], "cross_entropy"), /weights\[1\] = -1 is negative; weights must be >= 0/)
      assert.match(yield* messageOf([good()], "ppo", { maxLength: 4 }), /data\[0\]\.modelInput has 5 tokens, more than the model's context length 4/)
    }))

  it.effect("refuses values that are finite as float64 but overflow float32, and weights on an RL loss", () =>
    Effect.gen(function* () {
      const huge = Datum.rl({ prompt: [1, 2], completion: [3], samplerLogprobs: [-1], advantage: 1e300 })
      assert.match(yield* messageOf([good(), huge], "ppo"), /^data\[1\]\.lossFnInputs\.advantages\[2\] = 1e\+300 overflows float32/)
      assert.match(yield* messageOf([withInput(good(), "advantages", [0, 0, 0, 3.5e38, 1])], "importance_sampling"), /advantages\[3\] = 3\.5e\+38 overflows float32/)
      assert.match(yield* messageOf([withInput(good(), "logprobs", [0, 0, 0, -1e39, -1])], "ppo"), /logprobs\[3\] = -1e\+39 overflows float32/)
      // the largest float32 itself is accepted
      assert.isUndefined(Datum.checkAll([withInput(good(), "advantages", [0, 0, 0, Datum.FLOAT32_MAX, 1])], "ppo", { vocabSize: V }))
      assert.match(yield* messageOf([withInput(good(), "weights", [1, 1, 1, 1, 1])], "ppo"), /weights is not an input of ppo/)
    }))
})

describe("Datum.checkAll: where a batch is wrong, as data", () => {
  const issueOf = (data: ReadonlyArray<Contract.Datum>, lossFn: Contract.LossFn, options: { readonly vocabSize?: number; readonly maxLength?: number } = {}) =>
    Datum.checkAll(data, lossFn, { vocabSize: V, ...options })

  it("names the datum, the field, the position, the value and what was expected", () => {
    assert.deepStrictEqual(issueOf([], "ppo"), { field: [], expected: { _tag: "NonEmpty" } })
    assert.deepStrictEqual(issueOf([good(), withInput(good(), "advantages", [0, 0, 0, 1])], "ppo"), {
      datum: 1,
      field: ["lossFnInputs", "advantages"],
      value: 4,
      expected: { _tag: "Length", length: 4, expected: 5 },
    })
    assert.deepStrictEqual(issueOf([good(), good(), withInput(good(), "logprobs", [0, 0, 0, Number.NaN, -1])], "ppo"), {
      datum: 2,
      field: ["lossFnInputs", "logprobs"],
      position: 3,
      value: Number.NaN,
      expected: { _tag: "Finite" },
    })
    const input = Datum.rl({ prompt: [1, 99], completion: [4], samplerLogprobs: [-1], advantage: 1 })
    assert.deepStrictEqual(issueOf([input], "ppo"), { datum: 0, field: ["modelInput"], position: 1, value: 99, expected: { _tag: "InVocabulary", vocabSize: V, ignorable: false } })
    const target = withInput(Datum.sft({ prompt: [1], completion: [2, 3] }), "target_tokens", [-100, 2, 77], "int64")
    assert.deepStrictEqual(issueOf([target], "cross_entropy"), {
      datum: 0,
      field: ["lossFnInputs", "target_tokens"],
      position: 2,
      value: 77,
      expected: { _tag: "InVocabulary", vocabSize: V, ignorable: true },
    })
    assert.deepStrictEqual(issueOf([good(), Datum.sft({ prompt: [1], completion: [2] })], "cispo"), {
      datum: 1,
      field: ["lossFnInputs", "logprobs"],
      expected: { _tag: "Required", lossFn: "cispo", allowed: ["logprobs", "advantages", "target_tokens"] },
    })
    const huge = Datum.rl({ prompt: [1, 2], completion: [3], samplerLogprobs: [-1], advantage: 1e300 })
    assert.deepStrictEqual(issueOf([good(), huge], "ppo"), { datum: 1, field: ["lossFnInputs", "advantages"], position: 2, value: 1e300, expected: { _tag: "Float32" } })
    assert.deepStrictEqual(issueOf([good()], "ppo", { maxLength: 4 }), {
      datum: 0,
      field: ["modelInput"],
      value: 5,
      expected: { _tag: "WithinContext", length: 5, contextLength: 4 },
    })
  })

  it("the failure of validate carries the issue, and its message is the issue rendered", () =>
    Effect.runSync(Effect.gen(function* () {
      const error = yield* Effect.flip(Datum.validate([good(), withInput(good(), "weights", [1, 1, 1, 1, 1])], "ppo", { vocabSize: V, operation: "op" }))
      assert.deepStrictEqual(error.issue, { datum: 1, field: ["lossFnInputs", "weights"], expected: { _tag: "Allowed", lossFn: "ppo", allowed: ["logprobs", "advantages", "target_tokens"] } })
      assert.strictEqual(error.operation, "op")
      assert.strictEqual(error.message, DatumIssue.render(error.issue!))
    })))

  it("the renderer writes a location in any table of names; the issue stays the same", () => {
    const issue = issueOf([good(), good(), withInput(good(), "logprobs", [0, 0, 0, 0.5, -1])], "ppo")!
    const names = { data: "batch", fields: { lossFnInputs: "inputs" }, element: (p: number) => `@${p}` }
    assert.strictEqual(DatumIssue.render(issue), "data[2].lossFnInputs.logprobs[3] = 0.5; a log-probability must be <= 0")
    assert.strictEqual(DatumIssue.render(issue, names), "batch[2].inputs.logprobs@3 = 0.5; a log-probability must be <= 0")
    assert.deepStrictEqual(DatumIssue.shiftDatum(issue, 5), { ...issue, datum: 7 })
  })

  it("a target outside the vocabulary when its size is unknown says what a token id is", () => {
    const target = withInput(Datum.sft({ prompt: [1], completion: [2, 3] }), "target_tokens", [-100, 2, -5], "int64")
    const issue = Datum.checkAll([target], "cross_entropy")!
    assert.strictEqual(DatumIssue.render(issue), "data[0].lossFnInputs.target_tokens[2] = -5 is outside the vocabulary (token ids are non-negative integers) (use -100 to ignore a position)")
  })
})

/**
 * A request can never poison the embedded model: float32 overflow is refused at the door,
 * a non-finite loss or gradient fails its call and changes nothing, and an optimizer step
 * never applies a non-finite gradient (a refused step drops the accumulated gradient, so
 * the next step trains), nor a learning rate that makes the forward pass non-finite. Also: a sample pinned to a version that is never
 * published fails after the ready timeout instead of waiting forever.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Layer } from "effect"
import { TestClock } from "effect/testing"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { adamStep, initAdam } from "../../../src/backends/local/Adam.ts"
import { NonFiniteError } from "../../../src/backends/local/Errors.ts"
import { Local } from "../../../src/backends/local/index.ts"
import { cloneWeights } from "../../../src/backends/local/Model.ts"
import { resolveLoss } from "../../../src/loss/Loss.ts"
import { Rng } from "../../../src/backends/local/Rng.ts"
import { adamParams, type Datum, float32, modelInputFromTokens } from "../../../src/contract/Contract.ts"
import { Sampler } from "../../../src/services/Sampler.ts"
import { Trainer } from "../../../src/services/Trainer.ts"
import { adam, makeEngines, rlDatum, tinyConfig, tinyLora } from "./helpers.ts"

const is = (() => {
  const r = resolveLoss("importance_sampling", {})
  if (!r.ok) throw new Error(r.message)
  return r.value
})()

const withAdvantage = (d: Datum, value: number): Datum => {
  const a = d.lossFnInputs["advantages"]!.data
  return { ...d, lossFnInputs: { ...d.lossFnInputs, advantages: float32(a.map((x) => (x === 0 ? 0 : value))) } }
}

/**
 * Every input finite as float32, yet the importance ratio (about e^55) times the advantage
 * overflows (importance_sampling: ppo's clip would zero that gradient).
 */
const overflowing = (d: Datum): Datum => {
  const q = d.lossFnInputs["logprobs"]!.data
  const poisoned = withAdvantage(d, 3e38)
  return { ...poisoned, lossFnInputs: { ...poisoned.lossFnInputs, logprobs: float32(q.map((x) => (x === 0 ? 0 : -60))) } }
}

describe("non-finite values never reach the weights", () => {
  it("a gradient that overflows float32 fails the call and leaves the buffer as it was", async () => {
    const { trainer } = await makeEngines({ randomB: true })
    const rng = new Rng(3)
    const good = rlDatum(rng, 3, 5)
    trainer.run([good], is, { backward: true })
    const before = cloneWeights(trainer.grads)
    const huge = overflowing(rlDatum(rng, 3, 5))
    assert.throws(() => trainer.run([good, huge], is, { backward: true }), NonFiniteError)
    for (const [k, g] of Object.entries(trainer.grads)) assert.deepStrictEqual([...g], [...before[k]!], k)
    const params = cloneWeights(trainer.params)
    trainer.optimStep(adam)
    for (const p of Object.values(trainer.params)) for (const v of p) assert.isTrue(Number.isFinite(v))
    assert.notDeepEqual([...Object.values(trainer.params)[0]!], [...Object.values(params)[0]!])
  })

  it("a refused optimizer step drops the accumulated gradient, and the next forward_backward + optim_step trains", async () => {
    const { trainer } = await makeEngines({ randomB: true })
    const rng = new Rng(5)
    const good = rlDatum(rng, 3, 5)
    // finite everywhere, but unclipped its Adam update overflows the float32 moments
    trainer.run([withAdvantage(good, 1e30)], is, { backward: true })
    const params = cloneWeights(trainer.params)
    assert.throws(() => trainer.optimStep(adam), /overflows float32.*the accumulated gradient was dropped/)
    for (const [k, p] of Object.entries(trainer.params)) assert.deepStrictEqual([...p], [...params[k]!], k)
    for (const g of Object.values(trainer.grads)) assert.isTrue(g.every((x) => x === 0))
    assert.strictEqual(trainer.version, 0)
    trainer.run([good], is, { backward: true })
    const step = trainer.optimStep(adam)
    assert.strictEqual(step.version, 1)
    assert.isTrue(Number.isFinite(step.metrics["grad_norm"]!))
    assert.notDeepEqual([...Object.values(trainer.params)[0]!], [...Object.values(params)[0]!])
    for (const p of Object.values(trainer.params)) for (const v of p) assert.isTrue(Number.isFinite(v))
  })

  it("a learning rate that makes the forward pass non-finite (1e10, 1e20, 1e30) is refused, and weights, moments, version and gradient stay as they were", async () => {
    for (const learningRate of [1e10, 1e20, 1e30]) {
      const { trainer } = await makeEngines({ randomB: true })
      const good = rlDatum(new Rng(3), 3, 5)
      trainer.run([good], is, { backward: true })
      const params = cloneWeights(trainer.params)
      const grads = cloneWeights(trainer.grads)
      const moments = cloneWeights(trainer.adam.v)
      assert.throws(() => trainer.optimStep({ ...adam, learningRate }), new RegExp(`^the learning rate ${learningRate.toExponential().replace("+", "\\+")} made the weights non-finite .*send optim_step again with a smaller learning rate$`))
      for (const [k, p] of Object.entries(trainer.params)) assert.deepStrictEqual([...p], [...params[k]!], k)
      for (const [k, v] of Object.entries(trainer.adam.v)) assert.deepStrictEqual([...v], [...moments[k]!], k)
      for (const [k, g] of Object.entries(trainer.grads)) assert.deepStrictEqual([...g], [...grads[k]!], k)
      assert.deepStrictEqual([trainer.version, trainer.adam.t], [0, 0])
      // the forward pass is still finite, and the kept gradient applies with a sane learning rate
      const lossOf = () => trainer.run([good], is, { backward: false }).metrics["loss"]!
      assert.isTrue(Number.isFinite(lossOf()))
      assert.strictEqual(trainer.optimStep(adam).version, 1)
      assert.isTrue(Number.isFinite(lossOf()))
    }
  })

  it("Adam refuses a NaN gradient and changes nothing", () => {
    const params = { w: new Float32Array([1, 2, 3]) }
    const state = initAdam(params)
    const grads = { w: new Float32Array([0.1, Number.NaN, 0.2]) }
    assert.throws(() => adamStep(params, grads, state, adamParams({ gradClipNorm: 1 })), /gradient norm is NaN/)
    assert.deepStrictEqual([...params.w], [1, 2, 3])
    assert.strictEqual(state.t, 0)
    assert.deepStrictEqual([...state.m["w"]!], [0, 0, 0])
    // finite, but its square overflows the float32 second moment when nothing clips it
    assert.throws(() => adamStep(params, { w: new Float32Array([1e20, 0, 0]) }, state, adamParams({ gradClipNorm: 0 })), /overflows float32/)
    assert.deepStrictEqual([...params.w], [1, 2, 3])
    assert.deepStrictEqual([...state.v["w"]!], [0, 0, 0])
    adamStep(params, { w: new Float32Array([1e20, 0, 0]) }, state, adamParams({ gradClipNorm: 1 }))
    assert.strictEqual(state.t, 1)
    assert.isTrue([...params.w, ...state.v["w"]!].every(Number.isFinite))
  })
})

const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), "gyre-nonfinite-"))
const local = (extra: { readonly workers?: boolean } = {}) =>
  Layer.fresh(Local.layer({ config: tinyConfig, lora: tinyLora, seed: 4, stateDir, readyTimeout: "10 minutes", ...extra }))

describe("the embedded services", () => {
  for (const workers of [false, true]) {
    it.live(`${workers ? "worker threads" : "in-process"}: a poisoned forward_backward is refused, and the model still samples`, () =>
      Effect.gen(function* () {
        const trainer = yield* Trainer
        const sampler = yield* Sampler
        const rng = new Rng(9)
        const good = rlDatum(rng, 3, 5)
        // 1e300 is a finite JavaScript number and an infinite float32
        const e1 = yield* Effect.flip(trainer.forwardBackward([good, withAdvantage(good, 1e300)], "ppo"))
        assert.strictEqual(e1.reason, "InvalidInput")
        assert.match(e1.message, /data\[1\]\.lossFnInputs\.advantages\[\d+\] = 1e\+300 overflows float32/)
        // finite as float32, but the gradient overflows: the call fails naming the problem
        const e2 = yield* Effect.flip(trainer.forwardBackward([good, overflowing(good)], "importance_sampling"))
        assert.strictEqual(e2.reason, "InvalidInput")
        assert.match(e2.message, /^data\[1\] position \d+: the importance_sampling loss is/)
        yield* trainer.forwardBackward([good], "ppo")
        const step = yield* trainer.optimStep(adamParams({ learningRate: 1e-2, gradClipNorm: 1 }))
        assert.isTrue(Number.isFinite(step.metrics["grad_norm"]!))
        // an update that overflows float32 is refused; the gradient goes with it, so the model still trains
        yield* trainer.forwardBackward([withAdvantage(good, 1e30)], "importance_sampling")
        const refused = yield* Effect.flip(trainer.optimStep(adamParams({ learningRate: 1e-2 })))
        assert.strictEqual(refused.reason, "InvalidInput")
        assert.match(refused.message, /overflows float32.*the accumulated gradient was dropped/)
        assert.strictEqual((yield* trainer.info).version, step.version)
        // a learning rate whose step would make the forward pass non-finite is refused; the weights stay
        yield* trainer.forwardBackward([good], "ppo")
        const huge = yield* Effect.flip(trainer.optimStep(adamParams({ learningRate: 1e20 })))
        assert.strictEqual(huge.reason, "InvalidInput")
        assert.match(huge.message, /the learning rate 1e\+20 made the weights non-finite/)
        assert.strictEqual((yield* trainer.info).version, step.version)
        const next = yield* trainer.optimStep(adamParams({ learningRate: 1e-2 }))
        assert.strictEqual(next.version, step.version + 1)
        assert.isTrue(Number.isFinite(next.metrics["grad_norm"]!))
        yield* trainer.saveWeightsForSampler("after")
        const out = yield* sampler.sample(modelInputFromTokens([1, 40, 41]), { maxTokens: 4, temperature: 1 }, { numSamples: 2 })
        for (const s of out.sequences) for (const lp of s.logprobs) assert.isTrue(Number.isFinite(lp))
      }).pipe(Effect.provide(local({ workers }))), 60_000)
  }

  it.effect("a sample pinned to a version that is never published fails after the ready timeout", () =>
    Effect.gen(function* () {
      const sampler = yield* Sampler
      const fiber = yield* Effect.forkChild(
        sampler.sample(modelInputFromTokens([1, 40, 41]), { maxTokens: 2, temperature: 1 }, { numSamples: 1, minPolicyVersion: 5 }),
      )
      yield* TestClock.adjust("9 minutes")
      assert.isUndefined(fiber.pollUnsafe())
      yield* TestClock.adjust("1 minute")
      const error = yield* Effect.flip(Fiber.join(fiber))
      assert.strictEqual(error.reason, "Timeout")
      assert.include(error.message, "policy version 5")
      assert.include(error.message, "serves version 0")
    }).pipe(Effect.provide(local())))
})

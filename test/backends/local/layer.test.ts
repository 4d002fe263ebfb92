import { assert, it, layer } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { adamParams, type Datum, float32, int64, modelInputFromTokens } from "../../../src/contract/Contract.ts"
import { Local } from "../../../src/backends/local/index.ts"
import { Sampler } from "../../../src/services/Sampler.ts"
import { encodePrompt, Tokenizer } from "../../../src/services/Tokenizer.ts"
import { Trainer } from "../../../src/services/Trainer.ts"
import { tinyConfig, tinyLora } from "./helpers.ts"

const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), "gyre-layer-"))

const datum = (tokens: Array<number>, inputs: Datum["lossFnInputs"]): Datum => ({ modelInput: modelInputFromTokens(tokens), lossFnInputs: inputs })

layer(Local.layer({ config: tinyConfig, lora: tinyLora, seed: 3, stateDir }))("Local.layer", (it) => {
  it.effect("tokenizer round trip and unknown characters", () =>
    Effect.gen(function* () {
      const tok = yield* Tokenizer
      const text = "What is 7 times 8? ~!@# \n ok"
      const ids = yield* tok.encode(text)
      assert.strictEqual(tok.decode(ids), text)
      assert.strictEqual(tok.decode([tok.bos!, ...ids, tok.eos]), text)
      const e = yield* Effect.flip(tok.encode("ab\u00e9c"))
      assert.include(e.message, "position 2")
      assert.include(e.message, "U+00E9")
      assert.strictEqual(yield* tok.renderPrompt([{ role: "user", content: "a" }, { role: "user", content: "b" }]), "a\nb")
      assert.deepStrictEqual(yield* encodePrompt(tok, "hi"), [tok.bos!, ...(yield* tok.encode("hi"))])
    }))

  it.effect("train, publish, sample pinned to the version", () =>
    Effect.gen(function* () {
      const trainer = yield* Trainer
      const sampler = yield* Sampler
      const prompt = modelInputFromTokens([1, 50, 51, 52])
      // a pinned request waits for the version to be published
      const pinned = yield* Effect.forkChild(sampler.sample(prompt, { maxTokens: 4, temperature: 1 }, { numSamples: 2, minPolicyVersion: 1 }))
      const tokens = [1, 50, 51, 52, 60, 61, 2]
      const fb = yield* trainer.forwardBackward([datum(tokens, { target_tokens: int64(tokens.map((t, i) => (i < 4 ? -100 : t))) })], "cross_entropy")
      assert.strictEqual(fb.metrics["active_tokens"], 3)
      const step = yield* trainer.optimStep(adamParams({ learningRate: 1e-2 }))
      assert.strictEqual(step.version, 1)
      assert.isTrue(step.metrics["grad_norm"]! > 0)
      assert.strictEqual((yield* trainer.info).version, 1)
      const pub = yield* trainer.saveWeightsForSampler("step-1")
      assert.strictEqual(pub.version, 1)
      const res = yield* Fiber.join(pinned)
      assert.strictEqual(res.policyVersion, 1)
      assert.strictEqual(res.sequences.length, 2)
      assert.strictEqual(yield* sampler.version, 1)
      const lps = yield* sampler.computeLogprobs(modelInputFromTokens(tokens))
      const fwd = yield* trainer.forward([datum(tokens, {})], "cross_entropy")
      for (let i = 0; i < tokens.length; i++) assert.isTrue(Math.abs(lps[i]! - fwd.lossFnOutputs[0]!.logprobs[i]!) < 1e-4)
      // state round trip
      const saved = yield* trainer.saveState("ckpt-1")
      assert.isTrue(fs.existsSync(saved.path))
      yield* trainer.forwardBackward([datum(tokens, {})], "cross_entropy")
      yield* trainer.optimStep(adamParams({ learningRate: 1e-2 }))
      yield* trainer.loadState(saved.path, { withOptimizer: true })
      assert.strictEqual((yield* trainer.info).version, 1)
      const again = yield* trainer.forward([datum(tokens, {})], "cross_entropy")
      assert.deepStrictEqual(again.lossFnOutputs[0]!.logprobs, fwd.lossFnOutputs[0]!.logprobs)
    }))

  it.effect("top-k logprobs", () =>
    Effect.gen(function* () {
      const trainer = yield* Trainer
      const tokens = [1, 50, 51, 52, 60]
      const out = yield* trainer.forward([datum(tokens, {})], "cross_entropy", { topKLogprobs: 5 })
      const topK = out.lossFnOutputs[0]!.topK!
      assert.strictEqual(topK.length, 4)
      for (const t of topK) {
        assert.strictEqual(t.tokens.length, 5)
        for (let i = 1; i < 5; i++) assert.isTrue(t.logprobs[i]! <= t.logprobs[i - 1]!)
        const own = out.lossFnOutputs[0]!.logprobs[t.position]!
        assert.isTrue(own <= t.logprobs[0]! + 1e-9)
      }
    }))

  it.effect("bad input is rejected before any work, naming the field", () =>
    Effect.gen(function* () {
      const trainer = yield* Trainer
      const sampler = yield* Sampler
      const before = (yield* trainer.info).version
      const msg = (e: { message: string; reason: string }) => {
        assert.strictEqual(e.reason, "InvalidInput")
        return e.message
      }
      const rl = (L: number, over: Partial<Record<string, ReturnType<typeof float32>>> = {}) =>
        datum(new Array(L).fill(5), { logprobs: float32(new Array(L).fill(-1)), advantages: float32(new Array(L).fill(1)), ...over } as Datum["lossFnInputs"])
      let m = msg(yield* Effect.flip(trainer.forwardBackward([rl(5), rl(5, { advantages: float32([1, 1, 1]) })], "ppo")))
      assert.include(m, "data[1].lossFnInputs.advantages")
      assert.include(m, "length 3")
      m = msg(yield* Effect.flip(trainer.forwardBackward([rl(4, { logprobs: float32([0, Number.NaN, 0, 0]) })], "ppo")))
      assert.include(m, "data[0].lossFnInputs.logprobs[1]")
      assert.include(m, "NaN")
      m = msg(yield* Effect.flip(trainer.forwardBackward([datum([1, 2, 500], {})], "cross_entropy")))
      assert.include(m, "data[0].modelInput token 500")
      m = msg(yield* Effect.flip(trainer.forwardBackward([datum([1, 2, 3], { target_tokens: int64([0, 7, 999]) })], "cross_entropy")))
      assert.include(m, "target_tokens[2]")
      m = msg(yield* Effect.flip(trainer.forwardBackward([rl(3)], "ppoo" as "ppo")))
      assert.include(m, "unknown loss")
      m = msg(yield* Effect.flip(trainer.forwardBackward([rl(3)], "ppo", { lossFnConfig: { clip_lo: 0.5 } })))
      assert.include(m, "clip_lo")
      assert.include(m, "clip_low_threshold")
      m = msg(yield* Effect.flip(trainer.forwardBackward([rl(3)], "ppo", { topKLogprobs: 21 })))
      assert.include(m, "topKLogprobs")
      m = msg(yield* Effect.flip(trainer.forwardBackward([datum([1, 2, 3], {})], "ppo")))
      assert.include(m, "data[0].lossFnInputs.logprobs is required")
      m = msg(yield* Effect.flip(trainer.forwardBackward([datum(new Array(40).fill(5), {})], "cross_entropy")))
      assert.include(m, "context length")
      m = msg(yield* Effect.flip(sampler.sample(modelInputFromTokens([1, 400]), { maxTokens: 3, temperature: 1 }, { numSamples: 1 })))
      assert.include(m, "prompt token 400")
      assert.strictEqual((yield* trainer.info).version, before)
    }))
})

it.effect("concurrent sample calls from 8 fibers are decoded as one batch", () =>
  Effect.gen(function* () {
    const local = yield* Local.make({ config: tinyConfig, lora: tinyLora, seed: 5, stateDir })
    const prompts = Array.from({ length: 8 }, (_, g) => modelInputFromTokens([1, 10 + g, 20, 30, 40 + g]))
    const results = yield* Effect.forEach(
      prompts,
      (p, g) => local.sampler.sample(p, { maxTokens: 4, temperature: 1 }, { numSamples: 8, affinityKey: `group-${g}` }),
      { concurrency: 8 },
    )
    assert.strictEqual(results.length, 8)
    for (const r of results) assert.strictEqual(r.sequences.length, 8)
    assert.strictEqual(local.samplerEngine.stats.batches, 1)
    assert.strictEqual(local.samplerEngine.stats.maxRequestsPerBatch, 8)
    assert.strictEqual(local.samplerEngine.stats.rows, 64)
  }))

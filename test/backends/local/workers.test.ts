/**
 * The embedded backend with the trainer and the sampler in worker threads: the same
 * numbers as in-process, version pinning, errors from inside a worker, dead workers,
 * closing, and the RL loop in async mode.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it, layer } from "@effect/vitest"
import { Context, Effect, Fiber, Layer } from "effect"
import { adamParams, type Datum, float32, int64, modelInputFromTokens } from "../../../src/contract/Contract.ts"
import { Local } from "../../../src/backends/local/index.ts"
import { LocalWorkers, type WorkerServices } from "../../../src/backends/local/Workers.ts"
import * as RunLog from "../../../src/folder/RunLog.ts"
import * as Runner from "../../../src/Runner.ts"
import { maxAbsDiff, tinyConfig, tinyLora } from "./helpers.ts"
import vowels, { toySettings } from "../../envs/vowels.ts"

const stateDir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-workers-"))
const options = { config: tinyConfig, lora: tinyLora, seed: 3, stateDir }

class Threads extends Context.Service<Threads, WorkerServices>()("test/Threads") {}

const datum = (tokens: Array<number>, inputs: Datum["lossFnInputs"]): Datum => ({ modelInput: modelInputFromTokens(tokens), lossFnInputs: inputs })
const prompt = [1, 40, 41, 42, 43]
const rlDatum = (completion: ReadonlyArray<number>, logprobs: ReadonlyArray<number>, advantage: number): Datum => {
  const tokens = [...prompt, ...completion]
  return datum(tokens, {
    logprobs: float32(tokens.map((_, i) => (i < prompt.length ? 0 : logprobs[i - prompt.length]!))),
    advantages: float32(tokens.map((_, i) => (i < prompt.length ? 0 : advantage))),
  })
}

layer(Layer.effect(Threads, LocalWorkers.make(options)))("LocalWorkers", (it) => {
  it.effect("sampler and trainer log-probs agree after a train step and publish", () =>
    Effect.gen(function* () {
      const { trainer, sampler } = yield* Threads
      const before = (yield* trainer.info).version
      const first = yield* sampler.sample(modelInputFromTokens(prompt), { maxTokens: 6, temperature: 1, seed: 11 }, { numSamples: 4 })
      const data = first.sequences.map((s, i) => rlDatum(s.tokens, s.logprobs, i % 2 === 0 ? 1 : -1))
      yield* trainer.forwardBackward(data, "ppo")
      const step = yield* trainer.optimStep(adamParams({ learningRate: 5e-2 }))
      assert.strictEqual(step.version, before + 1)
      const published = yield* trainer.saveWeightsForSampler(`step-${step.version}`)
      assert.strictEqual(published.version, step.version)
      assert.strictEqual(yield* sampler.version, step.version)

      // scoring a sequence
      const tokens = [...prompt, 60, 61, 62, 2]
      const lps = yield* sampler.computeLogprobs(modelInputFromTokens(tokens))
      const fwd = yield* trainer.forward([datum(tokens, {})], "cross_entropy")
      assert.isBelow(maxAbsDiff(lps, fwd.lossFnOutputs[0]!.logprobs), 1e-4)

      // sampling: the reported log-probs are the trainer's for the sampled tokens
      const again = yield* sampler.sample(modelInputFromTokens(prompt), { maxTokens: 6, temperature: 1, seed: 12 }, { numSamples: 4 })
      assert.strictEqual(again.policyVersion, step.version)
      const learner = yield* trainer.forward(again.sequences.map((s) => rlDatum(s.tokens, s.logprobs, 1)), "ppo")
      again.sequences.forEach((s, i) => {
        assert.isBelow(maxAbsDiff(s.logprobs, learner.lossFnOutputs[i]!.logprobs.slice(prompt.length)), 1e-4)
      })
      // the adapter moved: the new policy differs from the one sampled before
      const old = yield* trainer.forward([rlDatum(first.sequences[0]!.tokens, first.sequences[0]!.logprobs, 1)], "ppo")
      assert.isAbove(maxAbsDiff(first.sequences[0]!.logprobs, old.lossFnOutputs[0]!.logprobs.slice(prompt.length)), 1e-4)
    }))

  it.effect("minPolicyVersion waits until that version is published", () =>
    Effect.gen(function* () {
      const { trainer, sampler } = yield* Threads
      const next = (yield* trainer.info).version + 1
      const pinned = yield* Effect.forkChild(sampler.sample(modelInputFromTokens(prompt), { maxTokens: 3, temperature: 1 }, { numSamples: 2, minPolicyVersion: next }))
      const scoring = yield* Effect.forkChild(sampler.computeLogprobs(modelInputFromTokens(prompt), { minPolicyVersion: next }))
      const tokens = [...prompt, 50, 51]
      yield* trainer.forwardBackward([datum(tokens, { target_tokens: int64(tokens.map((t, i) => (i < prompt.length ? -100 : t))) })], "cross_entropy")
      yield* trainer.optimStep(adamParams({ learningRate: 1e-2 }))
      // several round trips to the workers later, the pinned calls still wait
      assert.isUndefined(pinned.pollUnsafe())
      assert.isUndefined(scoring.pollUnsafe())
      yield* trainer.saveWeightsForSampler("pinned")
      const result = yield* Fiber.join(pinned)
      assert.strictEqual(result.policyVersion, next)
      assert.strictEqual(result.sequences.length, 2)
      assert.strictEqual((yield* Fiber.join(scoring)).length, prompt.length)
    }))

  it.effect("concurrent sample calls are batched inside the sampler worker", () =>
    Effect.gen(function* () {
      const { sampler, samplerStats } = yield* Threads
      const start = yield* samplerStats
      yield* Effect.forEach(
        Array.from({ length: 8 }, (_, g) => modelInputFromTokens([1, 10 + g, 20, 30, 40 + g])),
        (p) => sampler.sample(p, { maxTokens: 4, temperature: 1 }, { numSamples: 8 }),
        { concurrency: 8 },
      )
      const end = yield* samplerStats
      assert.strictEqual(end.requests - start.requests, 8)
      assert.isAtMost(end.batches - start.batches, 2)
    }))

  it.effect("errors inside a worker come back as BackendErrors, and the worker keeps serving", () =>
    Effect.gen(function* () {
      const { trainer, sampler } = yield* Threads
      const garbage = Path.join(stateDir, "garbage.ckpt")
      Fs.writeFileSync(garbage, "not a checkpoint")
      const e = yield* Effect.flip(trainer.loadState(garbage))
      assert.strictEqual(e._tag, "BackendError")
      assert.strictEqual(e.reason, "InvalidInput")
      assert.include(e.message, "not a checkpoint")
      // invalid requests are rejected on the main thread, naming the field
      const bad = yield* Effect.flip(sampler.sample(modelInputFromTokens([1, 400]), { maxTokens: 3, temperature: 1 }, { numSamples: 1 }))
      assert.strictEqual(bad.reason, "InvalidInput")
      assert.include(bad.message, "prompt token 400")
      const badAdam = yield* Effect.flip(trainer.optimStep(adamParams({ eps: 0 })))
      assert.include(badAdam.message, "eps > 0")
      const ok = yield* sampler.sample(modelInputFromTokens(prompt), { maxTokens: 2, temperature: 1 }, { numSamples: 1 })
      assert.strictEqual(ok.sequences.length, 1)
    }))

  it.effect("saveState and loadState go through the trainer worker", () =>
    Effect.gen(function* () {
      const { trainer } = yield* Threads
      const tokens = [...prompt, 70, 71]
      const saved = yield* trainer.saveState("ckpt-w")
      assert.isTrue(Fs.existsSync(saved.path))
      const version = (yield* trainer.info).version
      const fwd = yield* trainer.forward([datum(tokens, {})], "cross_entropy")
      yield* trainer.forwardBackward([datum(tokens, {})], "cross_entropy")
      yield* trainer.optimStep(adamParams({ learningRate: 1e-2 }))
      yield* trainer.loadState("ckpt-w", { withOptimizer: true })
      assert.strictEqual((yield* trainer.info).version, version)
      const again = yield* trainer.forward([datum(tokens, {})], "cross_entropy")
      assert.deepStrictEqual(again.lossFnOutputs[0]!.logprobs, fwd.lossFnOutputs[0]!.logprobs)
    }))
})

describe("LocalWorkers lifecycle", () => {
  it.effect("samples exactly what the in-process backend samples", () =>
    Effect.gen(function* () {
      const inProcess = yield* Local.make(options)
      const threaded = yield* LocalWorkers.make(options)
      const params = { maxTokens: 8, temperature: 1, seed: 42 }
      const a = yield* inProcess.sampler.sample(modelInputFromTokens(prompt), params, { numSamples: 3 })
      const b = yield* threaded.sampler.sample(modelInputFromTokens(prompt), params, { numSamples: 3 })
      assert.deepStrictEqual(b.sequences.map((s) => s.tokens), a.sequences.map((s) => s.tokens))
      assert.isBelow(maxAbsDiff(b.sequences.flatMap((s) => s.logprobs), a.sequences.flatMap((s) => s.logprobs)), 1e-6)
      assert.strictEqual((yield* threaded.trainer.info).modelName, (yield* inProcess.trainer.info).modelName)
    }))

  it.effect("two trainer threads share each call and train exactly like one trainer", () =>
    Effect.gen(function* () {
      const one = yield* Local.make(options)
      const two = yield* LocalWorkers.make({ ...options, trainerThreads: 2 })
      assert.strictEqual(two.threads.trainers.length, 2)
      const sampled = yield* one.sampler.sample(modelInputFromTokens(prompt), { maxTokens: 8, temperature: 1, seed: 5 }, { numSamples: 7 })
      const data = sampled.sequences.map((s, i) => rlDatum(s.tokens, s.logprobs, [1, -1, 0.5, -0.5, 2, -2, 0.1][i]!))
      const lossConfig = { lossFnConfig: { clip_low_threshold: 0.9, clip_high_threshold: 1.1 } }
      for (let step = 0; step < 2; step++) {
        const a = yield* one.trainer.forwardBackward(data, "ppo", lossConfig)
        const b = yield* two.trainer.forwardBackward(data, "ppo", lossConfig)
        assert.strictEqual(b.lossFnOutputs.length, data.length)
        a.lossFnOutputs.forEach((o, i) => assert.isBelow(maxAbsDiff(o.logprobs, b.lossFnOutputs[i]!.logprobs), 1e-5))
        for (const key of ["loss", "loss:sum", "active_tokens", "clip_fraction"]) {
          assert.closeTo(b.metrics[key]!, a.metrics[key]!, 1e-5, key)
        }
        const sa = yield* one.trainer.optimStep(adamParams({ learningRate: 5e-2 }))
        const sb = yield* two.trainer.optimStep(adamParams({ learningRate: 5e-2 }))
        assert.strictEqual(sb.version, sa.version)
        assert.closeTo(sb.metrics["grad_norm"]!, sa.metrics["grad_norm"]!, 1e-5)
      }
      // every thread holds the stepped weights: a split forward agrees with the single trainer
      const fa = yield* one.trainer.forward(data, "ppo")
      const fb = yield* two.trainer.forward(data, "ppo")
      fa.lossFnOutputs.forEach((o, i) => assert.isBelow(maxAbsDiff(o.logprobs, fb.lossFnOutputs[i]!.logprobs), 1e-4))
      // and so does the sampler after publishing
      yield* two.trainer.saveWeightsForSampler("two")
      const lps = yield* two.sampler.computeLogprobs(data[3]!.modelInput)
      assert.isBelow(maxAbsDiff(lps, fb.lossFnOutputs[3]!.logprobs), 1e-4)
      // loading a state reaches every trainer thread
      const saved = yield* two.trainer.saveState("two-threads")
      yield* two.trainer.forwardBackward(data, "ppo")
      yield* two.trainer.optimStep(adamParams({ learningRate: 5e-2 }))
      yield* two.trainer.loadState(saved.path)
      const again = yield* two.trainer.forward(data, "ppo")
      fb.lossFnOutputs.forEach((o, i) => assert.deepStrictEqual(again.lossFnOutputs[i]!.logprobs, o.logprobs))
    }))

  it.effect("a dead worker fails the calls waiting on it and every later call", () =>
    Effect.gen(function* () {
      const { sampler, trainer, threads } = yield* LocalWorkers.make(options)
      const pending = yield* Effect.forkChild(sampler.sample(modelInputFromTokens(prompt), { maxTokens: 24, temperature: 1 }, { numSamples: 256 }))
      yield* Effect.yieldNow
      yield* Effect.promise(() => threads.sampler.worker.terminate())
      const e = yield* Effect.flip(Fiber.join(pending))
      assert.strictEqual(e._tag, "BackendError")
      assert.strictEqual(e.reason, "Unavailable")
      assert.include(e.message, "sampler worker exited")
      assert.isFalse(threads.sampler.alive)
      const later = yield* Effect.flip(sampler.computeLogprobs(modelInputFromTokens(prompt)))
      assert.strictEqual(later.reason, "Unavailable")
      // the trainer thread is unaffected
      assert.isTrue(threads.trainer.alive)
      const fwd = yield* trainer.forward([datum(prompt, {})], "cross_entropy")
      assert.strictEqual(fwd.lossFnOutputs.length, 1)
    }))

  it.effect("closing the scope terminates both workers", () =>
    Effect.gen(function* () {
      const exits: Array<string> = []
      const threads = yield* Effect.scoped(
        Effect.gen(function* () {
          const s = yield* LocalWorkers.make(options)
          yield* s.sampler.sample(modelInputFromTokens(prompt), { maxTokens: 2, temperature: 1 }, { numSamples: 1 })
          s.threads.trainer.worker.on("exit", () => exits.push("trainer"))
          s.threads.sampler.worker.on("exit", () => exits.push("sampler"))
          return s.threads
        }),
      )
      assert.sameMembers(exits, ["trainer", "sampler"])
      assert.isFalse(threads.trainer.alive)
      assert.isFalse(threads.sampler.alive)
    }))

  it.effect("a model that cannot be loaded fails the layer with the reason", () =>
    Effect.gen(function* () {
      const e = yield* Effect.flip(Effect.scoped(LocalWorkers.make({ modelDir: Path.join(stateDir, "no-such-model") })))
      assert.strictEqual(e.reason, "Unavailable")
      assert.include(e.message, "no-such-model")
    }))
})


describe("Runner on worker threads", () => {
  it.effect("async mode on worker threads (two trainers) learns the toy env, lagging at most maxLag versions", () =>
    Effect.gen(function* () {
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-workers-run-"))
      const settings = toySettings(dir, { saveEvery: 0, logRolloutsEvery: 0, async: true, maxLag: 1 })
      const backend = Local.layer({
        config: { ...tinyConfig, nLayers: 1 },
        seed: 0,
        stateDir: RunLog.paths(dir).state,
        lora: tinyLora,
        workers: true,
        trainerThreads: 2,
      })
      const rows = yield* Runner.run(settings, vowels).pipe(
        Effect.provide(Layer.fresh(backend)),
        Effect.provideService(Runner.Progress, { onStep: () => Effect.void, onPhase: () => Effect.void }),
      )
      assert.strictEqual(rows.length, 30)
      for (const r of rows) assert.isAtMost(r["policy_version/lag_max"]!, 1)
      const mean = (rs: typeof rows) => rs.reduce((s, r) => s + (r["env/all/vowel"] ?? 0), 0) / rs.length
      const first = mean(rows.slice(0, 6))
      const last = mean(rows.slice(-6))
      assert.isAbove(last, first + 0.1, `vowel rate ${first} -> ${last}`)
    }))
})

/**
 * The HTTP client's Reference: a sampling session of the base model and
 * `compute_logprobs` on it, against the embedded backend behind a real server on
 * loopback. Its log-probs are the base model's before and after the client's adapter is
 * trained and published; a server that cannot serve the base model refuses at `check`,
 * saying why.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import * as Client from "../../../src/backends/http/client/Client.ts"
import * as Retry from "../../../src/backends/http/client/Retry.ts"
import * as Serve from "../../../src/backends/local/Serve.ts"
import * as Server from "../../../src/backends/http/server/Server.ts"
import { Local } from "../../../src/backends/local/index.ts"
import { adamParams, modelInputFromTokens } from "../../../src/contract/Contract.ts"
import * as D from "../../../src/vocabulary/Datum.ts"
import * as Reference from "../../../src/services/Reference.ts"
import * as ReferencePenalty from "../../../src/loss/ReferencePenalty.ts"
import { Sampler } from "../../../src/services/Sampler.ts"
import { Trainer } from "../../../src/services/Trainer.ts"

const tinyConfig = { vocabSize: 99, contextLength: 48, nLayers: 2, dModel: 32, nHeads: 2, mlpRatio: 2 }
const tinyLora = { rank: 4, alpha: 8, targets: ["q", "k", "v", "o", "w1", "w2"] as Array<"q" | "k" | "v" | "o" | "w1" | "w2"> }
const stateDir = () => Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-http-reference-"))
const prompt = [1, 40, 41, 42]
const probes = [
  [...prompt, 50, 51, 52],
  [1, 60, 61],
]

const maxAbsDiff = (a: ReadonlyArray<number>, b: ReadonlyArray<number>) => {
  assert.strictEqual(a.length, b.length)
  return a.reduce((m, x, i) => Math.max(m, Math.abs(x - b[i]!)), 0)
}

describe("Reference over HTTP", () => {
  it.live(
    "a sampling session of the base model: the base's log-probs, before and after the adapter is trained and published",
    () =>
      Effect.gen(function* () {
        const backend = yield* Serve.embedded({ config: tinyConfig, lora: tinyLora, seed: 3, stateDir: stateDir() })
        assert.isDefined(backend.models, "the embedded server builds one adapter per model")
        const server = yield* Server.make({ vocabSize: backend.vocabSize, models: backend.models, replicas: backend.replicas }).pipe(
          Effect.provideService(Trainer, backend.trainer),
          Effect.provideService(Sampler, backend.sampler),
        )
        // the base model's own log-probs, straight from the backend
        const base = yield* Effect.forEach(probes, (p) => backend.sampler.computeLogprobs(modelInputFromTokens(p)))
        yield* Effect.gen(function* () {
          const trainer = yield* Trainer
          const sampler = yield* Sampler
          const reference = yield* Reference.Reference
          // a sampler is published before the reference session exists: their ids must not collide
          yield* trainer.saveWeightsForSampler("step-0")
          yield* reference.check
          const ref0 = yield* reference.logprobs(probes.map(modelInputFromTokens))
          ref0.forEach((r, i) => assert.isBelow(maxAbsDiff(r, base[i]!), 1e-6))
          // train the client's adapter hard, publish, and look again
          const sampled = yield* sampler.sample(modelInputFromTokens(prompt), { maxTokens: 4, temperature: 1, seed: 9 }, { numSamples: 8 })
          const data = sampled.sequences.map((s, i) => D.rl({ prompt, completion: s.tokens, samplerLogprobs: s.logprobs, advantage: i % 2 === 0 ? 1 : -1 }))
          yield* trainer.forwardBackward(data, "importance_sampling")
          yield* trainer.optimStep(adamParams({ learningRate: 0.2 }))
          yield* trainer.saveWeightsForSampler("step-1")
          const policy = yield* Effect.forEach(probes, (p) => sampler.computeLogprobs(modelInputFromTokens(p)))
          const ref1 = yield* reference.logprobs(probes.map(modelInputFromTokens))
          ref1.forEach((r, i) => assert.isBelow(maxAbsDiff(r, base[i]!), 1e-6, "the reference stays at the base"))
          assert.isAbove(Math.max(...policy.map((p, i) => maxAbsDiff(p, base[i]!))), 1e-3, "the policy moved")
        }).pipe(Effect.provide(Client.layer({ baseUrl: server.url, retry: Retry.fast })))
      }).pipe(Effect.scoped),
  )

  it.live(
    "a server that trains its one adapter on the base sampler refuses at check, saying why",
    () =>
      Effect.gen(function* () {
        const s = yield* Local.make({ config: tinyConfig, lora: tinyLora, seed: 3, stateDir: stateDir() })
        // no model factory: every model attaches to this one trainer, whose sampler is the base's
        const server = yield* Server.make({ vocabSize: tinyConfig.vocabSize }).pipe(Effect.provideService(Trainer, s.trainer), Effect.provideService(Sampler, s.sampler))
        const e = yield* Effect.flip(ReferencePenalty.ensure(0.1).pipe(Effect.provide(Client.layer({ baseUrl: server.url, retry: Retry.fast }))))
        assert.strictEqual(e._tag, "BackendError")
        assert.strictEqual(e._tag === "BackendError" ? e.reason : undefined, "InvalidInput")
        assert.include(e.message, "--kl-coef 0.1 needs the base model's log-probs")
        assert.include(e.message, "sampling session of the base model")
        assert.include(e.message, "without --workers")
        assert.include(e.message, "--kl-coef 0")
      }).pipe(Effect.scoped),
  )
})

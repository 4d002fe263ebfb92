import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Client from "../../../src/backends/http/client/Client.ts"
import * as Retry from "../../../src/backends/http/client/Retry.ts"
import * as Server from "../../../src/backends/http/server/Server.ts"
import { Local } from "../../../src/backends/local/index.ts"
import { adamParams } from "../../../src/contract/Contract.ts"
import * as D from "../../../src/vocabulary/Datum.ts"
import { Sampler } from "../../../src/services/Sampler.ts"
import { Trainer } from "../../../src/services/Trainer.ts"
import { rlSequence, toySequence } from "./Sequence.ts"
import { makeToy } from "./ToyBackend.ts"

const inProcess = Effect.gen(function* () {
  const toy = makeToy()
  const result = yield* rlSequence(toySequence).pipe(Effect.provideService(Trainer, toy.trainer), Effect.provideService(Sampler, toy.sampler))
  return { result, toy }
})

const overHttp = (wire: "protobuf" | "json") =>
  Effect.gen(function* () {
    const toy = makeToy()
    const server = yield* Server.make({}).pipe(Effect.provideService(Trainer, toy.trainer), Effect.provideService(Sampler, toy.sampler))
    const result = yield* rlSequence(toySequence).pipe(Effect.provide(Client.layer({ baseUrl: server.url, retry: Retry.fast, wire })))
    return { result, toy, server }
  }).pipe(Effect.scoped)

describe("http backend end to end (toy backend)", () => {
  it.live.each(["protobuf", "json"] as const)("an RL sequence over loopback (forward_backward as %s) equals the in-process one", (wire) =>
    Effect.gen(function* () {
      const a = yield* inProcess
      const b = yield* overHttp(wire)
      assert.closeTo(b.result.losses[0]!, a.result.losses[0]!, 1e-5)
      assert.deepStrictEqual(b.result.losses, a.result.losses)
      assert.deepStrictEqual(b.result.versions, [1, 2, 3])
      assert.deepStrictEqual(b.result.sampleVersions, a.result.sampleVersions)
      assert.deepStrictEqual(b.result.samples, a.result.samples)
      assert.deepStrictEqual(b.result.finalLogprobs, a.result.finalLogprobs)
      assert.deepStrictEqual(b.result.forwardLogprobs, a.result.forwardLogprobs)
      assert.deepStrictEqual([...b.toy.weights()], [...a.toy.weights()])
      assert.strictEqual(b.toy.counters.optimSteps, 3)
      assert.strictEqual(b.result.info.version, 3)
    }),
  )
})

// ---------------------------------------------------------------------------
// the embedded backend (tiny random-init config)

const tinyConfig = { vocabSize: 99, contextLength: 48, nLayers: 2, dModel: 32, nHeads: 2, mlpRatio: 2 }
const tinyLora = { rank: 4, alpha: 8, targets: ["q", "k", "v", "o", "w1", "w2"] as const }
const embeddedSequence = {
  ...toySequence,
  steps: 2,
  groups: 8,
  groupSize: 8,
  maxTokens: 8,
  learningRate: 5e-2,
  rewarded: 40,
  prompts: [
    [1, 40, 41, 42],
    [1, 50, 60],
    [1, 70, 71, 72, 73],
    [1, 33, 34],
  ],
  probe: [1, 40, 41, 42, 40, 40, 50],
}

const embedded = Local.make({ config: tinyConfig, lora: { ...tinyLora, targets: [...tinyLora.targets] }, seed: 7, stateDir: "tmp/http-test-state" })

describe("http backend end to end (embedded backend)", () => {
  it.live(
    "forward_backward + optim_step + publish + pinned sampling match the in-process backend",
    () =>
      Effect.gen(function* () {
        const a = yield* Effect.flatMap(embedded, (s) =>
          rlSequence(embeddedSequence).pipe(Effect.provideService(Trainer, s.trainer), Effect.provideService(Sampler, s.sampler)),
        )
        const b = yield* Effect.gen(function* () {
          const s = yield* embedded
          const server = yield* Server.make({ vocabSize: tinyConfig.vocabSize }).pipe(
            Effect.provideService(Trainer, s.trainer),
            Effect.provideService(Sampler, s.sampler),
          )
          return yield* rlSequence(embeddedSequence).pipe(Effect.provide(Client.layer({ baseUrl: server.url, retry: Retry.fast })))
        })
        assert.notStrictEqual(a.losses[0], 0)
        assert.closeTo(b.losses[0]!, a.losses[0]!, 1e-5)
        b.losses.forEach((l, i) => assert.closeTo(l, a.losses[i]!, 1e-4))
        assert.deepStrictEqual(b.versions, a.versions)
        assert.deepStrictEqual(b.sampleVersions, [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1])
        assert.strictEqual(b.finalLogprobs.length, embeddedSequence.probe.length)
        b.finalLogprobs.forEach((l, i) => assert.closeTo(l, a.finalLogprobs[i]!, 1e-4))
        b.forwardLogprobs.forEach((l, i) => assert.closeTo(l, a.forwardLogprobs[i]!, 1e-4))
      }).pipe(Effect.scoped),
  )
})

describe("checkpoints over http", () => {
  it.live("save_weights returns a tinker:// path, and load_weights restores it", () =>
    Effect.gen(function* () {
      const toy = makeToy()
      const server = yield* Server.make({}).pipe(Effect.provideService(Trainer, toy.trainer), Effect.provideService(Sampler, toy.sampler))
      yield* Effect.gen(function* () {
        const trainer = yield* Trainer
        const data = [D.rl({ prompt: [1, 2], completion: [3, 4, 5], samplerLogprobs: [-1, -1, -1], advantage: 1 })]
        yield* trainer.forwardBackward(data, "importance_sampling")
        yield* trainer.optimStep(adamParams({ learningRate: 0.5 }))
        const saved = yield* trainer.saveState("ck-1")
        assert.match(saved.path, /^tinker:\/\/.+:train:0\/weights\/ck-1$/)
        const atSave = [...toy.weights()]
        yield* trainer.forwardBackward(data, "importance_sampling")
        yield* trainer.optimStep(adamParams({ learningRate: 0.5 }))
        assert.notDeepEqual([...toy.weights()], atSave)
        assert.strictEqual((yield* trainer.info).version, 2)
        yield* trainer.loadState(saved.path, { withOptimizer: true })
        assert.deepStrictEqual([...toy.weights()], atSave)
        assert.strictEqual((yield* trainer.info).version, 1)
        const missing = yield* Effect.flip(trainer.loadState("tinker://elsewhere/weights/nope"))
        assert.strictEqual(missing.reason, "InvalidInput")
      }).pipe(Effect.provide(Client.layer({ baseUrl: server.url, retry: Retry.fast })))
    }).pipe(Effect.scoped),
  )
})

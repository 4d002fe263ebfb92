/**
 * A run's errors keep what they wrap: a sampler's `BackendError` and an env's
 * `EpisodeError` stay reachable as `RunError.cause`, not only as text in the message.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import * as CharTokenizer from "../../src/backends/local/CharTokenizer.ts"
import { BackendError } from "../../src/contract/Contract.ts"
import * as Env from "../../src/vocabulary/Env.ts"
import * as Episode from "../../src/env/Episode.ts"
import * as Reward from "../../src/vocabulary/Reward.ts"
import { ContextLength, playGroup } from "../../src/run/Rollout.ts"
import { Sampler } from "../../src/services/Sampler.ts"
import { Tokenizer } from "../../src/services/Tokenizer.ts"
import { scriptedSampler } from "./ScriptedSampler.ts"

const env = (episode?: Episode.Episode<unknown, any, never>) =>
  Env.make({ name: "e", problem: Schema.Struct({}), source: Env.rows([{}]), prompt: () => "Hi", reward: Reward.make("one", () => 1), ...(episode ? { episode } : {}) })

const play = (e: Env.AnyEnv, sampler: Sampler["Service"]) =>
  playGroup({ env: e, task: { key: "k", env: "e", problem: {} }, promptTokens: [1, 40], sampling: { maxTokens: 2, temperature: 1 }, numSamples: 1, affinityKey: "a", version: 0, step: 3 }).pipe(
    Effect.provideService(Tokenizer, CharTokenizer.make()),
    Effect.provideService(Sampler, sampler),
    Effect.provideService(ContextLength, 32),
    Effect.flip,
  )

describe("RunError.cause", () => {
  it.effect("a sampler's failure", () =>
    Effect.gen(function* () {
      const refusing = Sampler.of({
        sample: () => Effect.fail(new BackendError({ reason: "Unavailable", operation: "sample", message: "down" })),
        computeLogprobs: () => Effect.die("unused"),
        version: Effect.succeed(0),
      })
      const e = yield* play(env(), refusing)
      assert.deepStrictEqual([e._tag, e.reason, e.step], ["RunError", "Backend", 3])
      assert.instanceOf(e.cause, BackendError)
      assert.strictEqual((e.cause as BackendError).reason, "Unavailable")
    }))

  it.effect("an env's failure", () =>
    Effect.gen(function* () {
      const failing = Episode.make({ initial: () => 0, step: () => Effect.fail(new Episode.EpisodeError({ message: "broken" })), limits: { maxTurns: 2 } })
      const e = yield* play(env(failing), scriptedSampler(() => "x").service)
      assert.strictEqual(e.reason, "Env")
      assert.instanceOf(e.cause, Episode.EpisodeError)
    }))
})

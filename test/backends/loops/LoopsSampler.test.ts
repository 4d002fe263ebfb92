/**
 * The Loops sampler's reading of vLLM's `/v1/completions` answer (`LoopsSampler.ts`),
 * through a test double of the transport: prompt log-probs are read from the choice,
 * where vLLM puts them (`choices[i].prompt_logprobs`), else from the top of the answer.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { modelInputFromTokens } from "../../../src/contract/Contract.ts"
import * as Retry from "../../../src/backends/http/client/Retry.ts"
import * as LoopsSampler from "../../../src/backends/loops/LoopsSampler.ts"
import { fakeTransport } from "./FakeTransport.ts"

const promptLogprobs = [null, { "7": { logprob: -1.5 } }, { "8": { logprob: -2.5 } }]
const choice = { index: 0, logprobs: { tokens: ["token_id:5"], token_logprobs: [-0.25] }, finish_reason: "length" }

/** A sampler whose completions answer `completion`. */
const samplerAnswering = (completion: unknown) => {
  const t = fakeTransport(({ path }) => (path === "/v1/models" ? { body: { data: [{ id: "base" }] } } : { body: completion }))
  return LoopsSampler.make({ transport: t.transport, retry: Retry.fast, readyTimeout: "1 minute", trainerVersion: Effect.succeed(0) })
}

describe("Loops sampler: prompt log-probs", () => {
  it.effect("are read from the choice, as vLLM answers", () =>
    Effect.gen(function* () {
      const sampler = samplerAnswering({ choices: [{ ...choice, prompt_logprobs: promptLogprobs }] })
      assert.deepStrictEqual(yield* sampler.computeLogprobs(modelInputFromTokens([6, 7, 8])), [0, -1.5, -2.5])
    }))

  it.effect("are read from the top of the answer when no choice carries them", () =>
    Effect.gen(function* () {
      const sampler = samplerAnswering({ choices: [choice], prompt_logprobs: promptLogprobs })
      assert.deepStrictEqual(yield* sampler.computeLogprobs(modelInputFromTokens([6, 7, 8])), [0, -1.5, -2.5])
    }))

  it.effect("missing everywhere, they fail naming the position and the token", () =>
    Effect.gen(function* () {
      const e = yield* Effect.flip(samplerAnswering({ choices: [choice] }).computeLogprobs(modelInputFromTokens([6, 7, 8])))
      assert.include(e.message, "prompt_logprobs[1] has no log-prob for the prompt's token 7")
    }))
})

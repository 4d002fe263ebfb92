/**
 * A tool result that is not a string, number or JSON value (undefined, a symbol, a
 * function, a bigint, a circular object), or that its result Schema rejects, is an error
 * observation for the model, counted in tool_errors, and its whole message goes with the
 * turn in the rollout rows (`toolError`), however short the syntax cuts the observation.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import * as Env from "../../src/vocabulary/Env.ts"
import * as Reward from "../../src/vocabulary/Reward.ts"
import { sampleRows } from "../../src/run/Collect.ts"
import * as Tool from "../../src/vocabulary/Tool.ts"
import { playOne, scriptedSampler } from "../run/ScriptedSampler.ts"

const Problem = Schema.Struct({ n: Schema.Int })

const envOf = (tool: Tool.AnyTool) =>
  Env.make({
    name: "odd",
    problem: Problem,
    source: Env.seeded(({ random }) => ({ n: random.int(0, 9) })),
    prompt: ({ n }) => `n=${n}:`,
    reward: Reward.make("zero", () => 0),
    episode: Tool.episode({ tools: [tool], syntax: Tool.brackets }),
  })


/** one episode that calls the tool once, then answers " ok"; and its rollout row */
const rowOf = (tool: Tool.AnyTool) =>
  Effect.gen(function* () {
    const env = envOf(tool)
    const task = { key: "odd/train/0/0", env: "odd", problem: { n: 4 } }
    const { episodes } = yield* playOne({ env, task, prompt: "n=4:", maxTokens: 40, sampler: scriptedSampler((text) => (text.includes(";") ? " ok" : "[odd]")).service })
    const e = episodes[0]!
    const [row] = sampleRows({
      task: { ...task, envDef: env },
      index: 0,
      promptTokens: [],
      prompt: "n=4:",
      version: 0,
      rollouts: [{ problem: { n: 4 }, prompt: "n=4:", completion: " ok", tokens: [], stopReason: "stop", index: 0, groupSize: 1 }],
      episodes,
      scores: [{ value: 0, masked: undefined, components: { zero: 0 } }],
    })
    return { episode: e, turn: (row as { turns: Array<{ observation?: string; toolError?: string }> }).turns[0]! }
  })

describe("a tool result with no text", () => {
  const circular: Record<string, unknown> = {}
  circular["self"] = circular
  const cases: Array<[string, Tool.AnyTool, RegExp]> = [
    ["undefined", Tool.make({ name: "odd", args: Schema.Struct({}), run: () => undefined }), /^returned undefined, which is not a string, number or JSON value$/],
    ["a symbol", Tool.make({ name: "odd", args: Schema.Struct({}), run: () => Symbol("x") }), /^returned a symbol \(Symbol\(x\)\), which is not a string, number or JSON value$/],
    ["a function", Tool.make({ name: "odd", args: Schema.Struct({}), run: () => () => 1 }), /^returned a function, which is not a string, number or JSON value$/],
    ["a bigint", Tool.make({ name: "odd", args: Schema.Struct({}), run: () => 10n }), /^returned a bigint \(10n\), which is not a string, number or JSON value$/],
    ["a circular object", Tool.make({ name: "odd", args: Schema.Struct({}), run: () => circular }), /^returned an object \(\[object Object\]\), which is not a string, number or JSON value: .*circular/i],
    ["what its result Schema rejects", Tool.make({ name: "odd", args: Schema.Struct({}), result: Schema.Number, run: () => "not a number" as unknown as number }), /not a number/],
  ]
  for (const [what, tool, message] of cases) {
    it.effect(`${what}: an error observation, and the whole message with the turn`, () =>
      Effect.gen(function* () {
        const { episode, turn } = yield* rowOf(tool)
        assert.strictEqual(episode.toolErrors, 1)
        assert.match(turn.observation!, /^=error: /)
        assert.match(turn.toolError!, message)
        // the observation may cut the message; the row keeps all of it
        assert.isAtLeast(turn.toolError!.length, turn.observation!.length - "=error: ;".length)
        assert.include(turn.toolError!, turn.observation!.slice("=error: ".length, -1))
      }))
  }
})

/**
 * Episodes through the runner's collection path, with a scripted sampler double: which
 * tokens are sampled and which observed, which positions train, stop reasons, tool
 * failures, parse policies, limits and a failing env step.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import * as CharTokenizer from "../../src/backends/local/CharTokenizer.ts"
import * as Datum from "../../src/vocabulary/Datum.ts"
import * as Env from "../../src/vocabulary/Env.ts"
import * as Episode from "../../src/env/Episode.ts"
import * as Reward from "../../src/vocabulary/Reward.ts"
import { ContextLength, playGroup } from "../../src/run/Rollout.ts"
import { Sampler } from "../../src/services/Sampler.ts"
import * as Tool from "../../src/vocabulary/Tool.ts"
import { Tokenizer } from "../../src/services/Tokenizer.ts"
import calculator, { calc } from "../../envs/calculator.ts"
import { scriptedSampler } from "./ScriptedSampler.ts"

const tokenizer = CharTokenizer.make()
const enc = (text: string) => {
  const e = CharTokenizer.encodeChars(text)
  if (!("ids" in e)) throw new Error(text)
  return e.ids
}
const problem = { a: 47, b: 38, op: "plus" as const }
const task = { key: "calculator/train/0/0", env: "calculator", problem }
const prompt = [CharTokenizer.BOS, ...enc("What is 47 plus 38?")]

const play = (
  env: Env.AnyEnv,
  reply: (text: string, i: number) => string,
  options: { readonly numSamples?: number; readonly context?: number; readonly toolCalls?: "hermes"; readonly maxTokens?: number } = {},
) => {
  const double = scriptedSampler(reply)
  return playGroup({
    env,
    task: { ...task, env: env.name },
    promptTokens: prompt,
    sampling: { maxTokens: options.maxTokens ?? 8, temperature: 1, seed: 1 },
    numSamples: options.numSamples ?? 1,
    affinityKey: "k",
    version: 0,
    step: 0,
  }).pipe(
    Effect.provideService(Tokenizer, options.toolCalls !== undefined ? { ...tokenizer, toolCalls: options.toolCalls } : tokenizer),
    Effect.provideService(Sampler, double.service),
    Effect.provideService(ContextLength, options.context ?? 48),
    Effect.map((out) => ({ ...out, calls: double.calls })),
  )
}

/** the calculator policy: call on the first turn, then answer with what the tool said */
const caller = (text: string) => {
  const obs = /=(-?\d+);$/.exec(text)
  return obs ? ` ${obs[1]}` : "[47+38]"
}

describe("a tool episode", () => {
  it.effect("samples a call, observes the result, samples the answer; only sampled tokens train", () =>
    Effect.gen(function* () {
      const { episodes, calls } = yield* play(calculator, caller)
      const e = episodes[0]!
      assert.strictEqual(e.stop, "completed")
      assert.strictEqual(e.toolCalls, 1)
      assert.deepStrictEqual(e.turns.map((t) => [t.text, t.observation]), [["[47+38]", "=85;"], [" 85", undefined]])
      assert.deepStrictEqual(calls.map((c) => c.prompt), ["What is 47 plus 38?", "What is 47 plus 38?[47+38]=85;"])
      // the second turn's input is the first turn's input ++ its sampled tokens ++ the observation
      assert.deepStrictEqual(e.turns[1]!.input, [...prompt, ...enc("[47+38]"), ...enc("=85;")])
      const data = Datum.episode(e.turns, 0.5)
      assert.strictEqual(data.length, 1)
      const adv = data[0]!.lossFnInputs["advantages"]!.data
      const lps = data[0]!.lossFnInputs["logprobs"]!.data
      const P = prompt.length
      const call = enc("[47+38]").length
      const obs = enc("=85;").length
      const answer = enc(" 85").length + 1
      const trained = adv.flatMap((a, i) => (a !== 0 ? [i] : []))
      const expected = [
        ...Array.from({ length: call }, (_, j) => P + j),
        ...Array.from({ length: answer }, (_, j) => P + call + obs + j),
      ]
      assert.deepStrictEqual(trained, expected)
      // each trained position carries the sampler's log-prob of that token; the rest 0
      assert.deepStrictEqual(expected.map((i) => lps[i]), [...Array.from({ length: call }, (_, j) => -0.01 * (j + 1)), ...Array.from({ length: answer }, (_, j) => -0.01 * (j + 1))])
      assert.isTrue(lps.every((v, i) => expected.includes(i) || v === 0))
      assert.isUndefined(Datum.checkAll(data, "ppo", { vocabSize: CharTokenizer.VOCAB_SIZE }))
    }))

  it.effect("a direct answer is a one-turn episode", () =>
    Effect.gen(function* () {
      const { episodes } = yield* play(calculator, () => " 85")
      assert.strictEqual(episodes[0]!.turns.length, 1)
      assert.strictEqual(episodes[0]!.toolCalls, 0)
      assert.strictEqual(episodes[0]!.stop, "completed")
    }))

  it.effect("a malformed call ends the episode with parse_error, or is observed, as the policy says", () =>
    Effect.gen(function* () {
      const ended = yield* play(calculator, () => "[47+ab]")
      assert.strictEqual(ended.episodes[0]!.stop, "parse_error")
      assert.strictEqual(ended.episodes[0]!.parseErrors, 1)
      const observing = Env.make({ ...calculator, name: "calc-observe", episode: Tool.episode({ tools: [calc], onParseError: "observe", limits: { maxTurns: 2 } }) })
      const observed = yield* play(observing, (text) => (text.endsWith(";") ? " 85" : "[47+ab]"), { context: 128 })
      const e = observed.episodes[0]!
      assert.strictEqual(e.stop, "completed")
      assert.strictEqual(e.parseErrors, 1)
      assert.match(e.turns[0]!.observation!, /^=error: bad arguments for calc/)
    }))

  it.live("a tool that throws, hangs or returns what its Schema rejects is an error observation, not a crash", () =>
    Effect.gen(function* () {
      const args = Schema.Struct({})
      const tools = {
        throws: Tool.make({ name: "throws", args, run: () => { throw new Error("boom") } }),
        hangs: Tool.make({ name: "hangs", args, timeout: "20 millis", run: () => Effect.never }),
        lies: Tool.make({ name: "lies", args, result: Schema.Number, run: () => "not a number" as unknown as number }),
        fails: Tool.make({ name: "fails", args, run: () => Effect.fail(new Tool.ToolFailure({ message: "no such file" })) }),
      }
      for (const [name, tool] of Object.entries(tools)) {
        const env = Env.make({ ...calculator, name: `tool-${name}`, episode: Tool.episode({ tools: [tool], limits: { maxTurns: 2 } }) })
        const { episodes } = yield* play(env, (text) => (text.endsWith(";") ? " 1" : `[${name}]`), { context: 128 })
        const e = episodes[0]!
        assert.strictEqual(e.toolErrors, 1, name)
        assert.strictEqual(e.stop, "completed", name)
        assert.match(e.turns[0]!.observation!, /^=error: /, name)
      }
    }))

  it.effect("limits: max tool calls, max turns, context overflow, max tokens", () =>
    Effect.gen(function* () {
      const always = () => "[47+38]"
      assert.strictEqual((yield* play(calculator, always, { context: 64 })).episodes[0]!.stop, "max_tool_calls")
      const manyCalls = Env.make({ ...calculator, name: "calc-turns", episode: Tool.episode({ tools: [calc], limits: { maxTurns: 2, maxToolCalls: 9 } }) })
      const turns = (yield* play(manyCalls, always)).episodes[0]!
      assert.strictEqual(turns.stop, "max_turns")
      assert.strictEqual(turns.turns.length, 2)
      assert.strictEqual((yield* play(calculator, always, { context: 30 })).episodes[0]!.stop, "context_overflow")
      const short = Env.make({ ...calculator, name: "calc-tokens", episode: Tool.episode({ tools: [calc], limits: { maxTokens: 11 } }) })
      assert.strictEqual((yield* play(short, always)).episodes[0]!.stop, "max_tokens")
    }))

  it.effect("an env step that throws stops the run naming the env, the turn and the problem", () =>
    Effect.gen(function* () {
      const broken = Env.make({
        ...calculator,
        name: "broken",
        episode: Episode.make({ initial: () => 0, step: (turn) => (turn.index === 1 ? Effect.die(new Error("kaput")) : Effect.succeed(Episode.observe(0, " ok?"))) }),
      })
      const error = yield* Effect.flip(play(broken, () => " 1"))
      assert.strictEqual(error._tag, "RunError")
      assert.match(error.message, /^env broken, turn 2 of problem calculator\/train\/0\/0 .*the env's step failed: kaput/)
    }))

  it.effect("per-turn rewards and G episodes of one problem in one first request", () =>
    Effect.gen(function* () {
      const env = Env.make({
        ...calculator,
        name: "two",
        reward: Reward.make("zero", () => 0),
        episode: Episode.make({ initial: () => 0, step: (turn) => Effect.succeed(turn.index === 0 ? Episode.observe(1, "?", { reward: 0.25 }) : Episode.end(2, { reward: 0.5 })) }),
      })
      const { episodes, calls } = yield* play(env, (_, i) => ` ${i}`, { numSamples: 4 })
      assert.strictEqual(episodes.length, 4)
      assert.deepStrictEqual(episodes.map((e) => e.turnReward), [0.75, 0.75, 0.75, 0.75])
      // one request for the G first turns, then one per episode per turn
      assert.strictEqual(calls.length, 1 + 4)
    }))
})

describe("the call format follows the tokenizer", () => {
  it.effect("Tool.episode's default syntax is the chat template's (hermes) with such a tokenizer, brackets otherwise", () =>
    Effect.gen(function* () {
      const auto = Env.make({ ...calculator, name: "calc-auto", episode: Tool.episode({ tools: [calc] }) })
      const call = `<tool_call>\n{"name": "calc", "arguments": {"a": 47, "op": "+", "b": 38}}\n</tool_call>`
      const chat = yield* play(auto, (text) => (text.endsWith("assistant\n") ? " 85" : `${call} and more`), { context: 512, toolCalls: "hermes", maxTokens: 100 })
      const e = chat.episodes[0]!
      assert.strictEqual(e.toolCalls, 1)
      // the turn stopped at </tool_call>, and the result came back as a tool turn
      assert.strictEqual(e.turns[0]!.text, call)
      assert.strictEqual(e.turns[0]!.observation, Tool.hermes.observation({ ok: true, text: "85" }))
      assert.strictEqual(e.turns[1]!.text, " 85")
      const plain = yield* play(auto, caller)
      assert.deepStrictEqual(plain.episodes[0]!.turns.map((t) => t.observation), ["=85;", undefined])
    }))
})

describe("Datum.episode", () => {
  it("cuts one Datum per turn when a turn's input does not extend the last", () => {
    const turns = [
      { input: [1, 10, 11], sampled: [20, 21], logprobs: [-0.1, -0.2] },
      // re-rendered: the earlier turn is not a prefix
      { input: [1, 10, 12, 30], sampled: [22, 2], logprobs: [-0.3, -0.4] },
    ]
    assert.isFalse(Datum.mergeable(turns))
    const data = Datum.episode(turns, 2)
    assert.strictEqual(data.length, 2)
    assert.deepStrictEqual(data[1]!.lossFnInputs["advantages"]!.data, [0, 0, 0, 0, 2, 2])
    const merged = Datum.episode([turns[0]!, { input: [1, 10, 11, 20, 21, 40], sampled: [22], logprobs: [-0.5] }], 1)
    assert.strictEqual(merged.length, 1)
    assert.deepStrictEqual(merged[0]!.lossFnInputs["advantages"]!.data, [0, 0, 0, 1, 1, 0, 1])
    assert.deepStrictEqual(merged[0]!.lossFnInputs["logprobs"]!.data, [0, 0, 0, -0.1, -0.2, 0, -0.5])
  })
})

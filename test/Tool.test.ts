/**
 * Tools that see their episode (the problem, the turns so far, a per-episode state made at
 * the start and released at the end however the episode ends), per-episode services
 * (`Episode.provide`), and what the model sees of a result that has no text or is too long.
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Exit, Fiber, Layer, Schema } from "effect"
import * as Env from "../src/vocabulary/Env.ts"
import * as Episode from "../src/env/Episode.ts"
import * as Reward from "../src/vocabulary/Reward.ts"
import { sampleRows } from "../src/run/Collect.ts"
import { Sampler } from "../src/services/Sampler.ts"
import * as Tool from "../src/vocabulary/Tool.ts"
import { playOne, scriptedSampler } from "./run/ScriptedSampler.ts"

const Problem = Schema.Struct({ n: Schema.Int })
type Problem = typeof Problem.Type

const envWith = (episode: Episode.Episode<Problem, any, any>) =>
  Env.make({
    name: "tools",
    problem: Problem,
    source: Env.seeded(({ random }) => ({ n: random.int(0, 9) })),
    prompt: ({ n }) => `n=${n}:`,
    reward: Reward.make("zero", () => 0),
    episode: episode as Episode.Episode<Problem, unknown, never>,
  })


/** plays one episode of `episode` on problem {n: 4} with a scripted policy (or sampler) */
const play = (episode: Episode.Episode<Problem, any, any>, reply: (text: string) => string, sampler?: Sampler["Service"]) =>
  playOne({ env: envWith(episode), task: { key: "tools/train/0/0", env: "tools", problem: { n: 4 } }, prompt: "n=4:", maxTokens: 40, sampler: sampler ?? scriptedSampler(reply).service }).pipe(
    Effect.map((out) => out.episodes[0]!),
  )

/** calls `[name]` on the first turn, then answers " ok" */
const callOnce = (name: string) => (text: string) => (text.includes(";") ? " ok" : `[${name}]`)

const lifecycle = (log: Array<string>) =>
  Tool.make({
    name: "lease",
    args: Schema.Struct({}),
    state: (problem: Problem) =>
      Effect.acquireRelease(
        Effect.sync(() => (log.push(`open ${problem.n}`), { leased: problem.n })),
        () => Effect.sync(() => log.push("close")),
      ),
    run: (_, { state }) => `leased ${state.leased}`,
  })

describe("a tool sees its episode", () => {
  it.effect("the problem, the turns so far and its own state", () =>
    Effect.gen(function* () {
      const seen: Array<Tool.ToolContext<Problem, { calls: number }>> = []
      const probe = Tool.make({
        name: "probe",
        args: Schema.Struct({}),
        state: () => ({ calls: 0 }),
        run: (_, context: Tool.ToolContext<Problem, { calls: number }>) => {
          seen.push({ ...context, state: { ...context.state } })
          context.state.calls++
          return `n${context.problem.n}`
        },
      })
      const e = yield* play(Tool.episode({ tools: [probe], syntax: Tool.brackets, limits: { maxTurns: 3 } }), (text) => ((text.match(/\[/g)?.length ?? 0) < 2 ? "[probe]" : " done"))
      assert.deepStrictEqual(e.turns.map((t) => [t.text, t.observation]), [["[probe]", "=n4;"], ["[probe]", "=n4;"], [" done", undefined]])
      assert.deepStrictEqual(seen.map((c) => c.problem), [{ n: 4 }, { n: 4 }])
      assert.deepStrictEqual(seen.map((c) => c.turns), [[{ text: "[probe]" }], [{ text: "[probe]", observation: "=n4;" }, { text: "[probe]" }]])
      // the same state object for the whole episode
      assert.deepStrictEqual(seen.map((c) => c.state.calls), [0, 1])
    }))

  it.effect("one-argument handlers still work, and a tool called outside an episode sees no problem", () =>
    Effect.gen(function* () {
      const plain = Tool.make({ name: "plain", args: Schema.Struct({ a: Schema.Int }), run: ({ a }) => a + 1 })
      assert.strictEqual(yield* plain.run({ a: 1 }), "2")
      const context = Tool.make({ name: "ctx", args: Schema.Struct({}), run: (_, c: Tool.ToolContext<unknown>) => `${c.problem}/${c.turns.length}` })
      assert.strictEqual(yield* context.run({}), "undefined/0")
      // a tool with a per-episode state, called outside an episode: an error naming what to do, not a TypeError from inside the handler
      const check = Tool.make({ name: "check", args: Schema.Int, state: () => ({ hi: 7 }), run: (n, { state }) => (n < state.hi ? "higher" : "lower") })
      const failure = yield* Effect.flip(check.run(5))
      assert.include(failure.message, "tool check keeps a per-episode state: call it in an episode")
      assert.strictEqual(yield* check.run(5, { problem: undefined, turns: [], state: { hi: 7 } }), "higher")
    }))

  it.effect("its state is made when the episode starts and released when it ends", () =>
    Effect.gen(function* () {
      const log: Array<string> = []
      const e = yield* play(Tool.episode({ tools: [lifecycle(log)], syntax: Tool.brackets }), callOnce("lease"))
      assert.strictEqual(e.turns[0]!.observation, "=leased 4;")
      assert.deepStrictEqual(log, ["open 4", "close"])
    }))

  it.live("and released when the episode times out, fails or is interrupted", () =>
    Effect.gen(function* () {
      // the second turn never comes: the episode's timeout ends it
      const hangs = (first: string): Sampler["Service"] => {
        const scripted = scriptedSampler(() => first).service
        let calls = 0
        return { ...scripted, sample: (...args) => (calls++ === 0 ? scripted.sample(...args) : Effect.never) }
      }
      const log: Array<string> = []
      const timed = yield* play(Tool.episode({ tools: [lifecycle(log)], syntax: Tool.brackets, limits: { timeout: "50 millis" } }), () => "", hangs("[lease]"))
      assert.strictEqual(timed.stop, "timeout")
      assert.deepStrictEqual(log, ["open 4", "close"])

      log.length = 0
      const fiber = yield* Effect.forkChild(play(Tool.episode({ tools: [lifecycle(log)], syntax: Tool.brackets }), () => "", hangs("[lease]")))
      while (log.length === 0) yield* Effect.sleep("5 millis")
      yield* Effect.sleep("20 millis")
      yield* Fiber.interrupt(fiber)
      assert.deepStrictEqual(log, ["open 4", "close"])

      // a step that fails stops the run; what the episode opened is closed first
      log.length = 0
      const failing = Episode.make({
        open: (problem: Problem) => Effect.acquireRelease(Effect.sync(() => (log.push(`open ${problem.n}`), 0)), () => Effect.sync(() => log.push("close"))),
        step: () => Effect.die(new Error("kaput")),
      })
      const exit = yield* Effect.exit(play(failing, () => " 1"))
      assert.isTrue(Exit.isFailure(exit))
      assert.deepStrictEqual(log, ["open 4", "close"])
    }))

})

describe("a tool's infrastructure failing", () => {
  it.effect("a state that cannot be made masks the episode (its infrastructure failed), naming the tool", () =>
    Effect.gen(function* () {
      const broken = Tool.make({
        name: "broken",
        args: Schema.Struct({}),
        state: () => Effect.fail(new Tool.ToolFailure({ message: "no sandbox left" })),
        run: () => "x",
      })
      const e = yield* play(Tool.episode({ tools: [broken], syntax: Tool.brackets }), callOnce("broken"))
      assert.strictEqual(e.stop, "infra_failed")
      assert.strictEqual(e.infra?.source, "broken")
      assert.include(e.infra?.reason, "tool broken: cannot make its state for the episode: no sandbox left")
    }))

  it.effect("a handler failing with InfraFault masks the episode; one failing with ToolFailure is an observation", () =>
    Effect.gen(function* () {
      const lost = Tool.make({ name: "lost", args: Schema.Struct({}), run: () => Effect.fail(new Tool.InfraFault({ message: "the server went away" })) })
      const e = yield* play(Tool.episode({ tools: [lost], syntax: Tool.brackets }), callOnce("lost"))
      assert.strictEqual(e.stop, "infra_failed")
      assert.deepStrictEqual(e.infra, { reason: "tool lost: the server went away", source: "lost" })
      const answers = Tool.make({ name: "answers", args: Schema.Struct({}), run: () => Effect.fail(new Tool.ToolFailure({ message: "no such item" })) })
      const o = yield* play(Tool.episode({ tools: [answers], syntax: Tool.brackets }), callOnce("answers"))
      assert.notStrictEqual(o.stop, "infra_failed")
      assert.strictEqual(o.toolErrors, 1)
      assert.isUndefined(o.infra)
    }))
})

class Scratch extends Context.Service<Scratch, { readonly lines: Array<string> }>()("test/Scratch") {}

describe("Episode.provide", () => {
  it.effect("builds the layer for each episode and closes it at its end; the tools get its services", () =>
    Effect.gen(function* () {
      const log: Array<string> = []
      const write = Tool.make({
        name: "write",
        args: Schema.String,
        run: (text) => Scratch.use((s) => Effect.sync(() => (s.lines.push(text), s.lines.length))),
      })
      const scratch = (problem: Problem) =>
        Layer.effect(
          Scratch,
          Effect.acquireRelease(Effect.sync(() => (log.push(`build ${problem.n}`), { lines: [] as Array<string> })), (s) => Effect.sync(() => log.push(`close ${s.lines.join(",")}`))),
        )
      const episode = Episode.provide(Tool.episode({ tools: [write], syntax: Tool.brackets, limits: { maxTurns: 3 } }), scratch)
      const policy = (text: string) => ((text.match(/\[/g)?.length ?? 0) < 2 ? "[a]" : " done")
      const first = yield* play(episode, policy)
      assert.deepStrictEqual(first.turns.map((t) => t.observation), ["=1;", "=2;", undefined])
      yield* play(episode, policy)
      // a fresh scratch per episode
      assert.deepStrictEqual(log, ["build 4", "close a,a", "build 4", "close a,a"])
    }))

  it("refuses what is not a layer", () => {
    assert.throws(() => Episode.provide(Episode.singleTurn, 42 as never), /give a Layer/)
  })
})

describe("what the model sees of a result", () => {
  const returning = (value: () => unknown) => Tool.make({ name: "odd", args: Schema.Struct({}), run: value })

  it.effect("a value with no text is the tool's failure, naming what it was", () =>
    Effect.gen(function* () {
      const circular: Record<string, unknown> = {}
      circular["self"] = circular
      const cases: Array<[string, () => unknown, RegExp]> = [
        ["undefined", () => undefined, /^returned undefined, which is not a string, number or JSON value$/],
        ["symbol", () => Symbol("x"), /^returned a symbol \(Symbol\(x\)\)/],
        ["circular", () => circular, /^returned an object \(\[object Object\]\), which is not a string, number or JSON value: .*circular/i],
        ["function", () => () => 1, /^returned a function/],
        ["bigint", () => 10n, /^returned a bigint \(10n\)/],
      ]
      for (const [what, value, message] of cases) {
        const exit = yield* Effect.exit(returning(value).run({}))
        assert.isTrue(Exit.isFailure(exit), what)
        if (Exit.isFailure(exit)) assert.match((exit.cause.reasons[0] as unknown as { error: Tool.ToolFailure }).error.message, message, what)
      }
      // strings, numbers and JSON values are shown
      assert.strictEqual(yield* returning(() => ({ a: [1, null] })).run({}), `{"a":[1,null]}`)
      assert.strictEqual(yield* returning(() => null).run({}), "null")
      assert.strictEqual(yield* returning(() => false).run({}), "false")
      const badFormat = Tool.make({ name: "fmt", args: Schema.Struct({}), run: () => 1, format: () => undefined as unknown as string })
      const exit = yield* Effect.exit(badFormat.run({}))
      assert.isTrue(Exit.isFailure(exit))
    }))

  it.effect("in an episode: an error observation, the whole message kept with the turn", () =>
    Effect.gen(function* () {
      const e = yield* play(Tool.episode({ tools: [returning(() => undefined)], syntax: Tool.brackets }), callOnce("odd"))
      assert.strictEqual(e.toolErrors, 1)
      assert.strictEqual(e.turns[0]!.observation, "=error: returned undefined, which is not a strin;")
      assert.strictEqual(e.turns[0]!.toolError, "returned undefined, which is not a string, number or JSON value")
      assert.strictEqual(e.stop, "completed")
      // rollouts.jsonl and eval.jsonl rows carry it with the turn
      const env = envWith(Tool.episode({ tools: [returning(() => undefined)], syntax: Tool.brackets }))
      const [row] = sampleRows({
        task: { key: "tools/train/0/0", env: "tools", problem: { n: 4 }, envDef: env },
        index: 0,
        promptTokens: [],
        prompt: "n=4:",
        version: 0,
        rollouts: [{ problem: { n: 4 }, prompt: "n=4:", completion: " ok", tokens: [], stopReason: "stop", index: 0, groupSize: 1 }],
        episodes: [e],
        scores: [{ value: 0, masked: undefined, components: { zero: 0 } }],
      })
      assert.deepStrictEqual((row as { turns?: unknown }).turns, [
        { sampled: "[odd]", observation: "=error: returned undefined, which is not a strin;", toolError: "returned undefined, which is not a string, number or JSON value" },
        { sampled: " ok" },
      ])
    }))

  it.effect("a very long result is cut for the model, saying so, and kept whole with the turn", () =>
    Effect.gen(function* () {
      const long = "x".repeat(10_000)
      const e = yield* play(Tool.episode({ tools: [returning(() => long)], syntax: Tool.brackets }), callOnce("odd"))
      assert.strictEqual(e.turns[0]!.observation, `=${"x".repeat(2000)}... [cut: 10000 characters, the first 2000 shown];`)
      assert.strictEqual(e.turns[0]!.toolResult, long)
      const short = Tool.make({ name: "short", args: Schema.Struct({}), maxResultChars: 5, run: () => "abcdefgh" })
      const s = yield* play(Tool.episode({ tools: [short], syntax: Tool.brackets }), callOnce("short"))
      assert.strictEqual(s.turns[0]!.observation, "=abcde... [cut: 8 characters, the first 5 shown];")
      assert.throws(() => Tool.make({ name: "bad", args: Schema.Struct({}), maxResultChars: 0, run: () => "" }), /maxResultChars/)
    }))
})

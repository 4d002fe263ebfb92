/**
 * Services an env's rewards need: built once per run by the runner, closed at its end,
 * on failure and on interruption; a missing service is a type error; and the built-in
 * judge reward (a transport failure masks, a reply with no score is the judge's fault).
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Fiber, Layer, Schema } from "effect"
import * as CharTokenizer from "../../src/backends/local/CharTokenizer.ts"
import { Local } from "../../src/backends/local/index.ts"
import { BackendError } from "../../src/contract/Contract.ts"
import * as Env from "../../src/vocabulary/Env.ts"
import * as Reward from "../../src/vocabulary/Reward.ts"
import * as RunLog from "../../src/folder/RunLog.ts"
import * as Runner from "../../src/Runner.ts"
import { Sampler } from "../../src/services/Sampler.ts"
import { rollout as testRollout } from "../../src/testing/Rollouts.ts"
import { Tokenizer } from "../../src/services/Tokenizer.ts"
import { Judge, judge } from "../../rewards/judge.ts"
import { toySettings, TINY, quiet } from "../envs/vowels.ts"
import { scriptedSampler } from "./ScriptedSampler.ts"


/** A service with a lifecycle the test can watch. */
class Counter extends Context.Service<Counter, { readonly next: Effect.Effect<number> }>()("test/Counter") {}

const counterLayer = (log: Array<string>) =>
  Layer.effect(
    Counter,
    Effect.acquireRelease(
      Effect.sync(() => {
        log.push("open")
        let n = 0
        return { next: Effect.sync(() => n++) }
      }),
      () => Effect.sync(() => log.push("close")),
    ),
  )

const counting = (log: Array<string>, options: { readonly failAt?: number } = {}) =>
  Env.make({
    name: "counting",
    problem: Schema.Struct({ n: Schema.Int }),
    source: Env.seeded(({ random }) => ({ n: random.int(0, 9) })),
    prompt: ({ n }) => `Say ${n}:`,
    reward: Reward.make("count", () =>
      Effect.gen(function* () {
        const i = yield* (yield* Counter).next
        if (options.failAt !== undefined && i >= options.failAt) return Number.NaN
        return i % 2
      })),
    services: counterLayer(log),
    sampling: { maxTokens: 3, temperature: 1 },
  })

const backend = (dir: string) => Layer.fresh(Local.layer({ config: TINY, seed: 0, stateDir: RunLog.paths(dir).state, lora: { rank: 4, alpha: 8, targets: ["q", "v"] } }))
const tmp = () => Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-services-"))

describe("env services", () => {
  it.effect("are built once per run and closed at its end", () =>
    Effect.gen(function* () {
      const log: Array<string> = []
      const dir = tmp()
      const rows = yield* Runner.run(toySettings(dir, { env: "counting", steps: 3 }), counting(log)).pipe(Effect.provide(backend(dir)), quiet)
      assert.strictEqual(rows.length, 3)
      assert.deepStrictEqual(log, ["open", "close"])
    }))

  it.effect("are closed when the run fails", () =>
    Effect.gen(function* () {
      const log: Array<string> = []
      const dir = tmp()
      const error = yield* Effect.flip(Runner.run(toySettings(dir, { env: "counting", steps: 3 }), counting(log, { failAt: 40 })).pipe(Effect.provide(backend(dir)), quiet))
      assert.strictEqual(error._tag, "RunError")
      assert.deepStrictEqual(log, ["open", "close"])
    }))

  it.live("are closed when the run is interrupted", () =>
    Effect.gen(function* () {
      const log: Array<string> = []
      const dir = tmp()
      const fiber = yield* Effect.forkChild(Runner.run(toySettings(dir, { env: "counting", steps: 10_000 }), counting(log)).pipe(Effect.provide(backend(dir)), quiet))
      while (!Fs.existsSync(RunLog.paths(dir).metrics)) yield* Effect.sleep("20 millis")
      yield* Fiber.interrupt(fiber)
      assert.deepStrictEqual(log, ["open", "close"])
    }))

  it("a reward that needs a service the env does not provide is a type error", () => {
    const needs = Reward.make<{ readonly n: number }, Counter>("count", () => Effect.gen(function* () {
      return yield* (yield* Counter).next
    }))
    const spec = {
      name: "missing",
      problem: Schema.Struct({ n: Schema.Int }),
      source: Env.seeded(({ random }) => ({ n: random.int(0, 9) })),
      prompt: () => "x",
      reward: needs,
    }
    // @ts-expect-error: Counter is required by the reward and provided by nothing
    Env.make(spec)
    Env.make({ ...spec, services: counterLayer([]) })
    // and at run time, services that are not a Layer are refused at once
    assert.throws(() => Env.make({ ...spec, services: 42 as never }), /services must be a Layer/)
  })
})

describe("judge", () => {
  const rollout = (completion: string): Reward.Rollout<{ n: number }> => testRollout({ n: 1 }, completion, { prompt: "Say 1:", tokens: [] })
  const asks = judge<{ n: number }>({ question: (r) => `Is "${r.completion}" one? Score:`, unparsedPenalty: -0.5 })
  const judged = (reply: (q: string) => string) => {
    const double = scriptedSampler((q) => reply(q))
    return Judge.fromBackend(Layer.merge(Layer.succeed(Sampler, double.service), Layer.succeed(Tokenizer, CharTokenizer.make())))
  }

  it.effect("asks the judge model the templated question and parses its score", () =>
    Effect.gen(function* () {
      const questions: Array<string> = []
      const scores = yield* Reward.evaluate(asks, [rollout("one"), rollout("two")]).pipe(
        Effect.provide(judged((q) => {
          questions.push(q)
          return q.includes('"one"') ? " 1" : " 0"
        })),
      )
      assert.deepStrictEqual(questions, ['Is "one" one? Score:', 'Is "two" one? Score:'])
      assert.deepStrictEqual(scores.map((s) => s.value), [1, 0])
    }))

  it.effect("a reply with no score is the judge's ModelFault (its penalty); a transport failure masks the sample", () =>
    Effect.gen(function* () {
      const unparsed = yield* Reward.evaluate(asks, [rollout("one")]).pipe(Effect.provide(judged(() => " maybe")))
      assert.strictEqual(unparsed[0]!.value, -0.5)
      assert.isUndefined(unparsed[0]!.masked)
      const down = Layer.succeed(Judge, Judge.of({ ask: () => Effect.fail(new Reward.InfraFault({ message: "connection refused" })) }))
      const failing = Layer.effect(Judge, Effect.succeed(Judge.of({
        ask: () => Effect.fail(new Reward.InfraFault({ message: new BackendError({ reason: "Transport", operation: "sample", message: "connection refused" }).message })),
      })))
      for (const layer of [down, failing]) {
        const masked = yield* Reward.evaluate(asks, [rollout("one")]).pipe(Effect.provide(layer))
        assert.isDefined(masked[0]!.masked)
        assert.include(masked[0]!.masked!, "connection refused")
      }
    }))

  it.effect("with the run's own sampler, as an env service", () =>
    Effect.gen(function* () {
      const dir = tmp()
      const env = Env.make({
        name: "judged",
        problem: Schema.Struct({ n: Schema.Int }),
        source: Env.seeded(({ random }) => ({ n: random.int(0, 9) })),
        prompt: ({ n }) => `Say ${n}:`,
        reward: judge<{ n: number }>({ question: (r) => `${r.completion}?`, maxTokens: 3 }),
        services: Judge.ownSampler,
        sampling: { maxTokens: 3, temperature: 1 },
      })
      const rows = yield* Runner.run(toySettings(dir, { env: "judged", steps: 2 }), env).pipe(Effect.provide(backend(dir)), quiet)
      assert.strictEqual(rows.length, 2)
      assert.isTrue("env/all/judge" in rows[0]!)
    }))
})

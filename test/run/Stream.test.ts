/**
 * Streaming minibatches (`--stream-minibatches`): one minibatch is the step trained as a
 * whole, exactly; more train the step in parts as its groups are scored, reproducibly,
 * with one optimizer step per step or per minibatch; the first minibatch reaches the
 * trainer before the step's last group is sampled; settings that cannot stream are refused.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import { Local } from "../../src/backends/local/index.ts"
import * as RunLog from "../../src/folder/RunLog.ts"
import * as Runner from "../../src/Runner.ts"
import { Sampler } from "../../src/services/Sampler.ts"
import { Trainer } from "../../src/services/Trainer.ts"
import vowels, { quiet, TINY, toySettings } from "../envs/vowels.ts"

const untimed = (rows: ReadonlyArray<Record<string, number>>) =>
  rows.map((r) => Object.fromEntries(Object.entries(r).filter(([k]) => !k.startsWith("time/") && !k.startsWith("throughput/"))))

type Wrap = Layer.Layer<Trainer | Sampler, never, Trainer | Sampler>

const run = (overrides: Partial<Runner.RunSettings>, wrap?: Wrap) =>
  Effect.gen(function* () {
    const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-stream-"))
    const local = Layer.fresh(Local.layer({ config: TINY, seed: 0, stateDir: RunLog.paths(dir).state, lora: { rank: 4, alpha: 8, targets: ["q", "v"] } }))
    const backend = wrap === undefined ? local : Layer.provideMerge(wrap, local)
    const rows = yield* Runner.run(toySettings(dir, { steps: 6, saveEvery: 0, logRolloutsEvery: 1, hackWatchEvery: 0, ...overrides }), vowels).pipe(Effect.provide(backend), quiet)
    return { rows: untimed(rows), rollouts: Fs.readFileSync(Path.join(dir, "rollouts.jsonl"), "utf8") }
  })

/** Test double: the embedded trainer and sampler, each forward_backward and sample call logged in `events`. */
const logging = (events: Array<string>): Wrap =>
  Layer.effectContext(
    Effect.gen(function* () {
      const trainer = yield* Trainer
      const sampler = yield* Sampler
      const t = Trainer.of({ ...trainer, forwardBackward: (...args) => Effect.sync(() => events.push("forward_backward")).pipe(Effect.andThen(trainer.forwardBackward(...args))) })
      const s = Sampler.of({ ...sampler, sample: (...args) => Effect.sync(() => events.push("sample")).pipe(Effect.andThen(sampler.sample(...args))) })
      return Context.make(Trainer, t).pipe(Context.add(Sampler, s))
    }),
  )

describe("streaming minibatches", () => {
  it.live("one minibatch trains the step exactly as a whole", () =>
    Effect.gen(function* () {
      const whole = yield* run({})
      const streamed = yield* run({ streamMinibatches: { count: 1, optimEvery: "step" } })
      assert.deepStrictEqual(streamed.rows, whole.rows)
      assert.strictEqual(streamed.rollouts, whole.rollouts)
    }))

  it.live("several minibatches, one optimizer step per step or per minibatch, repeat with the same seed", () =>
    Effect.gen(function* () {
      for (const optimEvery of ["step", "minibatch"] as const) {
        const a = yield* run({ streamMinibatches: { count: 2, optimEvery } })
        const b = yield* run({ streamMinibatches: { count: 2, optimEvery } })
        assert.deepStrictEqual(b.rows, a.rows, optimEvery)
        const trained = a.rows.filter((r) => (r["train/datums"] ?? 0) > 0)
        assert.isAbove(trained.length, 2)
        for (const r of trained) assert.isTrue(Number.isFinite(r["train/loss"]) && r["train/active_tokens"]! > 0, JSON.stringify(r))
        // the trainer's version: one per optimizer step
        const last = a.rows.at(-1)!["policy_version/trainer"]!
        if (optimEvery === "step") assert.strictEqual(last, trained.length)
        else assert.isAbove(last, trained.length)
      }
    }))

  it.live("the first minibatch's forward_backward reaches the trainer before the step's last group is sampled", () =>
    Effect.gen(function* () {
      const events: Array<string> = []
      // one group sampled at a time, so the order of events is the order of the work
      yield* run({ steps: 1, groups: 4, sampleConcurrency: 1, streamMinibatches: { count: 2, optimEvery: "step" } }, logging(events))
      // a step: 4 groups sampled; minibatch 0 (groups 0 and 1) trains after the second, minibatch 1 after the fourth
      assert.deepStrictEqual(events, ["sample", "sample", "forward_backward", "sample", "sample", "forward_backward"])
      const whole: Array<string> = []
      yield* run({ steps: 1, groups: 4, sampleConcurrency: 1 }, logging(whole))
      assert.deepStrictEqual(whole, ["sample", "sample", "sample", "sample", "forward_backward"])
    }))

  it.live("settings that cannot stream are refused, naming what to change", () =>
    Effect.gen(function* () {
      const refused = (overrides: Partial<Runner.RunSettings>) => Effect.map(Effect.flip(run({ steps: 1, ...overrides })), (e) => e.message)
      const stream = { count: 2, optimEvery: "step" } as const
      assert.include(yield* refused({ streamMinibatches: stream, async: true }), "--async")
      assert.include(yield* refused({ streamMinibatches: stream, advantage: "batch_std" }), "batch_std")
      assert.include(yield* refused({ streamMinibatches: stream, klCoef: 0.1 }), "--kl-coef")
      assert.include(yield* refused({ streamMinibatches: { count: 9, optimEvery: "step" } }), "--groups 4")
      assert.include(yield* refused({ streamMinibatches: stream, dynamicSampling: { maxRounds: 1 } }), "--dynamic-sampling")
    }))
})

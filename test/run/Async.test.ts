/**
 * `--async` is reproducible: step s samples from policy version s - 1 exactly, however
 * long sampling takes, so two runs with one seed write the same metrics. With `maxLag` 0
 * every group sampled ahead is stale when its step starts: requeued, it is sampled again
 * from the current version; dropped, the step trains without it.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { Local } from "../../src/backends/local/index.ts"
import * as RunLog from "../../src/folder/RunLog.ts"
import * as Runner from "../../src/Runner.ts"
import { Sampler } from "../../src/services/Sampler.ts"
import vowels, { toySettings, TINY, quiet } from "../envs/vowels.ts"


/** Test double: the embedded sampler, with each request held back 40 ms, so sampling outlasts training. */
const slowSampler = Layer.effect(
  Sampler,
  Effect.gen(function* () {
    const inner = yield* Sampler
    return Sampler.of({ ...inner, sample: (...args) => Effect.delay(inner.sample(...args), "40 millis") })
  }),
)

const asyncRun = (overrides: Partial<Runner.RunSettings> = {}) =>
  Effect.gen(function* () {
    const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-async-"))
    const local = Layer.fresh(Local.layer({ config: TINY, seed: 0, stateDir: RunLog.paths(dir).state, lora: { rank: 4, alpha: 8, targets: ["q", "v"] } }))
    const backend = Layer.provideMerge(slowSampler, local)
    const rows = yield* Runner.run(toySettings(dir, { steps: 8, async: true, saveEvery: 0, logRolloutsEvery: 0, ...overrides }), vowels).pipe(Effect.provide(backend), quiet)
    return rows.map((r) => Object.fromEntries(Object.entries(r).filter(([k]) => !k.startsWith("time/") && !k.startsWith("throughput/"))))
  })

describe("async runs", () => {
  it.live("sample step s from version s - 1 exactly, and repeat with the same seed", () =>
    Effect.gen(function* () {
      const a = yield* asyncRun()
      // lag 1, or 0 after a step that trained nothing (all groups no-ops publish no version)
      for (const row of a) assert.strictEqual(row["policy_version/lag_mean"], row["policy_version/lag_max"], `step ${row["step"]}`)
      assert.isAbove(a.filter((r) => r["policy_version/lag_max"] === 1).length, 3)
      const b = yield* asyncRun()
      assert.deepStrictEqual(b, a)
    }))

  it.live("with maxStepsOffPolicy 2, step s samples from version s - 2, and repeats with the same seed", () =>
    Effect.gen(function* () {
      const a = yield* asyncRun({ maxStepsOffPolicy: 2, maxLag: 2 })
      // lag 2 once two steps have published (less after steps that trained nothing)
      for (const row of a) assert.isAtMost(row["policy_version/lag_max"]!, 2, `step ${row["step"]}`)
      assert.isAbove(a.filter((r) => r["policy_version/lag_max"] === 2).length, 3)
      assert.strictEqual(a[0]!["policy_version/lag_max"], 0)
      for (const row of a) assert.strictEqual(row["async/stale_groups"], 0)
      const b = yield* asyncRun({ maxStepsOffPolicy: 2, maxLag: 2 })
      assert.deepStrictEqual(b, a)
    }))

  it.live("maxStepsOffPolicy above 1 without async is refused, naming the flag to add", () =>
    Effect.gen(function* () {
      const error = yield* asyncRun({ maxStepsOffPolicy: 2, async: false }).pipe(Effect.flip)
      assert.include(error.message, "--max-steps-off-policy 2")
      assert.include(error.message, "--async")
    }))

  it.live("with maxLag 0, stale groups are requeued and sampled again from the current version, reproducibly", () =>
    Effect.gen(function* () {
      const a = yield* asyncRun({ maxLag: 0, staleGroups: "requeue" })
      // a step's groups were all sampled ahead from one version: all stale (the step before published one) or none
      const groups = toySettings("x").groups
      for (const row of a) assert.include([0, groups], row["async/stale_groups"], `step ${row["step"]}`)
      assert.isAbove(a.filter((r) => r["async/stale_groups"] === groups).length, 3)
      for (const row of a) assert.strictEqual(row["policy_version/lag_max"], 0, `step ${row["step"]} trains only on groups of the current version`)
      const b = yield* asyncRun({ maxLag: 0, staleGroups: "requeue" })
      assert.deepStrictEqual(b, a)
    }))

  it.live("with maxLag 0 and staleGroups drop, a step trains without its stale groups", () =>
    Effect.gen(function* () {
      const rows = yield* asyncRun({ maxLag: 0, staleGroups: "drop", steps: 4 })
      const stale = rows.map((r) => r["async/stale_groups"]!)
      assert.isAbove(stale.slice(1).reduce((n, x) => n + x, 0), 0)
      for (const row of rows) assert.strictEqual(row["policy_version/lag_max"], 0, `step ${row["step"]}`)
    }))
})

describe("library defaults for sampling ahead", () => {
  it("Runner.defaults lets a group sampled k steps ahead train: maxLag follows maxStepsOffPolicy unless given", () => {
    assert.strictEqual(Runner.defaults("vowels").maxLag, 1)
    assert.strictEqual(Runner.defaults("vowels", { async: true, maxStepsOffPolicy: 3 }).maxLag, 3)
    assert.strictEqual(Runner.defaults("vowels", { async: true, maxStepsOffPolicy: 3, maxLag: 0 }).maxLag, 0)
  })
})

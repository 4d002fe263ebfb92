/**
 * `--cores 2` plays a run's groups on episode worker threads and gives the same run as one
 * core: the same rollouts.jsonl and the same metrics, step for step, for a single-turn env
 * and a tool env.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { Local } from "../../../src/backends/local/index.ts"
import * as RunLog from "../../../src/folder/RunLog.ts"
import * as Runner from "../../../src/Runner.ts"
import * as Pool from "../../../src/run/workers/Pool.ts"
import vowels, { quiet, TINY, toySettings } from "../../envs/vowels.ts"

const VOWELS = Path.resolve(import.meta.dirname, "../../envs/vowels.ts")

/** A run of 3 steps on `cores` cores: its rollouts.jsonl and its metrics without timings. */
const runOn = (cores: number) =>
  Effect.gen(function* () {
    const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), `gyre-cores-${cores}-`))
    const local = Layer.fresh(Local.layer({ config: TINY, seed: 0, stateDir: RunLog.paths(dir).state, lora: { rank: 4, alpha: 8, targets: ["q", "v"] } }))
    const workers = Layer.provideMerge(Pool.layer({ cores, env: { module: VOWELS }, tokenizer: { kind: "char" } }), local)
    const rows = yield* Runner.run(toySettings(dir, { steps: 3, saveEvery: 0, evalEvery: 2, evalSize: 8 }), vowels).pipe(Effect.provide(workers), quiet)
    const metrics = rows.map((r) => Object.fromEntries(Object.entries(r).filter(([k]) => !k.startsWith("time/") && !k.startsWith("throughput/"))))
    return { metrics, rollouts: Fs.readFileSync(RunLog.paths(dir).rollouts, "utf8") }
  })

describe("episodes on worker threads", () => {
  it.live("give the same rollouts and metrics on 2 cores as on 1", () =>
    Effect.gen(function* () {
      const one = yield* runOn(1)
      const two = yield* runOn(2)
      assert.isAbove(one.rollouts.split("\n").length, 3 * 4 * 8)
      assert.strictEqual(two.rollouts, one.rollouts)
      assert.deepStrictEqual(two.metrics, one.metrics)
    }))
})

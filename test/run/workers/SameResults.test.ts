/**
 * `--cores 2` plays a run's groups on episode worker threads and gives the same run as one
 * core: the same rollouts.jsonl and the same metrics, step for step, for a single-turn env,
 * a tool env and an agent env (its agents call an endpoint of their worker's own) (the envs' `main_thread` component, which says where a group was scored,
 * aside). A reward that throws fails the run with the same error on both; a worker that
 * dies fails the step, saying so.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Logger } from "effect"
import { Local } from "../../../src/backends/local/index.ts"
import * as RunLog from "../../../src/folder/RunLog.ts"
import * as Runner from "../../../src/Runner.ts"
import * as Pool from "../../../src/run/workers/Pool.ts"
import type * as Env from "../../../src/vocabulary/Env.ts"
import { quiet, TINY, toySettings } from "../../envs/vowels.ts"
import * as ThreadEnvs from "./ThreadEnvs.ts"

const MODULE = Path.resolve(import.meta.dirname, "ThreadEnvs.ts")

/** A run of 3 steps (an evaluation at step 2) of `ThreadEnvs[name]` on `cores` cores. */
const runOn = (cores: number, name: keyof typeof ThreadEnvs) =>
  Effect.gen(function* () {
    const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), `gyre-cores-${cores}-`))
    const local = Layer.fresh(Local.layer({ config: TINY, seed: 0, stateDir: RunLog.paths(dir).state, lora: { rank: 4, alpha: 8, targets: ["q", "v"] } }))
    const workers = Layer.provideMerge(Pool.layer({ cores, env: { module: MODULE, exportName: name }, tokenizer: { kind: "char" } }), local)
    const env: Env.AnyEnv = ThreadEnvs[name]
    const rows = yield* Runner.run(toySettings(dir, { env: env.name, steps: 3, saveEvery: 0, evalEvery: 2, evalSize: 8 }), env).pipe(Effect.provide(workers), quiet)
    const metrics = rows.map((r) => Object.fromEntries(Object.entries(r).filter(([k]) => !k.startsWith("time/") && !k.startsWith("throughput/") && !k.includes("main_thread"))))
    const rollouts = Fs.readFileSync(RunLog.paths(dir).rollouts, "utf8").trim().split("\n").map((line) => JSON.parse(line) as { components: Record<string, number> })
    return { metrics, rollouts, mainThread: rollouts.map((r) => r.components["main_thread"]) }
  })

const withoutThread = (rows: ReadonlyArray<{ components: Record<string, number> }>) =>
  rows.map((r) => ({ ...r, components: Object.fromEntries(Object.entries(r.components).filter(([k]) => k !== "main_thread")) }))

describe("episodes on worker threads", () => {
  for (const name of ["single", "tools", "agent"] as const) {
    it.live(`give the same rollouts and metrics on 2 cores as on 1 (${name})`, () =>
      Effect.gen(function* () {
        const one = yield* runOn(1, name)
        const two = yield* runOn(2, name)
        assert.strictEqual(one.rollouts.length, 3 * 4 * 8)
        assert.deepStrictEqual(one.mainThread, one.rollouts.map(() => 1))
        assert.deepStrictEqual(two.mainThread, two.rollouts.map(() => 0), "every group of the 2-core run was scored on a worker")
        assert.deepStrictEqual(withoutThread(two.rollouts), withoutThread(one.rollouts))
        assert.deepStrictEqual(two.metrics, one.metrics)
      }))
  }

  it.live("a reward that throws fails the run with the same error on 2 cores as on 1", () =>
    Effect.gen(function* () {
      const one = yield* runOn(1, "failing").pipe(Effect.flip)
      const two = yield* runOn(2, "failing").pipe(Effect.flip)
      assert(one._tag === "RunError" && two._tag === "RunError", `${one._tag}, ${two._tag}`)
      assert.include(one.message, "picky cannot score 3")
      assert.deepStrictEqual({ reason: two.reason, step: two.step, message: two.message }, { reason: one.reason, step: one.step, message: one.message })
    }))

  it.live("a worker's log lines reach the run's logger", () =>
    Effect.gen(function* () {
      const lines: Array<string> = []
      const capture = Logger.make<unknown, void>((o) => {
        if (o.logLevel === "Warn") lines.push(String(Array.isArray(o.message) ? o.message.join(" ") : o.message))
      })
      yield* runOn(2, "noisy").pipe(Effect.provide(Logger.layer([capture])))
      assert.include(lines, "noisy scored on the worker")
      assert.notInclude(lines, "noisy scored on the main thread")
    }))

  it.live("a worker that dies fails the step, naming the worker and the group it played", () =>
    Effect.gen(function* () {
      const error = yield* runOn(2, "crashing").pipe(Effect.flip)
      assert.strictEqual(error._tag, "RunError")
      assert.match(error.message, /episode worker \d stopped \(exit code 7\) while it played group \d+ of step 1/)
    }))
})

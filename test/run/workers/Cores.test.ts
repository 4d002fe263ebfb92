/**
 * `--cores`: what it accepts, how many worker threads it asks for, and which envs the
 * workers leave to the main thread, with the reason the log gives.
 */
import * as Os from "node:os"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { offWorkers, oversubscribed, parseCores, threadsOf } from "../../../src/run/workers/Cores.ts"
import * as Training from "../../../src/app/Training.ts"
import * as Env from "../../../src/vocabulary/Env.ts"
import * as ThreadEnvs from "./ThreadEnvs.ts"

describe("--cores", () => {
  it("takes a whole number of 1 or more, or auto", () => {
    assert.strictEqual(parseCores("2"), 2)
    assert.strictEqual(parseCores(" auto "), "auto")
    for (const bad of ["0", "-1", "1.5", "two", ""]) assert.isUndefined(parseCores(bad), bad)
    assert.strictEqual(threadsOf(undefined), 1)
    assert.strictEqual(threadsOf(3), 3)
    assert.strictEqual(threadsOf("auto"), Os.availableParallelism())
  })

  it("warns of more threads than cores, naming both and what auto would start", () => {
    assert.isUndefined(oversubscribed(2, 2))
    assert.isUndefined(oversubscribed(threadsOf("auto")))
    const told = oversubscribed(8, 2)
    assert.include(told, "--cores 8 starts 8 episode worker threads")
    assert.include(told, "may use 2 cores")
    assert.include(told, "--cores auto starts 2")
  })

  it("leaves game and services envs, and envs the module lacks, to the main thread; agent envs go to the workers", () => {
    const loaded = new Set([ThreadEnvs.single.name])
    assert.isUndefined(offWorkers(ThreadEnvs.single, loaded))
    assert.isUndefined(offWorkers(ThreadEnvs.agent, new Set([ThreadEnvs.agent.name])))
    assert.include(offWorkers(ThreadEnvs.tools, loaded), "no env named threads-tools")
    const withServices: Env.AnyEnv = { ...ThreadEnvs.single, services: Layer.empty as never }
    assert.include(offWorkers(withServices, loaded), "services")
  })

  it.effect("refuses a count of cores that is not one, naming it", () =>
    Effect.gen(function* () {
      const error = yield* Training.train({ env: ThreadEnvs.single, cores: 0, steps: 1 }).pipe(Effect.flip)
      assert.include(error.message, "cores must be a whole number of cores (1 or more)")
    }))
})

/**
 * A sampler answer that cannot cross to an episode worker (here, one holding a function,
 * which `postMessage` refuses to clone) fails its group with a message that says so,
 * instead of throwing out of the main thread's message loop and ending the process. A
 * test double of `Sampler` (from its interface) adds a function to every answer.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as Runner from "../../../src/Runner.ts"
import { Sampler } from "../../../src/services/Sampler.ts"
import { quiet, toySettings } from "../../envs/vowels.ts"
import { workersOver } from "./Doubled.ts"
import { single } from "./ThreadEnvs.ts"

/** The embedded sampler, with a function in each answer. */
const unsendable = Layer.effect(
  Sampler,
  Effect.map(Effect.service(Sampler), (inner) =>
    Sampler.of({ ...inner, sample: (prompt, params, options) => Effect.map(inner.sample(prompt, params, options), (out) => ({ ...out, note: () => "not data" })) })),
)

describe("a sampler answer that cannot be sent to an episode worker", () => {
  it.live("fails its group, naming why, and the process goes on", () =>
    Effect.gen(function* () {
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-unsendable-"))
      const workers = workersOver(dir, "single", unsendable)
      const error = yield* Runner.run(toySettings(dir, { env: single.name, steps: 1, groups: 2, groupSize: 2, saveEvery: 0, evalEvery: 0 }), single).pipe(Effect.provide(workers), quiet, Effect.flip)
      assert.include(error.message, "cannot be sent to the episode worker")
    }))
})

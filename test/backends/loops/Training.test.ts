/**
 * `gyre run --backend loops` through the runner API (`app/Training.ts`, what the CLI
 * runs), against the fake control plane with a gyre `serve` as the data plane: a run
 * whose deactivation fails for good ends the command with an error (not `done`) that
 * says the run may still bill and names the command that stops it; `--resume` takes the
 * base model and LoRA rank from `config.json`.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { ConfigProvider, Effect, Exit } from "effect"
import { train } from "../../../src/app/Training.ts"
import * as RunRecord from "../../../src/backends/loops/RunRecord.ts"
import vowels from "../../envs/vowels.ts"
import { capture, RANDOM_MODEL } from "./DataPlane.ts"
import { fakeLoops } from "./FakeLoops.ts"

const KEY = "bt-secret-key-0123456789"

const { fakeWith } = fakeLoops(KEY)

const small = { steps: 1, groups: 2, groupSize: 2, evalEvery: 0, saveEvery: 1, logRolloutsEvery: 0 } as const
/** The key in the environment's place, and the log kept (not printed). */
const withKey = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  effect.pipe(Effect.provide(ConfigProvider.layer(ConfigProvider.fromUnknown({ BASETEN_API_KEY: KEY }))), Effect.provide(capture().layer))

describe("gyre run --backend loops (runner API)", () => {
  it.live("a deactivation refused for good (403) fails the run, saying the run may still bill and how to stop it", () =>
    Effect.gen(function* () {
      const fake = yield* fakeWith({ fault: ({ path }) => (path.endsWith("/deactivate") ? { status: 403, body: { detail: "not allowed to deactivate" } } : undefined) })
      const out = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-loops-train-"))
      const logs = capture()
      const exit = yield* Effect.exit(
        train({ env: vowels, ...small, name: "r", out, backend: "loops", model: RANDOM_MODEL, loraRank: 4, loops: { url: fake.url } }).pipe(Effect.provide(logs.layer), withKey),
      )
      const [run] = [...fake.runs.values()]
      assert.isTrue(run!.active, "the run is still up")
      assert.isTrue(Exit.isFailure(exit), "the command fails")
      const message = Exit.isFailure(exit) ? String(exit.cause) : ""
      const last = message.split("\n").at(-1) ?? ""
      assert.include(last, `Loops run ${run!.id} could not be deactivated`)
      assert.include(last, "HTTP 403: not allowed to deactivate")
      assert.include(last, "it may still be billing")
      assert.include(last, `gyre loops deactivate ${run!.id} --loops-url ${fake.url}`)
      assert.isTrue(logs.lines.some((l) => l.startsWith("ERROR") && l.includes(`could not deactivate run ${run!.id}`)), logs.lines.join("\n"))
      assert.isFalse(logs.lines.some((l) => l.includes("done:")), "no done line")
      assert.deepStrictEqual(RunRecord.live(yield* RunRecord.read(Path.join(out, "r"))).map((r) => r.id), [run!.id])
    }).pipe(Effect.scoped))

  it.live("--resume of a Loops run takes the base model and LoRA rank from config.json", () =>
    Effect.gen(function* () {
      const fake = yield* fakeWith()
      const out = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-loops-train-"))
      const first = yield* train({ env: vowels, ...small, name: "r", out, backend: "loops", model: RANDOM_MODEL, loraRank: 4, loops: { url: fake.url, keepRun: true } }).pipe(withKey)
      const resumed = yield* train({ env: vowels, resume: first.outDir, steps: 2 }).pipe(withKey)
      assert.deepStrictEqual(resumed.metrics.map((m) => m["step"]), [2])
      assert.strictEqual(fake.runs.size, 1, "the kept run was trained on again")
      const [run] = [...fake.runs.values()]
      assert.strictEqual(fake.deactivations(run!.id), 1)
    }).pipe(Effect.scoped))
})

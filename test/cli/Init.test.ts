/**
 * `gyre init <name>` scaffolds a project's env and its reward's test, and what it writes
 * works: the env trains a step through the runner, the test's laws and probes hold (its
 * suite runs here, imported as vitest runs it), and a second init refuses to overwrite.
 */
import * as Fs from "node:fs"
import * as Path from "node:path"
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { train } from "../../src/app/Training.ts"
import { scaffold } from "../../src/cli/Scaffold.ts"
import * as Env from "../../src/vocabulary/Env.ts"

// inside the repo (tmp/ is git-ignored), so "gyre" resolves as it does for envs/
const dir = Path.resolve(import.meta.dirname, "../../tmp", `init-${process.pid}`)
Fs.rmSync(dir, { recursive: true, force: true })
const written = await Effect.runPromise(scaffold("sums", dir))
afterAll(() => Fs.rmSync(dir, { recursive: true, force: true }))

describe("gyre init", () => {
  it("writes envs/<name>.ts and test/<name>.test.ts", () => {
    assert.deepStrictEqual(written, { env: "envs/sums.ts", test: "test/sums.test.ts" })
    assert.include(Fs.readFileSync(Path.join(dir, written.env), "utf8"), `name: "sums"`)
  })

  it.live("the env it writes trains a step through the runner", () =>
    Effect.gen(function* () {
      const env = ((yield* Effect.promise(() => import(Path.join(dir, written.env)))) as { default: Env.AnyEnv }).default
      assert.strictEqual(env.name, "sums")
      const run = yield* train({ env, steps: 1, groups: 2, groupSize: 2, evalSize: 4, saveEvery: 0, hackWatchEvery: 0, out: Path.join(dir, "runs") })
      assert.strictEqual(run.metrics.length, 1)
      assert.isDefined(run.metrics[0]!["env/all/correct"])
    }))

  it.effect("refuses to write over a file, naming it", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(scaffold("sums", dir))
      assert.strictEqual(error.reason, "Exists")
      assert.include(error.message, "envs/sums.ts exists already")
    }))

  it.effect("refuses a name that is not a file name", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(scaffold("../x", dir))
      assert.strictEqual(error.reason, "InvalidName")
      assert.isFalse(Fs.existsSync(Path.join(dir, "envs", "..", "x.ts")))
    }))
})

// the test file it writes, run as a suite: its laws and probes hold on the reward it wrote
describe("the test it writes", async () => {
  await import(Path.join(dir, written.test))
})

/**
 * An env whose step throws stops the run with a message naming the env, the turn and the
 * problem, after a checkpoint of the last finished step (so --resume loses nothing).
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { Local } from "../../src/backends/local/index.ts"
import * as Env from "../../src/vocabulary/Env.ts"
import * as Episode from "../../src/env/Episode.ts"
import * as RunLog from "../../src/folder/RunLog.ts"
import * as Runner from "../../src/Runner.ts"
import vowels, { toySettings, TINY, quiet } from "../envs/vowels.ts"


describe("an env step that throws", () => {
  it.effect("stops the run naming the env, the turn and the problem, after a checkpoint of the last finished step", () =>
    Effect.gen(function* () {
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-env-throws-"))
      let calls = 0
      const perStep = 4 * 8
      // a plain throw on the first turn of step 3's episodes
      const broken = Env.make({
        ...vowels,
        name: "broken",
        episode: Episode.make({
          initial: () => 0,
          step: (turn) =>
            Effect.sync(() => {
              calls++
              if (calls > 2 * perStep) throw new Error("the sandbox is gone")
              return Episode.end(turn.state)
            }),
        }),
      })
      const backend = Layer.fresh(Local.layer({ config: TINY, seed: 0, stateDir: RunLog.paths(dir).state, lora: { rank: 4, alpha: 8, targets: ["q", "v"] } }))
      const error = yield* Effect.flip(Runner.run(toySettings(dir, { env: "broken", steps: 5, saveEvery: 0 }), broken).pipe(Effect.provide(backend), quiet))
      if (error._tag !== "RunError") return assert.fail(error.message)
      assert.strictEqual(error.reason, "Env")
      assert.match(error.message, /^env broken, turn 1 of problem broken\/train\/0\/\d+ .*the env's step failed: the sandbox is gone/)
      const checkpoints = yield* RunLog.readJsonl(RunLog.paths(dir).checkpoints)
      assert.deepStrictEqual(checkpoints.map((c) => c["step"]), [2])
      assert.isTrue(Fs.existsSync(String(checkpoints[0]!["path"])))
    }))
})

/**
 * `gyre eval --cores 2` plays the held-out and training problems' episodes on episode worker threads and scores
 * what one core scores: the same eval.jsonl, row for row (the env's `main_thread`
 * component, which says where a group was scored, aside).
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { evaluateModel } from "../../../src/app/Evaluation.ts"
import { quiet } from "../../envs/vowels.ts"

const ENV = Path.join(import.meta.dirname, "SingleEnv.ts")

type Row = { readonly components: Record<string, number> }

const evalOn = (cores: number) =>
  Effect.gen(function* () {
    const out = Fs.mkdtempSync(Path.join(Os.tmpdir(), `gyre-eval-cores-${cores}-`))
    const summary = yield* evaluateModel({ env: ENV, split: "all", size: 12, samples: 3, seed: 5, cores, out }).pipe(quiet)
    return Fs.readFileSync(summary.file, "utf8").trim().split("\n").map((l) => JSON.parse(l) as Row)
  })

const withoutThread = (rows: ReadonlyArray<Row>) =>
  rows.map((r) => ({ ...r, components: Object.fromEntries(Object.entries(r.components).filter(([k]) => k !== "main_thread")) }))

describe("gyre eval --cores", () => {
  it.live("scores on worker threads what one core scores", () =>
    Effect.gen(function* () {
      const one = yield* evalOn(1)
      const two = yield* evalOn(2)
      assert.isAtLeast(one.length, 6)
      assert.deepStrictEqual(one.map((r) => r.components["main_thread"]), one.map(() => 1))
      assert.deepStrictEqual(two.map((r) => r.components["main_thread"]), two.map(() => 0), "every group of the 2-core evaluation was scored on a worker")
      assert.deepStrictEqual(withoutThread(two), withoutThread(one))
    }))
})

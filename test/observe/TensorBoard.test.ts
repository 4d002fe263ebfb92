/**
 * `--tensorboard` read back by TensorBoard's own Python reader (its `EventAccumulator`):
 * every metrics row as scalars (the base evaluation at step 0 included), each step's
 * reward histogram and its samples as text. TensorBoard is installed into a virtualenv
 * from the machine's Python package mirror (`/opt/pypi/simple`) the first time; without
 * python3 or the mirror the test says so and checks nothing.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { execFileSync } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { train } from "../../src/app/Training.ts"

const MIRROR = "/opt/pypi/simple"
const venv = Path.join(Os.tmpdir(), "gyre-tensorboard-venv")
const python = Path.join(venv, "bin", "python")

/** TensorBoard's reader in a virtualenv, installed once; undefined when this machine cannot. */
const reader = (): string | undefined => {
  try {
    if (!Fs.existsSync(python)) {
      if (!Fs.existsSync(MIRROR)) return undefined
      execFileSync("python3", ["-m", "venv", venv], { stdio: "ignore" })
      execFileSync(python, ["-m", "pip", "install", "-q", "tensorboard"], { stdio: "ignore", env: { ...process.env, PIP_INDEX_URL: `file://${MIRROR}` }, timeout: 300_000 })
    }
    execFileSync(python, ["-c", "import tensorboard"], { stdio: "ignore" })
    return python
  } catch {
    return undefined
  }
}

describe("--tensorboard", () => {
  it.live("TensorBoard's own reader finds every metric, the reward histogram and the samples", () =>
    Effect.gen(function* () {
      const py = reader()
      if (py === undefined) {
        console.log(`skipping: no python3 with tensorboard, and no package mirror at ${MIRROR} to install it from`)
        return
      }
      const run = yield* train({ env: "math", steps: 4, groups: 2, groupSize: 4, evalEvery: 2, evalSize: 10, saveEvery: 0, tensorboard: true, out: Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-tb-")) })
      const read = JSON.parse(execFileSync(py, [Path.join(import.meta.dirname, "fixtures", "read_events.py"), Path.join(run.outDir, "tensorboard")], { encoding: "utf8" })) as {
        scalars: Record<string, Array<[number, number]>>
        histograms: Record<string, Array<[number, number]>>
        texts: Record<string, Array<[number, string]>>
      }
      const rows = Fs.readFileSync(Path.join(run.outDir, "metrics.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l) as Record<string, number>)
      for (const row of rows) {
        for (const [key, value] of Object.entries(row)) {
          if (key === "step" || !Number.isFinite(value)) continue
          const point = read.scalars[key]?.find(([step]) => step === row["step"])
          assert.isDefined(point, `${key} at step ${row["step"]}`)
          assert.isBelow(Math.abs(point![1] - value), 1e-5 * (1 + Math.abs(value)), key)
        }
      }
      assert.deepStrictEqual(read.histograms["reward/total"]!.map(([step, n]) => [step, n]), [[1, 8], [2, 8], [3, 8], [4, 8]])
      assert.deepStrictEqual(read.texts["samples"]!.map(([step]) => step), [1, 2, 3, 4])
      assert.include(read.texts["samples"]![0]![1], "What is")
    }), 600_000)
})

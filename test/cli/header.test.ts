/**
 * A run's first line says what it trains and how: `--async` (with how far it samples
 * ahead) and `--cores` appear only when they are on, so the default line is unchanged.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Runner from "../../src/Runner.ts"
import { headerOf } from "../../src/app/Training.ts"

describe("the run's first line", () => {
  const sync = Runner.defaults("math", { outDir: "runs/x", steps: 3, groups: 8, groupSize: 8 })

  it("is the default run's without --async or --cores", () => {
    assert.strictEqual(headerOf(sync, "embedded"), `gyre: RL on math | 3 steps x 8 groups x 8 | loss ${sync.loss} | lr ${sync.adam.learningRate} | backend embedded | run folder runs/x`)
    assert.strictEqual(headerOf(sync, "embedded", 1), headerOf(sync, "embedded"))
  })

  it("says when the run samples ahead, and how far, and how many worker threads play its episodes", () => {
    const line = headerOf({ ...sync, async: true, maxStepsOffPolicy: 2 }, "embedded", 2)
    assert.include(line, "| async, up to 2 steps off-policy | episodes on 2 worker threads | backend embedded")
    assert.include(headerOf({ ...sync, async: true }, "embedded"), "| async, up to 1 step off-policy |")
  })
})

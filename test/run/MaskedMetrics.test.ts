/**
 * Masked samples (their tool server lost, a judge down) are not the policy's scores: they
 * stay out of the total and of every component's mean, are counted (`masked`,
 * `frac_masked`), and the step line says how many there were.
 */
import { assert, describe, it } from "@effect/vitest"
import type * as Reward from "../../src/reward/Model.ts"
import type { Group } from "../../src/run/Collect.ts"
import { scoreMetrics } from "../../src/run/Evaluate.ts"
import { formatStep } from "../../src/run/Progress.ts"

const scored = (observed: number, total: number): Reward.Score => ({ value: total, masked: undefined, components: { observed } })
// a sample whose episode lost its tool server after a component had scored it
const lost: Reward.Score = { value: undefined, masked: "infra_failed: tool echo: MCP server lost", components: { observed: 1 } }

/** A group of an env with no episode, holding these scores (test double: only what scoreMetrics reads). */
const groupOf = (scores: ReadonlyArray<Reward.Score>): Group => ({
  task: { key: "echoes/train/0/0", env: "echoes", problem: {}, envDef: { episode: undefined, agent: undefined, game: undefined } as never },
  index: 0,
  promptTokens: [],
  prompt: "",
  version: 0,
  rollouts: [],
  episodes: [],
  scores: [...scores],
})

describe("masked samples in a step's metrics", () => {
  it("leave every component's mean and the total, and are counted", () => {
    const m = scoreMetrics([groupOf([lost, lost, lost, lost, lost, lost, lost, scored(0, 0.25)])], "train")
    assert.strictEqual(m["env/all/observed"], 0)
    assert.strictEqual(m["env/all/reward/total"], 0.25)
    assert.strictEqual(m["env/all/masked"], 7)
    assert.strictEqual(m["env/all/frac_masked"], 7 / 8)
  })

  it("all masked: no component mean and no total, not the masked samples' scores", () => {
    const m = scoreMetrics([groupOf(Array.from({ length: 8 }, () => lost))], "train")
    assert.isUndefined(m["env/all/observed"])
    assert.isUndefined(m["env/all/reward/total"])
    assert.strictEqual(m["env/all/masked"], 8)
    assert.strictEqual(m["env/all/frac_masked"], 1)
  })

  it("none masked: the means of all samples and a count of 0", () => {
    const m = scoreMetrics([groupOf([scored(1, 1), scored(0, 0)])], "test")
    assert.strictEqual(m["test/env/all/observed"], 0.5)
    assert.strictEqual(m["test/env/all/masked"], 0)
  })
})

describe("the step line", () => {
  const base = { "by_group/frac_mixed": 0, "throughput/tokens_per_s": 12, "time/total": 0.1 }

  it("shows the masked samples beside the reward when there are any", () => {
    const m = scoreMetrics([groupOf([lost, lost, lost, lost, lost, lost, lost, scored(1, 1)])], "train")
    assert.strictEqual(
      formatStep({ step: 3, steps: 30, metrics: { ...base, ...m }, components: ["observed"] }),
      "step 4/30 | reward 1.000 observed 1.000 | masked 7/8 | mixed 0.00 | 12 tok/s | 0.10s",
    )
  })

  it("says nothing of masking when no sample was masked", () => {
    const m = scoreMetrics([groupOf([scored(1, 1), scored(0, 0)])], "train")
    assert.notInclude(formatStep({ step: 0, steps: 1, metrics: { ...base, ...m } }), "masked")
  })
})

/**
 * The progress line names the env's own reward components (its weighted ones), shows turns
 * and tool calls for multi-turn envs, and names the held-out score by the reward.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Metrics from "../../src/metrics/Metrics.ts"
import { formatStep } from "../../src/run/Progress.ts"

const base = {
  "env/all/reward/total": 0.5,
  "by_group/frac_mixed": 0.25,
  "throughput/tokens_per_s": 100.4,
  "time/total": 1.5,
}

describe("formatStep", () => {
  it("shows the env's weighted components beside the total, whatever their names", () => {
    const metrics = { ...base, "env/all/exact": 0.25, "env/all/letters": 0.75, "env/all/style": 1 }
    const components = Metrics.headline({ exact: 1, letters: 0.5, style: 0 })
    assert.deepStrictEqual(components, ["exact", "letters"])
    assert.strictEqual(
      formatStep({ step: 2, steps: 10, metrics, components }),
      "step 3/10 | reward 0.500 exact 0.250 letters 0.750 | mixed 0.25 | 100 tok/s | 1.50s",
    )
    // no components given: the total only (a component named "correct" is not special)
    assert.strictEqual(
      formatStep({ step: 0, steps: 1, metrics: { ...base, "env/all/correct": 0.5 } }),
      "step 1/1 | reward 0.500 | mixed 0.25 | 100 tok/s | 1.50s",
    )
  })

  it("shows turns and tool calls per episode for multi-turn envs", () => {
    const metrics = { ...base, "env/all/correct": 0.5, "env/all/turns": 1.278, "env/all/tool_calls": 0.278 }
    assert.strictEqual(
      formatStep({ step: 0, steps: 3, metrics, components: ["correct"] }),
      "step 1/3 | reward 0.500 correct 0.500 | turns 1.28 tools 0.28 | mixed 0.25 | 100 tok/s | 1.50s",
    )
  })

  it("shows a game's win rate per role, in training and held-out play", () => {
    const metrics = {
      ...base,
      "env/all/turns": 2,
      "env/all/tool_calls": 0,
      "env/all/role/first/win_rate": 0.5,
      "env/all/role/second/win_rate": 0.5,
      "test/env/all/reward/total": 0.2,
      "test/env/all/role/first/win_rate": 0.6,
    }
    assert.strictEqual(
      formatStep({ step: 9, steps: 10, metrics }),
      "step 10/10 | reward 0.500 | turns 2.00 tools 0.00 | first won 0.50 second won 0.50 | mixed 0.25 | 100 tok/s | 1.50s | held-out reward 0.200 (held-out first won 0.60)",
    )
  })

  it("names the held-out score by the reward's one weighted component, else the total", () => {
    const metrics = { ...base, "test/env/all/reward/total": 0.4, "test/env/all/exact": 0.3, "test/env/all/letters": 0.9 }
    assert.match(formatStep({ step: 0, steps: 1, metrics, components: ["exact"] }), /\| held-out exact 0\.300$/)
    assert.match(formatStep({ step: 0, steps: 1, metrics, components: ["exact", "letters"] }), /\| held-out reward 0\.400$/)
    assert.deepStrictEqual(Metrics.heldOutScore(metrics), { label: "held-out reward", key: "test/env/all/reward/total", value: 0.4 })
  })
})

/**
 * The report's rollout table shows which reward component failed, with its message, and
 * what a reward noted (a judge's replies); the failure counts get a chart.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Report from "../../src/app/Report.ts"

describe("Report: reward failures and notes", () => {
  const metrics = [1, 2].map((step) => ({ step, "env/all/reward/total": 0.5, "env/all/correct": 0.5, "reward/correct/failed": 0, "reward/judged/failed": step }))
  const rollouts = [{
    step: 2,
    prompt: "Guess 1-9:",
    completion: " 7",
    reward: 1,
    masked: null,
    components: { correct: 1, judged: null },
    failed: { judged: "the judge could not answer: prompt has 61 tokens; the context length is 48" },
    notes: { correct: ["<no reply>"] },
    advantage: 0.5,
  }]
  const html = Report.render({ name: "r", config: { rewardWeights: { correct: 1, judged: 0 } }, metrics, rollouts })

  it("shows each failed component with its message and each note", () => {
    assert.include(html, "judged failed: the judge could not answer: prompt has 61 tokens; the context length is 48")
    assert.include(html, "correct: &quot;&lt;no reply&gt;&quot;")
  })

  it("charts the failure counts per component", () => {
    assert.include(html, "reward failures (count per step, reward/&lt;name&gt;/failed)")
  })
})

/**
 * Episode metrics (turns, tool calls and errors, stop reasons) and how the report shows
 * an episode: turn by turn, with the env's observations set apart from sampled text.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Report from "../../src/app/Report.ts"
import { episodeMetrics } from "../../src/run/Evaluate.ts"
import type { EpisodeRecord } from "../../src/run/Rollout.ts"

const episode = (turns: number, extra: Partial<EpisodeRecord>): EpisodeRecord => ({
  turns: Array.from({ length: turns }, () => ({ input: [1], sampled: [5], logprobs: [-1], text: "x", stopReason: "stop" as const })),
  stop: "completed",
  toolCalls: 0,
  toolErrors: 0,
  parseErrors: 0,
  turnReward: 0,
  version: 0,
  ...extra,
})

describe("episode metrics", () => {
  it("are per-episode means and stop-reason fractions", () => {
    const m = episodeMetrics([
      episode(2, { toolCalls: 1 }),
      episode(1, {}),
      episode(3, { toolCalls: 2, toolErrors: 1, stop: "max_tool_calls" }),
      episode(1, { parseErrors: 1, stop: "parse_error" }),
    ], "env/all/")
    assert.deepStrictEqual(m, {
      "env/all/turns": 7 / 4,
      "env/all/tool_calls": 3 / 4,
      "env/all/tool_errors": 1 / 4,
      "env/all/parse_errors": 1 / 4,
      "env/all/stop/completed": 0.5,
      "env/all/stop/max_tool_calls": 0.25,
      "env/all/stop/parse_error": 0.25,
    })
    assert.deepStrictEqual(episodeMetrics([], "env/all/"), {})
  })

  it("show in the report, and an episode reads turn by turn", () => {
    const html = Report.render({
      name: "calc",
      config: {},
      metrics: [{ step: 1, "env/all/reward/total": 0.5, "env/all/correct": 0.5, "env/all/turns": 1.5, "env/all/tool_calls": 0.5, "env/all/stop/completed": 1 }],
      rollouts: [{
        step: 1,
        prompt: "What is 47 plus 38?",
        completion: " 85",
        reward: 1,
        masked: null,
        components: { correct: 1 },
        advantage: 0.5,
        turns: [{ sampled: "[47+38]", observation: "=85;" }, { sampled: " 85" }],
        episodeStop: "completed",
      }],
    })
    assert.include(html, `<code>[47+38]</code><span class="obs" title="observation">=85;</span><code> 85</code> <span class="stop">(completed)</span>`)
    assert.include(html, `aria-label="episodes (per episode, train)"`)
    assert.include(html, `aria-label="why episodes ended (fraction, train)"`)
    // episode counters are not reward components
    assert.notInclude(html, "reward component: turns")
    assert.notInclude(html, "reward component: stop/completed")
  })
})

import { assert, beforeAll, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { Env } from "gyre"
import calculator, { answer, callText, observationText, type Problem } from "../../envs/calculator.ts"
import { classifyTurn1, encode, parseCall, promptIds, TURN1, TURN2 } from "../../scripts/calculator-episodes.ts"
import { decodeChars, EOS } from "../../src/backends/local/CharTokenizer.ts"
import { loadBaseModel } from "../../src/backends/local/Checkpoint.ts"
import { initTf } from "../../src/backends/local/index.ts"
import { LocalModel } from "../../src/backends/local/Model.ts"
import { LocalSamplerEngine } from "../../src/backends/local/SamplerEngine.ts"

// The committed base model of the calculator env, on held-out problems, greedy.
let sampler: LocalSamplerEngine
let problems: Array<Problem>

const greedy = async (prompt: ReadonlyArray<number>, turn: { readonly maxTokens: number; readonly stop?: ReadonlyArray<string> }) => {
  const r = await sampler.sample(prompt, { maxTokens: turn.maxTokens, temperature: 0, ...(turn.stop ? { stop: [...turn.stop] } : {}) }, { numSamples: 1 })
  return r.sequences[0]!
}

beforeAll(async () => {
  await initTf()
  const { config, weights } = await loadBaseModel("models/calculator")
  sampler = new LocalSamplerEngine(new LocalModel(config, weights), { seed: 0 })
  problems = (await Effect.runPromise(Env.evalSet(calculator, { seed: 0, size: 40 }))).map((t) => t.problem)
})

describe("models/calculator, the calculator env's base model", () => {
  it("answers 40 held-out problems with a well-formed call or a direct number, nothing else", async () => {
    assert.strictEqual(problems.length, 40)
    for (const p of problems) assert.strictEqual(Env.splitOf(calculator, p), "eval")
    const kinds = await Promise.all(problems.map(async (p) => {
      const s = await greedy(promptIds(p), TURN1)
      const text = decodeChars(s.tokens)
      const kind = classifyTurn1(text, s.stopReason, s.tokens[s.tokens.length - 1])
      assert.oneOf(kind, ["call", "direct"], `${calculator.prompt(p)} -> ${JSON.stringify(text)} (${s.stopReason})`)
      return kind
    }))
    assert.strictEqual(kinds.length, 40)
  })

  it("once it opens a call, writes the problem's operands and operator, and copies the tool's result", async () => {
    let rightCalls = 0
    let copies = 0
    for (const p of problems) {
      const opened = [...promptIds(p), ...encode("[")]
      const s = await greedy(opened, { maxTokens: TURN1.maxTokens - 1, stop: TURN1.stop })
      const call = `[${decodeChars(s.tokens)}`
      assert.isDefined(parseCall(call), `${calculator.prompt(p)} -> ${JSON.stringify(call)}`)
      if (call === callText(p)) rightCalls++
      // turn 2 after the correct call and its observation
      const t2 = await greedy([...promptIds(p), ...encode(callText(p) + observationText(answer(p)))], TURN2)
      if (t2.tokens[t2.tokens.length - 1] === EOS && decodeChars(t2.tokens).trim() === String(answer(p))) copies++
    }
    assert.isAtLeast(rightCalls, 36, "right operands and operator on at least 90% of calls")
    assert.isAtLeast(copies, 36, "copies the result on at least 90% of problems")
  })
})

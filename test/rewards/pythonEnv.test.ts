/**
 * envs/python-code.ts on its fixture: every row's assertions are read as function tests,
 * its reference program scores 1.1 in the embedded sandbox (all tests plus the fenced
 * format), a wrong one 0.1, and the prompt shows only the first assertion.
 */
import { readFileSync } from "node:fs"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { score } from "gyre/testing"
import { PythonSandbox } from "../../rewards/python.ts"
import { sandbox } from "./pythonSandbox.ts"
import pythonCode, { FIXTURE, prompt, tests } from "../../envs/python-code.ts"


const lines = readFileSync(FIXTURE, "utf8").split("\n").filter((l) => l.trim() !== "").map((l) => JSON.parse(l) as { code: string })
const rows = lines.map((r) => Schema.decodeUnknownSync(pythonCode.problem)(r))

describe("envs/python-code.ts", () => {
  it("the fixture has a few dozen rows in MBPP's format, each with three readable assertions", () => {
    assert.isAtLeast(rows.length, 30)
    for (const r of rows) assert.strictEqual(tests(r).calls.length, 3, r.test_list.join("\n"))
  })

  it("each row's reference program, in a ```python block, passes all its tests; a wrong one none", async () => {
    const scores = await Promise.all(rows.map((r, i) =>
      Effect.runPromise(Effect.provideService(score(pythonCode.reward, r, "Sure.\n```python\n" + lines[i]!.code + "\n```"), PythonSandbox, sandbox))
    ))
    assert.deepStrictEqual(scores.map((s) => s.value).filter((v) => Math.abs(v! - 1.1) > 1e-9), [])
    const wrong = await Effect.runPromise(Effect.provideService(score(pythonCode.reward, rows[0]!, "```python\ndef similar_elements(a, b):\n    return None\n```"), PythonSandbox, sandbox))
    assert.closeTo(wrong.value!, 0.1, 1e-9)
  })

  it("the prompt names the function through its first assertion and hides the others", () => {
    const text = prompt(rows[0]!)
    assert.include(text, rows[0]!.test_list[0]!)
    assert.notInclude(text, rows[0]!.test_list[1]!)
  })
})

describe("envs/python-code.ts after thinking", () => {
  it("runs the program after a thinking block, not one inside it", async () => {
    const row = rows[0]!
    const inThinking = "<think>\n```python\n" + lines[0]!.code + "\n```\n</think>\n```python\ndef similar_elements(a, b):\n    return ()\n```"
    const s = await Effect.runPromise(Effect.provideService(score(pythonCode.reward, row, inThinking), PythonSandbox, sandbox))
    assert.strictEqual(s.components["correct"], 0)
    const still = await Effect.runPromise(Effect.provideService(score(pythonCode.reward, row, "<think>\n```python\n" + lines[0]!.code + "\n```"), PythonSandbox, sandbox))
    assert.strictEqual(still.components["correct"], 0)
  })
})

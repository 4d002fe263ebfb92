/**
 * Python programming problems in MBPP's format, for real chat models (Qwen3 and the like).
 *
 *   user       "Write a function to find the shared elements from the given two lists ...
 *               Your code should pass this test:
 *               assert similar_elements((3, 4, 5, 6),(5, 7, 4, 10)) == (4, 5)
 *               Answer with the function in a ```python block."
 *   assistant  "```python\ndef similar_elements(a, b): ...```"
 *
 * Rows are the Hub's `google-research-datasets/mbpp` (config `full`): `text`, a reference
 * `code`, and `test_list`, three assertions `assert name(args) == expected`. The prompt
 * shows the first assertion (it names the function and its arguments); the reward runs the
 * program (the last ```python block after any thinking block) against all of them as function tests in the
 * `PythonSandbox` and scores the fraction passed. The assertions are read as data
 * (`testOfAssert`), never run: results are compared on the host, so an object whose
 * `__eq__` is always true passes nothing. An assertion that is not a call compared with a
 * literal (`set(f(x)) == ...`, `math.isclose(...)`) is left out; a row with none left is
 * not scored.
 *
 * Data: the Hub by default (downloaded once into gyre's cache); `HF_HUB_OFFLINE=1` reads
 * the cache, else the fixture `envs/data/python-code.jsonl` (32 problems written for gyre
 * in MBPP's format); `GYRE_FIXTURES=1` always reads the fixture.
 *
 * Backend: the embedded sandbox (Pyodide in worker threads) by default;
 * `GYRE_PYTHON_BACKEND=sandbox-fusion` with `SANDBOX_FUSION_URL` runs programs on a
 * Sandbox Fusion server instead.
 *
 * On Tinker: `gyre run python-code --backend tinker --model Qwen/Qwen3-8B`. On the embedded
 * models this env runs end to end, but they are far too small to write Python: expect 0.
 */
import { fileURLToPath } from "node:url"
import { Schema } from "effect"
import { Env, Reward } from "gyre"
import { afterThinking, matches, PythonSandbox, pythonProgram, pythonTests, testOfAssert } from "gyre/rewards"

const Problem = Schema.Struct({ task_id: Schema.Number, text: Schema.String, test_list: Schema.Array(Schema.String) })
type Problem = typeof Problem.Type

/** The fixture read offline: MBPP's row format, problems written for gyre. */
export const FIXTURE = fileURLToPath(new URL("./data/python-code.jsonl", import.meta.url))

/** The function tests of a row: its assertions on the function the first one calls. */
export const tests = (p: Problem) => {
  const read = p.test_list.map(testOfAssert).filter((t) => t !== undefined)
  const entry = read[0]?.entry ?? "solution"
  return { entry, calls: read.filter((t) => t.entry === entry).map((t) => ({ args: t.args, expected: t.expected })) }
}

export const prompt = (p: Problem): string =>
  `${p.text}\nYour code should pass this test:\n${p.test_list[0] ?? ""}\nAnswer with the function in a \`\`\`python block.`

export default Env.make({
  name: "python-code",
  problem: Problem,
  source: process.env["GYRE_FIXTURES"] === "1"
    ? Env.jsonl<Problem>(FIXTURE)
    : Env.huggingface<Problem>("google-research-datasets/mbpp", { config: "full", split: "train", fixture: FIXTURE }),
  prompt: (p) => [{ role: "user", content: prompt(p) }],
  reward: Reward.weighted({
    // the program after a thinking block (a completion still thinking has none: it fails to compile)
    correct: [pythonTests(tests, { program: (c) => pythonProgram(afterThinking(c) ?? "") }), 1],
    fenced: [matches(/```python\n[\s\S]*?```/, { name: "fenced" }), 0.1],
  }),
  services: PythonSandbox.layer(),
  sampling: { maxTokens: 1024, temperature: 1 },
  eval: { heldOut: 0.1, size: 64 },
  defaults: { groups: 32, groupSize: 8, learningRate: 4e-5, steps: 100, evalEvery: 20, saveEvery: 20 },
})

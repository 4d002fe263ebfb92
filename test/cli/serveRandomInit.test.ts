/**
 * From the command line, as a user runs it: `gyre serve --random-init --tokenizer <qwen3>`
 * serves a random model of Qwen3's vocabulary, and `gyre run gsm8k --backend <its URL>
 * --tokenizer <qwen3>` trains 2 steps on it with Qwen3's chat template, reading the env's
 * fixture (HF_HUB_OFFLINE=1, an empty cache). `serve --tokenizer` without `--random-init`
 * is refused, naming the flag.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { exited, killGroup, lines, start, startCommand, waitUntil } from "./Processes.ts"
import { qwenDir } from "../envs/realModels.ts"

describe("serve --random-init --tokenizer, then run with the same tokenizer", () => {
  it("gsm8k runs 2 steps over HTTP with Qwen3's chat template", async () => {
    const root = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-serve-qwen-"))
    // the env reads the Hub offline from an empty cache: its fixture
    const offline = { HF_HUB_OFFLINE: "1", GYRE_CACHE: Path.join(root, "cache") }
    const serve = startCommand("serve", ["--random-init", "--tokenizer", qwenDir, "--port", "0", "--state-dir", Path.join(root, "state")], offline)
    try {
      const announced = () => /--backend (http:\/\/[\d.:]+)/.exec(serve.output())?.[1]
      await waitUntil(() => announced() !== undefined, serve.child)
      const url = announced()
      assert.isDefined(url, `serve did not start:\n${serve.output()}`)
      assert.include(serve.output(), "(151669 ids), 4096 tokens of context")
      const run = start(["gsm8k", "--backend", url!, "--tokenizer", qwenDir, "--steps", "2", "--groups", "1", "--group-size", "2", "--max-tokens", "16", "--eval-every", "0", "--save-every", "0", "--out", Path.join(root, "out"), "--name", "g"], offline)
      assert.strictEqual(await exited(run.child), 0, run.output())
      const rollouts = lines(Path.join(root, "out", "g", "rollouts.jsonl")).map((l) => JSON.parse(l) as { prompt: unknown; problem: { question: string } })
      assert.isAtLeast(rollouts.length, 2)
      assert.include(run.output(), "reading the fixture")
    } finally {
      await killGroup(serve.child)
    }
  })

  it("serve --tokenizer without --random-init is refused, naming the flag", async () => {
    const serve = startCommand("serve", ["--tokenizer", qwenDir, "--port", "0"])
    assert.notStrictEqual(await exited(serve.child), 0)
    assert.include(serve.output(), "sizes a --random-init model's vocabulary")
    assert.include(serve.output(), "Add --random-init, or drop --tokenizer")
  })
})

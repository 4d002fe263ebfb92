/**
 * The `run` command's answers to bad input: one line that says what is wrong and what to do,
 * and exit code 1 (or the CLI's own usage error); and the lines a run prints name what they show.
 */
import { spawnSync } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { MAIN } from "./Processes.ts"

const ROOT = Path.resolve(import.meta.dirname, "../..")
const run = (...args: Array<string>) => {
  // a synchronous spawn blocks vitest's own timer: its kill limit is the hang-only one (9 min)
  const r = spawnSync(process.execPath, [MAIN, "run", ...args], { cwd: ROOT, encoding: "utf8", timeout: 540_000 })
  return { code: r.status, out: `${r.stdout}${r.stderr}` }
}

describe("gyre run (the built command)", () => {
  it("lists the available envs for an unknown one", () => {
    const r = run("nope")
    assert.strictEqual(r.code, 1)
    assert.match(r.out, /unknown env "nope"\. Available: (?:[\w-]+, )*math\b/)
  })

  it("names a module without a default Env", () => {
    const file = Path.join(Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-cli-")), "bad.ts")
    Fs.writeFileSync(file, "export const notAnEnv = 1\n")
    const r = run(file)
    assert.strictEqual(r.code, 1)
    assert.include(r.out, "must have a default export made with Env.make")
  })

  it("rejects an out-of-range flag value, naming the setting", () => {
    const r = run("math", "--group-size", "0")
    assert.strictEqual(r.code, 1)
    assert.match(r.out, /invalid settings[\s\S]*--group-size/)
  })

  it("names the flag, not the settings path, when a value is out of range", () => {
    const r = run("math", "--lr", "-1")
    assert.strictEqual(r.code, 1)
    assert.include(r.out, "--lr must be a value greater than or equal to 0, got -1")
    assert.notInclude(r.out, "learning_rate")
    assert.notInclude(r.out, "learningRate")
  })

  it("answers an unknown flag with one line: the flag, the suggestion, and --help", () => {
    const r = run("math", "--stpes", "3")
    assert.notStrictEqual(r.code, 0)
    const lines = r.out.split("\n").filter((l) => l.trim() !== "")
    assert.deepStrictEqual(lines, ["error: unknown flag --stpes (did you mean --steps?); see --help"])
  })

  it("rejects a flag of the wrong type", () => {
    const r = run("math", "--steps", "many")
    assert.notStrictEqual(r.code, 0)
    assert.match(r.out, /steps/)
  })

  it("rejects an unknown loss config key before any work", () => {
    const out = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-cli-"))
    const r = run("math", "--steps", "1", "--eval-every", "0", "--loss-config", "clip_lo=0.5", "--out", out)
    assert.strictEqual(r.code, 1)
    assert.include(r.out, "clip_lo")
  })

  it("refuses to overwrite an existing run, and to change the data order on --resume", () => {
    const out = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-cli-"))
    const first = run("math", "--steps", "1", "--groups", "1", "--group-size", "2", "--eval-every", "0", "--name", "r", "--out", out)
    assert.strictEqual(first.code, 0, first.out)
    const again = run("math", "--steps", "1", "--name", "r", "--out", out)
    assert.strictEqual(again.code, 1)
    assert.include(again.out, "already holds a run")
    const reseeded = run("--resume", Path.join(out, "r"), "--seed", "7")
    assert.strictEqual(reseeded.code, 1)
    assert.include(reseeded.out, "--seed cannot change on --resume")
  })

  it("says sft in the header, and names the held-out score the same way per step and at the end", () => {
    const out = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-cli-"))
    const r = run("math", "--sft", "--steps", "1", "--groups", "2", "--eval-every", "1", "--eval-size", "4", "--name", "s", "--out", out)
    assert.strictEqual(r.code, 0, r.out)
    assert.match(r.out, /\| loss sft \(cross_entropy\) \|/)
    assert.notInclude(r.out, "loss ppo")
    const metrics = Fs.readFileSync(Path.join(out, "s", "metrics.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l))
    const correct = (metrics[metrics.length - 1]["test/env/all/correct"] as number).toFixed(3)
    assert.match(r.out, new RegExp(`^step 1/1 \\|.*\\| held-out correct ${correct} \\|`, "m"))
    assert.match(r.out, new RegExp(`^done: .*; held-out correct ${correct} at step 1$`, "m"))
    assert.notMatch(r.out, /\| eval |eval reward/)
  })

  it("teaches with --help", () => {
    const r = run("--help")
    assert.strictEqual(r.code, 0)
    for (const flag of ["--steps", "--group-size", "--loss", "--lr", "--resume", "--backend", "--async", "--sft"]) assert.include(r.out, flag)
  })
})

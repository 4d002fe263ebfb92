/**
 * `gyre run --cores 2`, as an installed gyre runs it (the built JavaScript, a TypeScript
 * env module given by its path): its workers play the groups (the env's `main_thread`
 * component is 0) and the run folder's rollouts are the ones `--cores 1` writes. A value
 * that is not a count of cores is refused in one line.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { exited, rows, start } from "../../cli/Processes.ts"

const ENV = Path.join(import.meta.dirname, "SingleEnv.ts")

const run = async (cores: string, out: string) => {
  const { child, output } = start([ENV, "--steps", "2", "--groups", "3", "--group-size", "4", "--eval-every", "0", "--save-every", "0", "--out", out, "--name", `c${cores}`, "--cores", cores])
  return { code: await exited(child), output: output() }
}

describe("gyre run --cores", () => {
  it("plays the groups on worker threads and writes the rollouts one core writes", async () => {
    const out = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-cores-cli-"))
    const [one, two] = [await run("1", out), await run("2", out)]
    assert.strictEqual(one.code, 0, one.output)
    assert.strictEqual(two.code, 0, two.output)
    const strip = (r: Record<string, unknown>) => ({ ...r, components: { ...(r["components"] as Record<string, number>), main_thread: undefined } })
    const a = rows(Path.join(out, "c1", "rollouts.jsonl"))
    const b = rows(Path.join(out, "c2", "rollouts.jsonl"))
    assert.strictEqual(a.length, 2 * 3 * 4)
    assert.deepStrictEqual(a.map((r) => (r["components"] as Record<string, number>)["main_thread"]), a.map(() => 1))
    assert.deepStrictEqual(b.map((r) => (r["components"] as Record<string, number>)["main_thread"]), b.map(() => 0))
    assert.deepStrictEqual(b.map(strip), a.map(strip))
  })

  it("refuses a value that is not a count of cores", async () => {
    const bad = await run("zero", Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-cores-cli-")))
    assert.strictEqual(bad.code, 1)
    assert.include(bad.output, "error: Invalid value for flag --cores")
    assert.include(bad.output, "a whole number of cores (1 or more) or auto")
  })
})

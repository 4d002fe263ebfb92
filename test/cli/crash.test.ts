/**
 * Resume equals no crash: a seeded run killed with SIGKILL at several points (mid-step,
 * while a resume starts up, right after a checkpoint) and resumed each
 * time ends with the same weights, metrics (timings aside), rollouts and checkpoints as
 * the same run left alone.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { exited, killGroup, rows, start, waitUntil } from "./Processes.ts"

const STEPS = 16
/** Both runs are named `c`: the run id, and so the data order, comes from the folder's name. */
const args = (out: string) => [
  "math", "--steps", String(STEPS), "--groups", "2", "--group-size", "4", "--save-every", "3",
  "--eval-every", "5", "--eval-size", "8", "--log-rollouts-every", "1", "--seed", "0", "--name", "c", "--out", out,
]

/** Metrics rows without the keys that measure time. */
const untimed = (metrics: ReadonlyArray<Record<string, unknown>>) =>
  metrics.map((r) => Object.fromEntries(Object.entries(r).filter(([k]) => !k.startsWith("time/") && !k.startsWith("throughput/"))))

/** Where two lists of rows first differ, for the failure message. */
const firstDifference = (got: ReadonlyArray<Record<string, unknown>>, want: ReadonlyArray<Record<string, unknown>>) => {
  for (let i = 0; i < Math.max(got.length, want.length); i++) {
    const g = got[i] ?? {}
    const w = want[i] ?? {}
    for (const k of new Set([...Object.keys(g), ...Object.keys(w)])) {
      if (JSON.stringify(g[k]) !== JSON.stringify(w[k])) return `row ${i} (step ${String(w["step"] ?? g["step"])}) ${k}: ${JSON.stringify(g[k])}, uninterrupted ${JSON.stringify(w[k])}`
    }
  }
  return "no difference"
}

const finishedSteps = (dir: string) => rows(Path.join(dir, "metrics.jsonl")).filter((r) => Number(r["step"]) > 0).length

describe("run killed with SIGKILL and resumed", () => {
  it("ends with the weights, metrics, rollouts and checkpoints of an uninterrupted run", async () => {
    const refOut = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-ref-"))
    const out = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-crash-"))
    const ref = Path.join(refOut, "c")
    const dir = Path.join(out, "c")
    const reference = start(args(refOut))

    /** Waits for `when`, then kills the run's whole process group. */
    const killed: Array<string> = []
    const crash = async (what: string, run: ReturnType<typeof start>, when: () => boolean, delayMs = 0) => {
      await waitUntil(when, run.child, 5)
      if (delayMs > 0) await new Promise((r) => setTimeout(r, delayMs))
      assert.isNull(run.child.exitCode, `the run ended before it could be killed (${what}):\n${run.output()}`)
      await killGroup(run.child)
      killed.push(`${what}: killed with ${finishedSteps(dir)} steps logged`)
    }
    const resume = () => start(["--resume", dir])

    // Mid-step: shortly after step 4's row (one step past checkpoint 3), while step 5 samples and trains.
    await crash("mid-step", start(args(out)), () => finishedSteps(dir) >= 4, 15)
    // While a resume starts up: loading the checkpoint, rewriting the logs.
    const r1 = resume()
    await crash("resume start-up", r1, () => r1.output().includes("resuming") || r1.output().includes("no checkpoint"))
    // Right after a checkpoint row: between steps, or inside the report write.
    const r2 = resume()
    const checkpointsAt = rows(Path.join(dir, "checkpoints.jsonl")).length
    await crash("after a checkpoint", r2, () => rows(Path.join(dir, "checkpoints.jsonl")).length > checkpointsAt)

    const last = resume()
    assert.strictEqual(await exited(last.child), 0, last.output())
    assert.strictEqual(await exited(reference.child), 0, reference.output())
    const story = killed.join("\n")

    const file = (d: string, name: string) => Path.join(d, name)
    const metrics = untimed(rows(file(dir, "metrics.jsonl")))
    const expected = untimed(rows(file(ref, "metrics.jsonl")))
    assert.deepStrictEqual(metrics.map((r) => r["step"]), expected.map((r) => r["step"]), story)
    assert.deepStrictEqual(metrics, expected, `${story}\n${firstDifference(metrics, expected)}`)
    assert.deepStrictEqual(rows(file(dir, "rollouts.jsonl")), rows(file(ref, "rollouts.jsonl")), story)
    const steps = (d: string) => rows(file(d, "checkpoints.jsonl")).map((c) => c["step"])
    assert.deepStrictEqual(steps(dir), steps(ref), story)
    assert.deepStrictEqual(steps(ref), [3, 6, 9, 12, 15, 16])
    for (const step of steps(ref)) {
      const name = `state/step-${step}.ckpt`
      assert.isTrue(Fs.readFileSync(file(dir, name)).equals(Fs.readFileSync(file(ref, name))), `${name} is byte for byte the uninterrupted run's`)
    }
    for (const d of [dir, Path.join(dir, "state")]) assert.deepStrictEqual(Fs.readdirSync(d).filter((f) => f.endsWith(".tmp")), [], `no temp files in ${d}`)
  })
})

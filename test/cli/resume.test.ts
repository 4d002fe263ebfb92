/**
 * Crash safety end to end: `npx tsx run` is killed with SIGKILL mid-run, then resumed
 * with `--resume`; every step appears exactly once, the checkpoints are intact, and the
 * resumed run ends as the same run left alone does (the weights and the optimizer state
 * both come back from the checkpoint).
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import * as Checkpoint from "../../src/backends/local/Checkpoint.ts"
import { exited, killGroup, lines, rows, start, waitUntil } from "./Processes.ts"

/** Metrics rows without the keys that measure time. */
const untimed = (file: string) =>
  rows(file).map((r) => Object.fromEntries(Object.entries(r).filter(([k]) => !k.startsWith("time/") && !k.startsWith("throughput/"))))

describe("run --resume after SIGKILL", () => {
  it("continues after the last checkpoint with each step logged exactly once", async () => {
    const out = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-kill-"))
    const dir = Path.join(out, "k")
    const args = ["math", "--steps", "24", "--groups", "2", "--group-size", "4", "--save-every", "4", "--eval-every", "0", "--out", out]
    // the same run, left alone
    const alone = start([...args, "--name", "u"])
    const first = start([...args, "--name", "k"])
    // Wait for two complete checkpoints, then kill without warning.
    await waitUntil(() => lines(Path.join(dir, "checkpoints.jsonl")).length >= 2, first.child)
    assert.isNull(first.child.exitCode, `the run ended before it could be killed:\n${first.output()}`)
    await killGroup(first.child)
    const stepsBefore = lines(Path.join(dir, "metrics.jsonl")).length
    assert.isBelow(stepsBefore, 24)

    const second = start(["math", "--resume", dir])
    const code = await exited(second.child)
    assert.strictEqual(code, 0, second.output())
    assert.include(second.output(), "resuming")

    const steps = lines(Path.join(dir, "metrics.jsonl")).map((l) => JSON.parse(l).step)
    assert.deepStrictEqual(steps, Array.from({ length: 24 }, (_, i) => i + 1))
    const checkpoints = lines(Path.join(dir, "checkpoints.jsonl")).map((l) => JSON.parse(l))
    assert.deepStrictEqual(checkpoints.map((c) => c.step).slice(-3), [16, 20, 24])
    for (const c of checkpoints) {
      const file = await Checkpoint.read(c.path)
      assert.isAbove(Object.keys(file.tensors).length, 0, `${c.path} decodes`)
    }
    // No temp files left behind by atomic writes.
    assert.deepStrictEqual(Fs.readdirSync(Path.join(dir, "state")).filter((f) => f.endsWith(".tmp")), [])

    // Resumed with its optimizer state, the run is the one left alone: the same losses and
    // samples after the checkpoint, and the same final weights and Adam moments.
    assert.strictEqual(await exited(alone.child), 0, alone.output())
    const ref = Path.join(out, "u")
    assert.deepStrictEqual(untimed(Path.join(dir, "metrics.jsonl")), untimed(Path.join(ref, "metrics.jsonl")))
    assert.strictEqual(Fs.readFileSync(Path.join(dir, "rollouts.jsonl"), "utf8"), Fs.readFileSync(Path.join(ref, "rollouts.jsonl"), "utf8"))
    assert.isTrue(Fs.readFileSync(Path.join(dir, "state/step-24.ckpt")).equals(Fs.readFileSync(Path.join(ref, "state/step-24.ckpt"))), "the final state file is the uninterrupted run's")
  })

  it("saves a checkpoint when interrupted with SIGINT, and resumes from it", async () => {
    const out = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-int-"))
    const dir = Path.join(out, "i")
    const args = ["math", "--steps", "400", "--groups", "2", "--group-size", "4", "--save-every", "1000", "--eval-every", "0", "--name", "i", "--out", out]
    const first = start(args)
    await waitUntil(() => lines(Path.join(dir, "metrics.jsonl")).length >= 5, first.child)
    process.kill(-first.child.pid!, "SIGINT")
    await exited(first.child)
    assert.include(first.output(), "interrupted after step")
    const logged = lines(Path.join(dir, "metrics.jsonl")).length
    const checkpoints = lines(Path.join(dir, "checkpoints.jsonl")).map((l) => JSON.parse(l))
    assert.strictEqual(checkpoints.length, 1, first.output())
    assert.strictEqual(checkpoints[0].step, logged)
    assert.isBelow(logged, 400)

    const second = start(["math", "--resume", dir, "--steps", String(logged + 3)])
    assert.strictEqual(await exited(second.child), 0, second.output())
    const steps = lines(Path.join(dir, "metrics.jsonl")).map((l) => JSON.parse(l).step)
    assert.deepStrictEqual(steps, Array.from({ length: logged + 3 }, (_, i) => i + 1))
  })
})

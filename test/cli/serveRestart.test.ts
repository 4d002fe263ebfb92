/**
 * A restarted server loses nothing: a seeded run over HTTP against `serve`, whose server
 * is killed with SIGKILL after step 3 and restarted on the same state folder (and port),
 * resumes with `--resume` (no `--backend`: the run's own, from its config.json) and ends
 * with the metrics (timings aside), rollouts and checkpoint files of the same run left
 * alone (run on the restarted server). The run that lost its server stops with a message
 * that says to resume.
 * Also: `--resume` with another `--backend` is refused, naming both.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { FILE } from "../../src/backends/http/server/CheckpointIndex.ts"
import { resumeBackend } from "../../src/run/Start.ts"
import { exited, killGroup, rows, start, startCommand, waitUntil } from "./Processes.ts"

const STEPS = 10

/** `serve` on a small random model; port 0 picks a free one. */
const serve = (stateDir: string, port: number) => startCommand("serve", ["--random-init", "--port", String(port), "--state-dir", stateDir])

/** The URL a starting `serve` announces. */
const urlOf = async (s: ReturnType<typeof serve>) => {
  const announced = () => /--backend (http:\/\/[\d.:]+)/.exec(s.output())?.[1]
  await waitUntil(() => announced() !== undefined, s.child)
  const url = announced()
  assert.isDefined(url, `serve did not start:\n${s.output()}`)
  return url!
}

/** Both runs are named `c`: the run id, and so the data order, comes from the folder's name. */
const args = (url: string, out: string) => [
  "test/envs/codes.ts", "--backend", url, "--steps", String(STEPS), "--groups", "2", "--group-size", "4", "--lr", "0.01",
  "--save-every", "1", "--eval-every", "0", "--log-rollouts-every", "1", "--seed", "0", "--name", "c", "--out", out,
]

/** Metrics rows without the keys that measure time. */
const untimed = (metrics: ReadonlyArray<Record<string, unknown>>) =>
  metrics.map((r) => Object.fromEntries(Object.entries(r).filter(([k]) => !k.startsWith("time/") && !k.startsWith("throughput/"))))

describe("serve killed with SIGKILL and restarted on its state folder", () => {
  it("the run resumes and ends with the metrics, rollouts and weights of an uninterrupted run", async () => {
    const root = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-serve-restart-"))
    const stateDir = Path.join(root, "state")
    const first = serve(stateDir, 0)
    const servers = [first]
    try {
      const url = await urlOf(first)
      const port = Number(new URL(url).port)
      const dir = Path.join(root, "out", "c")
      const run = start(args(url, Path.join(root, "out")))
      await waitUntil(() => rows(Path.join(dir, "checkpoints.jsonl")).length >= 3, run.child, 5)
      assert.isNull(run.child.exitCode, `the run ended before its server was killed:\n${run.output()}`)
      await killGroup(first.child)

      const second = serve(stateDir, port)
      servers.push(second)
      assert.strictEqual(await urlOf(second), url)
      // the run's session and model died with the first server: it stops, saying how to go on
      assert.strictEqual(await exited(run.child), 1, run.output())
      assert.include(run.output(), "--resume")
      const logged = rows(Path.join(dir, "metrics.jsonl")).length
      assert.isBelow(logged, STEPS)

      // the same run left alone (on the restarted server, beside the resumed one)
      const reference = start(args(url, Path.join(root, "ref")))
      const resumed = start(["--resume", dir])
      assert.strictEqual(await exited(resumed.child), 0, resumed.output())
      assert.include(resumed.output(), "resuming")
      assert.strictEqual(await exited(reference.child), 0, reference.output())

      const file = (d: string, name: string) => Path.join(d, name)
      const ref = Path.join(root, "ref", "c")
      assert.deepStrictEqual(untimed(rows(file(dir, "metrics.jsonl"))), untimed(rows(file(ref, "metrics.jsonl"))))
      assert.deepStrictEqual(rows(file(dir, "rollouts.jsonl")), rows(file(ref, "rollouts.jsonl")))
      // each step's state file, found through the restarted server's index, is the uninterrupted run's
      const index = new Map(rows(Path.join(stateDir, FILE)).map((e) => [String(e["tinker_path"]), Path.join(stateDir, String(e["file"]))]))
      const states = (d: string) => new Map(rows(file(d, "checkpoints.jsonl")).map((c) => [Number(c["step"]), index.get(String(c["path"]))!]))
      const got = states(dir)
      const want = states(ref)
      assert.deepStrictEqual([...got.keys()].sort((a, b) => a - b), Array.from({ length: STEPS }, (_, i) => i + 1))
      for (const [step, f] of want) assert.isTrue(Fs.readFileSync(got.get(step)!).equals(Fs.readFileSync(f)), `step ${step}'s state file is byte for byte the uninterrupted run's`)
    } finally {
      for (const s of servers) if (s.child.exitCode === null && s.child.signalCode === null) await killGroup(s.child)
    }
  })

  it.effect("--resume continues on the backend config.json records, and refuses another, naming both", () =>
    Effect.gen(function* () {
      const url = "http://127.0.0.1:8080"
      assert.strictEqual(yield* resumeBackend(undefined, { backend: url }, "runs/c"), url)
      assert.strictEqual(yield* resumeBackend(url, { backend: url }, "runs/c"), url)
      assert.strictEqual(yield* resumeBackend(undefined, {}, "runs/c"), "embedded")
      assert.strictEqual(yield* resumeBackend(undefined, undefined, undefined), "embedded")
      const refused = yield* Effect.flip(resumeBackend("embedded", { backend: url }, "runs/c"))
      assert.strictEqual(refused.reason, "Resume")
      assert.include(refused.message, `backend ${url}`)
      assert.include(refused.message, "--backend embedded")
      assert.include(refused.message, "leave --backend out")
      assert.notInclude(refused.message, "answers at embedded")
      const moved = yield* Effect.flip(resumeBackend("http://127.0.0.1:9090", { backend: url }, "runs/c"))
      assert.include(moved.message, 'if that server now answers at http://127.0.0.1:9090, set "backend" in runs/c/config.json to it')
      const toRemote = yield* Effect.flip(resumeBackend("http://elsewhere:1", { backend: "embedded" }, "runs/c"))
      assert.include(toRemote.message, "run folder's state files")
    }))
})

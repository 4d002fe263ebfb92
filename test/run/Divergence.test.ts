/**
 * divergence.jsonl: at the rollout-logging cadence, a histogram of sampler - trainer
 * log-probs over exactly the trained tokens and the worst-divergent tokens, each pointing
 * at a real sampled token (its text decoded by the tokenizer, at its position in the
 * logged completion); resume drops and rewrites the rows of redone steps; the report
 * shows the panel.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { Local } from "../../src/backends/local/index.ts"
import * as Metrics from "../../src/metrics/Metrics.ts"
import * as Report from "../../src/app/Report.ts"
import * as RunFolder from "../../src/folder/RunFolder.ts"
import * as RunLog from "../../src/folder/RunLog.ts"
import { RunObserver } from "../../src/run/Observer.ts"
import * as Runner from "../../src/Runner.ts"
import vowels, { toySettings, TINY, quiet } from "../envs/vowels.ts"

const backend = (dir: string) =>
  Layer.fresh(Local.layer({ config: TINY, seed: 0, stateDir: RunLog.paths(dir).state, lora: { rank: 4, alpha: 8, targets: ["q", "k", "v", "o", "w1", "w2"] } }))
const runDir = () => Path.join(Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-divergence-")), "r")

type Row = Record<string, unknown>
type Worst = { group: number; sample: number; key: string; position: number; token: number; text: string; sampler: number; trainer: number }

describe("divergence.jsonl", () => {
  it.effect("off-policy sampling: a histogram of the trained tokens and the worst tokens, at the rollout cadence", () =>
    Effect.gen(function* () {
      const dir = runDir()
      // temperature 0.6: the sampler's log-probs are of another distribution than the trainer's at T=1
      const settings = toySettings(dir, { steps: 4, groups: 2, groupSize: 4, logRolloutsEvery: 2, samplingOverrides: { temperature: 0.6 } })
      // the report observes the run, as the CLI has it
      const metrics = yield* Runner.run(settings, vowels).pipe(Effect.provide(backend(dir)), quiet, Effect.provideService(RunObserver, Report.observer(dir)))
      // the rows the runner wrote decode with the run folder's Schema
      const decoded = yield* RunFolder.readDivergence(RunFolder.paths(dir))
      const rows = yield* RunLog.readJsonl(Runner.divergencePath(dir))
      assert.deepStrictEqual(decoded, rows)
      const rollouts = yield* RunLog.readJsonl(RunLog.paths(dir).rollouts)
      // steps that trained anything, among the logged ones (1, 2, 4)
      const logged = [1, 2, 4].filter((s) => (metrics[s - 1]!["train/active_tokens"] ?? 0) > 0)
      assert.isAtLeast(logged.length, 2)
      assert.deepStrictEqual(rows.map((r) => r["step"]), logged)
      for (const row of rows) {
        const m = metrics[(row["step"] as number) - 1]!
        assert.deepStrictEqual(row["edges"], Metrics.DIVERGENCE_EDGES)
        const counts = row["counts"] as Array<number>
        assert.strictEqual(counts.reduce((a, b) => a + b, 0), m["train/active_tokens"])
        assert.strictEqual(row["tokens"], m["train/active_tokens"])
        const worst = row["worst"] as Array<Worst>
        assert.strictEqual(worst.length, Math.min(8, m["train/active_tokens"]!))
        const gaps = worst.map((w) => Math.abs(w.sampler - w.trainer))
        assert.deepStrictEqual(gaps, [...gaps].sort((a, b) => b - a))
        // off-policy: the worst token really diverges
        assert.isAbove(gaps[0]!, 0.05)
        // the mean difference is v1: the histogram's mass is not all in the center bin
        assert.isBelow(counts[Metrics.DIVERGENCE_EDGES.indexOf(0.001)]!, m["train/active_tokens"]!)
        for (const w of worst) {
          const r = rollouts.find((x) => x["step"] === row["step"] && x["group"] === w.group && x["sample"] === w.sample) as Row
          assert.isDefined(r)
          assert.strictEqual(r["key"], w.key)
          // the character tokenizer: a token is one character of the completion, or the end token (decoded as "")
          const completion = String(r["completion"])
          if (w.position < completion.length) assert.strictEqual(w.text, completion[w.position])
          else assert.strictEqual(w.position, completion.length)
          assert.isTrue(w.position >= 0)
        }
      }
      const html = Fs.readFileSync(RunLog.paths(dir).report, "utf8")
      assert.include(html, "Sampler/trainer divergence")
      assert.include(html, `aria-label="sampler - trainer log-prob differences"`)
    }))

  it.effect("on-policy sampling: every trained token agrees within 0.01", () =>
    Effect.gen(function* () {
      const dir = runDir()
      yield* Runner.run(toySettings(dir, { steps: 2, groups: 2, groupSize: 4 }), vowels).pipe(Effect.provide(backend(dir)), quiet)
      const rows = yield* RunLog.readJsonl(Runner.divergencePath(dir))
      assert.isAtLeast(rows.length, 1)
      const edges = Metrics.DIVERGENCE_EDGES
      for (const row of rows) {
        const counts = row["counts"] as Array<number>
        const near = counts.slice(edges.indexOf(-0.01) + 1, edges.indexOf(0.01) + 1).reduce((a, b) => a + b, 0)
        assert.strictEqual(near, row["tokens"])
      }
    }))

  it.effect("a resumed run drops the rows of the steps it redoes and writes them again, once", () =>
    Effect.gen(function* () {
      const dir = runDir()
      const settings = toySettings(dir, { steps: 4, groups: 4, groupSize: 8, saveEvery: 2, samplingOverrides: { temperature: 0.6 } })
      yield* Runner.run(settings, vowels).pipe(Effect.provide(backend(dir)), quiet)
      const before = yield* RunLog.readJsonl(Runner.divergencePath(dir))
      // rows of steps 3 or 4 (those redone) are there to be dropped
      assert.isTrue(before.some((r) => (r["step"] as number) > 2), JSON.stringify(before.map((r) => r["step"])))
      yield* RunLog.filterJsonl(RunLog.paths(dir).checkpoints, (row) => Number(row["step"]) <= 2)
      yield* Runner.run(settings, vowels, { resume: true }).pipe(Effect.provide(backend(dir)), quiet)
      assert.deepStrictEqual(yield* RunLog.readJsonl(Runner.divergencePath(dir)), before)
    }))
})

describe("Report divergence panel", () => {
  const row = (step: number, counts: Array<number>, worst: Array<Partial<Worst>>) => ({
    step,
    edges: Metrics.DIVERGENCE_EDGES,
    counts,
    tokens: counts.reduce((a, b) => a + b, 0),
    worst: worst.map((w) => ({ group: 0, sample: 0, key: "", position: 0, token: 0, text: "", sampler: 0, trainer: 0, ...w })),
  })
  const zeros = () => new Array<number>(Metrics.DIVERGENCE_EDGES.length + 1).fill(0)

  it("pools the last logged steps into one histogram and lists their worst tokens, worst first, escaped", () => {
    const rows = Array.from({ length: 7 }, (_, i) => {
      const counts = zeros()
      counts[8] = 10 * (i + 1)
      counts[0] = i
      return row(i + 1, counts, [{ key: `p${i}`, position: i, text: i === 6 ? "<" : "a", sampler: -1, trainer: -1 - 0.1 * i }])
    })
    const html = Report.render({ name: "r", config: undefined, metrics: [], rollouts: [], divergence: rows })
    const panel = html.slice(html.indexOf("<h2>Sampler/trainer divergence</h2>"), html.indexOf("<h2>Recent rollouts</h2>"))
    // the last 5 logged steps: 3..7; center bin 30+40+50+60+70, first bin 2+3+4+5+6
    assert.include(panel, "steps 3–7 (5 logged steps): 270 tokens")
    assert.include(panel, "<title>[-0.001, 0.001): 250</title>")
    assert.include(panel, "<title>&lt; -1: 20</title>")
    const tableRows = [...panel.matchAll(/<tr><td>(\d+)<\/td><td>([^<]*)<\/td>/g)].map((m) => `${m[1]}:${m[2]}`)
    assert.deepStrictEqual(tableRows, ["7:p6", "6:p5", "5:p4", "4:p3", "3:p2"])
    assert.include(panel, "<code>&quot;&lt;&quot;</code>")
    assert.notInclude(panel, "<code>\"<\"</code>")
  })

  it("is absent without divergence rows", () => {
    const html = Report.render({ name: "r", config: undefined, metrics: [], rollouts: [] })
    assert.notInclude(html, "Sampler/trainer divergence")
    const bad = Report.render({ name: "r", config: undefined, metrics: [], rollouts: [], divergence: [{ step: 1, edges: [0], counts: [1], tokens: 1, worst: [] }] })
    assert.notInclude(bad, "Sampler/trainer divergence")
  })

  it.effect("a row that does not decode stops the report, naming the file, the line and the field", () =>
    Effect.gen(function* () {
      const dir = runDir()
      const files = RunFolder.paths(dir)
      Fs.mkdirSync(dir, { recursive: true })
      Fs.writeFileSync(files.metrics, "")
      const good = { step: 1, edges: [0], counts: [1, 2], tokens: 3, worst: [] }
      Fs.writeFileSync(files.divergence, `${JSON.stringify(good)}\n${JSON.stringify({ ...good, step: 2, tokens: "3" })}\n`)
      const failure = yield* Report.writeOrFail(dir).pipe(Effect.flip)
      assert.match(failure.message, /divergence\.jsonl/)
      assert.match(failure.message, /line 2/)
      assert.match(failure.message, /tokens/)
    }))
})

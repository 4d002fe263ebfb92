/**
 * The report page: masked rollouts show their reason and no total, every reward component
 * has its own scale, charts cope with absent keys, and writing the report never fails a run.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Logger, References } from "effect"
import * as Report from "../src/app/Report.ts"

/** The figure of one chart, by its title. */
const figure = (html: string, title: string) => {
  const at = html.indexOf(`aria-label="${title}"`)
  assert.isAtLeast(at, 0, `no chart titled ${title}`)
  return html.slice(at, html.indexOf("</figure>", at))
}
/** The y-axis tick labels of a chart. */
const ticks = (svg: string) => [...svg.matchAll(/stroke="#e5e7eb"\/><text [^>]*>([^<]+)<\/text>/g)].map((m) => Number(m[1]))

const metrics = [1, 2, 3, 4].map((step) => ({
  step,
  "env/all/reward/total": 0.2 + 0.05 * step,
  "env/all/correct": 0.2 + 0.05 * step,
  "env/all/chars": 40 + step, // a weight-0 metric on another scale
  "env/all/frac_masked": step === 2 ? 0.25 : 0,
  "by_group/frac_mixed": 0.5,
  "by_group/frac_all_good": 0.25,
  "by_group/frac_all_bad": 0,
  "by_group/frac_all_equal": 0.25,
  ...(step === 4 ? { "test/env/all/reward/total": 0.4, "test/env/all/correct": 0.4, "test/env/all/chars": 41, "test/env/all/frac_masked": 0.1 } : {}),
}))
const rollouts = [
  { step: 2, prompt: "What is 2 plus 3?", completion: " 5", reward: 1, masked: null, components: { correct: 1, chars: 2 }, advantage: 0.5 },
  { step: 2, prompt: "What is 2 plus 3?", completion: " 7", reward: null, masked: "judge timed out", components: { chars: 2 }, advantage: 0 },
]

describe("Report.render", () => {
  const html = Report.render({ name: "r", config: { rewardWeights: { correct: 1, chars: 0 } }, metrics, rollouts })

  it("shows a masked rollout's reason and no total", () => {
    assert.include(html, "<th>masked</th>")
    const masked = html.slice(html.indexOf("<code> 7</code>"))
    const cells = [...masked.slice(0, masked.indexOf("</tr>")).matchAll(/<td>([^<]*)<\/td>/g)].map((m) => m[1])
    assert.deepStrictEqual(cells.slice(0, 2), ["—", "judge timed out"])
    const kept = html.slice(html.indexOf("<code> 5</code>"))
    assert.match(kept.slice(0, kept.indexOf("</tr>")), /<td>1\.000<\/td><td><\/td>/)
  })

  it("charts the masked fraction, train and held-out", () => {
    const fig = figure(html, "masked samples (fraction)")
    assert.include(fig, "held-out")
    assert.include(fig, "train")
  })

  it("gives each component its own scale: a weight-0 metric does not set the total's", () => {
    const total = ticks(figure(html, "reward (total)"))
    assert.lengthOf(total, 3)
    assert.isBelow(Math.max(...total), 1, `total ticks ${total}`)
    const chars = ticks(figure(html, "chars: metric only (weight 0, not in the total)"))
    assert.isAbove(Math.max(...chars), 40)
    const correct = ticks(figure(html, "reward component: correct (weight 1)"))
    assert.isBelow(Math.max(...correct), 1)
    // metric-only components come after the optimized ones
    assert.isBelow(html.indexOf("reward component: correct"), html.indexOf("chars: metric only"))
  })

  it("charts every group shape, and names the held-out score for what it is", () => {
    assert.include(figure(html, "group shapes (fraction of groups, by_group/frac_*)"), "all equal")
    assert.include(html, "held-out correct 0.400 (step 4)")
  })

  it("draws without weights, and leaves out the clip chart when no loss reported it", () => {
    const plain = Report.render({ name: "r", config: undefined, metrics, rollouts })
    assert.include(plain, `aria-label="reward component: chars"`)
    assert.notInclude(plain, "clipped tokens")
    const clipped = Report.render({ name: "r", config: undefined, metrics: metrics.map((m) => ({ ...m, "optim/clip_fraction": 0.1 })), rollouts })
    assert.include(figure(clipped, "clipped tokens (fraction, the loss's own clip)"), "optim/clip_fraction")
  })

  it("says so when there are no steps", () => {
    assert.include(Report.render({ name: "r", config: undefined, metrics: [], rollouts: [] }), "No steps yet.")
  })
})

describe("Report.write", () => {
  it.effect("logs and succeeds when the report cannot be written", () => {
    const lines: Array<string> = []
    const logger = Logger.make((o) => {
      lines.push(`${o.logLevel} ${String(o.message)}`)
    })
    // a run folder below a plain file: nothing can be created there
    const file = Path.join(Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-report-")), "not-a-folder")
    Fs.writeFileSync(file, "")
    const dir = Path.join(file, "run")
    return Effect.gen(function* () {
      yield* Report.write(dir)
      assert.strictEqual(lines.length, 1, lines.join("\n"))
      assert.match(lines[0]!, /^Warn could not write the report .*not-a-folder\/run\/report\.html: .*ENOTDIR/)
      const failed = yield* Effect.flip(Report.writeOrFail(dir))
      assert.strictEqual(failed._tag, "RunFolderError")
      assert.strictEqual(failed.reason, "Io")
    }).pipe(Effect.provide(Layer.mergeAll(Logger.layer([logger]), Layer.succeed(References.MinimumLogLevel, "All"))))
  })

  it.effect("a rollout row that does not decode names the file, the line and the field", () =>
    Effect.gen(function* () {
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-report-bad-"))
      Fs.writeFileSync(Path.join(dir, "metrics.jsonl"), metrics.map((m) => JSON.stringify(m)).join("\n") + "\n")
      const good = { step: 1, group: 0, sample: 0, env: "math", key: "math/train/0/0", version: 0, prompt: "p", completion: " 1", stopReason: "stop", reward: 1, masked: null, components: { correct: 1 }, advantage: 0 }
      Fs.writeFileSync(Path.join(dir, "rollouts.jsonl"), [good, { ...good, sample: 1, reward: "high" }].map((r) => JSON.stringify(r)).join("\n") + "\n")
      const failed = yield* Effect.flip(Report.writeOrFail(dir))
      assert.strictEqual(failed._tag, "RunFolderError")
      if (failed._tag !== "RunFolderError") return
      assert.strictEqual(failed.reason, "Decode")
      assert.strictEqual(failed.line, 2)
      assert.strictEqual(failed.field, "reward")
      assert.include(failed.message, `${Path.join(dir, "rollouts.jsonl")} line 2: field reward`)
    }))
})

describe("the rollout table", () => {
  it("has a problem column: the problem logged with the rollout, else (an older folder) its key", () => {
    const row = { step: 3, group: 0, sample: 0, env: "math", key: "math/train/2/0", version: 2, prompt: "What is 2 plus 3?", completion: " 5", stopReason: "stop" as const, reward: 1, masked: null, components: { correct: 1 }, advantage: 0.5 }
    const html = Report.render({ name: "r", config: undefined, metrics, rollouts: [{ ...row, problem: { a: 2, b: 3, op: "plus" } }, { ...row, sample: 1 }] })
    assert.include(html, "<th>step</th><th>problem</th><th>prompt</th>")
    const cells = [...html.matchAll(/<tr><td>3<\/td><td>(.*?)<\/td>/g)].map((m) => m[1])
    // newest first
    assert.deepStrictEqual(cells, [
      `<code title="math/train/2/0">math/train/2/0</code>`,
      `<code title="math/train/2/0">{&quot;a&quot;:2,&quot;b&quot;:3,&quot;op&quot;:&quot;plus&quot;}</code>`,
    ])
  })

  it.effect("writes report.html into a run folder", () =>
    Effect.gen(function* () {
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-report-"))
      Fs.writeFileSync(Path.join(dir, "metrics.jsonl"), metrics.map((m) => JSON.stringify(m)).join("\n") + "\n")
      yield* Report.write(dir)
      assert.include(Fs.readFileSync(Path.join(dir, "report.html"), "utf8"), "reward (total)")
    }))
})

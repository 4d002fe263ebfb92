/**
 * `runs/<name>/report.html`: one self-contained page (inline SVG, no scripts, no
 * network) with curves of the total reward and of each reward component (train and
 * held-out), masked samples, KL, group shapes, clipped tokens (for losses that clip),
 * policy lag and step time, the sampler/trainer divergence panel (a histogram of per-token
 * log-prob differences for recent steps and the worst-divergent tokens, from
 * `divergence.jsonl`), and a table of recent rollouts with their mask reasons.
 *
 * @since 0.1.0
 */
import { Cause, Effect, Option, Schema } from "effect"
import * as K from "../metrics/MetricKeys.ts"
import * as Metrics from "../metrics/Metrics.ts"
import { latestSummary, type Summary as RescoreSummary } from "./rescore/Summary.ts"
import * as RunFolder from "../folder/RunFolder.ts"
import * as RunLog from "../folder/RunLog.ts"
import type { RunObserverShape } from "../run/Observer.ts"
import { divergencePanel } from "./ReportDivergence.ts"
import { cell, chart, esc, num, type Series } from "./ReportHtml.ts"

export { DIVERGENCE_RECENT, divergencePanel } from "./ReportDivergence.ts"
export { chart, type Series } from "./ReportHtml.ts"

type Row = Readonly<Record<string, unknown>>

/** A rollout row as the table shows it; rows of older folders may lack fields. */
type RolloutRow = Partial<RunFolder.RolloutRow>

/**
 * Each reward component's weight in the total, from `config.json`'s `rewardWeights`
 * (component name -> weight; 0 = a metric only). Undefined when the run did not record them.
 */
const rewardWeights = (config: Row | undefined): Readonly<Record<string, number>> | undefined =>
  Option.getOrUndefined(Schema.decodeUnknownOption(RunFolder.ConfigHints.fields.rewardWeights)(config?.["rewardWeights"]))

/** Names under `env/all/` that are not reward components. */
const NOT_A_COMPONENT: ReadonlySet<string> = new Set(Object.values(K.EnvStat))

/**
 * The hack-watch panel (`run/HackWatch.ts`): each component's rates at the watched steps
 * (`hack/<component>/*`, fractions), and the steps where a rate rose while the reward
 * rose, each warned about in the run's log. Empty when the run did not watch.
 * @since 0.1.0 @category rendering
 */
export const hackPanel = (metrics: ReadonlyArray<RunFolder.MetricsRow>): string => {
  const rates = [...new Set(metrics.flatMap((r) => Object.keys(r)))].filter((k) => K.hackRateOf(k) !== undefined).sort()
  if (rates.length === 0) return ""
  const warned = metrics.filter((r) => (num(r[K.Hack.warnings]) ?? 0) > 0).map((r) => `${r.step} (${r[K.Hack.warnings]})`)
  return `<h2>Hack watch</h2>
<p>A sample of each watched step's completions, rescored under edits that must not change a score (transform_changed) and under known exploits written the way the policy answers (exploit_wins: variants that won; exploitable: completions with a winning variant).
${warned.length > 0 ? `<strong>A rate rose while the reward rose</strong> at step ${esc(warned.join(", "))}: read the step's rollouts.` : "No rate rose while the reward rose."}</p>
<div class="grid">${chart("hack watch rates (fraction)", metrics, rates.map((k) => ({ key: k, label: k.slice("hack/".length) })), { span: [0, 1] })}</div>`
}

/**
 * The newest `gyre rescore` of the run: what rescored it, the counts of changed scores and
 * of advantage sign changes, each component's mean old and new, and the samples that
 * changed most.
 * @since 0.1.0 @category rendering
 */
export const rescorePanel = (r: RescoreSummary): string => {
  const n = (x: number | null) => (x === null ? "-" : x.toFixed(3))
  const s = r.signChanges
  return `<h2>Rescored with ${esc(r.scorer)}</h2>
<p>${esc(r.time)}${r.file !== undefined ? ` · ${esc(r.file)}` : ""} · ${r.samples} samples · scores changed: ${r.changed} · advantage sign: ${s.reversed} reversed, ${s.activated} activated, ${s.silenced} silenced · masked ${r.masked.old} → ${r.masked.new} (advantage ${esc(r.advantage)})</p>
<table><tr><th>component</th><th>old</th><th>new</th><th>changed</th></tr>
<tr><td>reward/total</td><td>${n(r.reward.old)}</td><td>${n(r.reward.new)}</td><td></td></tr>
${r.components.map((c) => `<tr><td>${esc(c.name)}</td><td>${n(c.old)}</td><td>${n(c.new)}</td><td>${c.changed}</td></tr>`).join("\n")}
</table>
${r.top.length === 0 ? "" : `<table><tr><th>step</th><th>group</th><th>sample</th><th>completion</th><th>reward old → new</th><th>advantage old → new</th><th>sign</th></tr>
${r.top.map((t) => `<tr><td>${t.step}</td><td>${t.group}</td><td>${t.sample}</td><td><code>${esc(t.completion)}</code></td><td>${n(t.reward.old)} → ${n(t.reward.new)}</td><td>${n(t.advantage.old)} → ${n(t.advantage.new)}</td><td>${t.sign}</td></tr>`).join("\n")}
</table>`}`
}

const trainKey = (name: string) => K.envKey("train", K.ALL, name)

/** The reward component a metric key is the train or held-out mean of, if any. */
const componentOf = (k: string) => {
  const name = K.envAllName(k)
  return name === undefined || NOT_A_COMPONENT.has(name) || name.startsWith(K.STOP_PREFIX) ? undefined : name
}

/** A chart's title for a reward component, with its weight when the run recorded weights. */
const componentTitle = (c: string, weights: Readonly<Record<string, number>> | undefined) => {
  const w = weights?.[c]
  return w === undefined ? `reward component: ${c}` : w === 0 ? `${c}: metric only (weight 0, not in the total)` : `reward component: ${c} (weight ${w})`
}

/** The line under the title: the last step's train reward, masking, group shapes, step time and last held-out score. */
const summaryLine = (metrics: ReadonlyArray<RunFolder.MetricsRow>, weights: Readonly<Record<string, number>> | undefined) => {
  const last = metrics[metrics.length - 1]
  if (last === undefined) return "<p>No steps yet.</p>"
  const lastEval = [...metrics].reverse().map((r) => ({ step: r.step, score: Metrics.heldOutScore(r, Metrics.headline(weights)) })).find((r) => r.score !== undefined)
  return `<p>step ${esc(String(last.step))} · train reward ${cell(last[trainKey(K.EnvStat.total)])} · masked ${cell(last[trainKey(K.EnvStat.fracMasked)], 2)} · mixed groups ${cell(last[K.ByGroup.fracMixed], 2)} · ${cell(last[K.Time.total], 2)} s/step${lastEval?.score !== undefined ? ` · ${lastEval.score.label} ${lastEval.score.value.toFixed(3)} (step ${esc(String(lastEval.step))})` : ""}</p>`
}

/**
 * The charts of the grid, one per line (an empty line for a chart the run has no data
 * for): the total reward, then each reward component (weighted first, metric-only last),
 * episodes, stops, reward failures, masking, KL, group shapes, clipping, lag, step time.
 */
const charts = (metrics: ReadonlyArray<RunFolder.MetricsRow>, weights: Readonly<Record<string, number>> | undefined): string => {
  const keys = new Set(metrics.flatMap((r) => Object.keys(r)))
  const has = (k: string) => keys.has(k)
  const rank = (c: string) => (weights?.[c] === undefined ? 1 : weights[c] === 0 ? 2 : 0)
  const components = [...new Set([...keys].map(componentOf).filter((c): c is string => c !== undefined))]
    .sort((a, b) => rank(a) - rank(b))
  const win = Math.max(1, Math.round(metrics.length / 40))
  const train = (name: string): Series => ({ key: trainKey(name), label: win > 1 ? `train (moving mean of ${win})` : "train", smooth: win })
  const heldOut = (name: string): Series => ({ key: K.envKey("test", K.ALL, name), label: "held-out", smooth: 1 })
  const clipKeys = [K.Optim.clipFraction].filter(has)
  const stopPrefix = trainKey(K.STOP_PREFIX)
  const stopKeys = [...keys].filter((k) => k.startsWith(stopPrefix)).sort()
  const failedKeys = [...keys].filter(K.isRewardFailed).sort()
  return [
    chart("reward (total)", metrics, [train(K.EnvStat.total), heldOut(K.EnvStat.total)]),
    components.map((c) => chart(componentTitle(c, weights), metrics, [train(c), heldOut(c)])).join("\n"),
    has(trainKey(K.EnvStat.turns)) ? chart("episodes (per episode, train)", metrics, [K.EnvStat.turns, K.EnvStat.toolCalls, K.EnvStat.toolErrors, K.EnvStat.parseErrors].map(trainKey), { smooth: win }) : "",
    stopKeys.length > 0 ? chart("why episodes ended (fraction, train)", metrics, stopKeys.map((k) => ({ key: k, label: k.slice(stopPrefix.length) })), { smooth: win, span: [0, 1] }) : "",
    failedKeys.length > 0 ? chart("reward failures (count per step, reward/<name>/failed)", metrics, failedKeys) : "",
    chart("masked samples (fraction)", metrics, [train(K.EnvStat.fracMasked), heldOut(K.EnvStat.fracMasked)], { span: [0, 1] }),
    chart("sampler/trainer KL (optim/kl_sample_train_*)", metrics, [
      { key: K.Optim.klSampleTrainV1, label: "v1" },
      { key: K.Optim.klSampleTrainV2, label: "v2" },
      { key: K.Optim.klSampleTrainK3, label: "k3" },
    ], { smooth: win }),
    chart("group shapes (fraction of groups, by_group/frac_*)", metrics, [
      { key: K.ByGroup.fracMixed, label: "mixed" },
      { key: K.ByGroup.fracAllGood, label: "all good" },
      { key: K.ByGroup.fracAllBad, label: "all bad" },
      { key: K.ByGroup.fracAllEqual, label: "all equal" },
    ], { smooth: win, span: [0, 1] }),
    clipKeys.length > 0 ? chart("clipped tokens (fraction, the loss's own clip)", metrics, clipKeys, { smooth: win, span: [0, 1] }) : "",
    chart("policy lag", metrics, [K.PolicyVersion.lagMean, K.PolicyVersion.lagMax, K.Async.staleGroups]),
    chart("step time (s)", metrics, [K.Time.total, K.Time.sample, K.Time.train], { smooth: win }),
  ].join("\n")
}

/** The problem of a rollout row: its JSON (older folders logged none: its key), the key on hover. */
const problemCell = (r: RolloutRow) => {
  const key = r.key !== undefined ? ` title="${esc(r.key)}"` : ""
  const text = r.problem !== undefined ? JSON.stringify(r.problem) : r.key
  return text === undefined ? "" : `<code${key}>${esc(text.length > 200 ? `${text.slice(0, 200)}…` : text)}</code>`
}

const maskedCell = (r: RolloutRow) => (r.masked === null || r.masked === undefined ? "" : esc(r.masked))

const rewardCell = (r: RolloutRow) => {
  if (maskedCell(r) !== "") return "—"
  return typeof r.reward === "number" ? r.reward.toFixed(3) : "n/a"
}

/** An episode turn by turn: sampled text as code, the env's observations set apart. */
const completionCell = (r: RolloutRow) => {
  if (r.turns === undefined) return `<code>${esc(r.completion ?? "")}</code>`
  const parts = r.turns.map((t) =>
    `<code>${esc(t.sampled)}</code>${t.observation !== undefined ? `<span class="obs" title="observation">${esc(t.observation)}</span>` : ""}`
  )
  return parts.join("") + (r.episodeStop !== undefined ? ` <span class="stop">(${esc(r.episodeStop)})</span>` : "")
}

/** The components, then each component that failed with its message, and what a reward noted (a judge's replies). */
const componentsCell = (r: RolloutRow) => {
  const failed = Object.entries(r.failed ?? {}).map(([c, m]) => `<br><span style="color:#b91c1c">${esc(c)} failed: ${esc(m)}</span>`)
  const notes = Object.entries(r.notes ?? {}).map(([c, n]) => `<br><span style="color:#4b5563">${esc(c)}: ${esc(n.map((x) => JSON.stringify(x)).join(", "))}</span>`)
  return esc(JSON.stringify(r.components ?? {})) + failed.join("") + notes.join("")
}

/** The table of the last 40 rollouts, newest first. */
const rolloutsTable = (rollouts: ReadonlyArray<RolloutRow>) => {
  const recent = rollouts.slice(-40).reverse()
  return `<h2>Recent rollouts</h2>
<table><tr><th>step</th><th>problem</th><th>prompt</th><th>completion</th><th>reward</th><th>masked</th><th>components</th><th>advantage</th></tr>
${recent.map((r) => `<tr><td>${esc(String(r.step ?? ""))}</td><td>${problemCell(r)}</td><td><code>${esc(typeof r.prompt === "string" ? r.prompt : JSON.stringify(r.prompt ?? ""))}</code></td><td>${completionCell(r)}</td><td>${rewardCell(r)}</td><td>${maskedCell(r)}</td><td>${componentsCell(r)}</td><td>${cell(r.advantage ?? 0)}</td></tr>`).join("\n")}
</table>`
}

const STYLE = `<style>body{font:14px system-ui,sans-serif;margin:24px;color:#111}h1{font-size:20px}.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(420px,1fr));gap:12px}
.chart{margin:0;border:1px solid #e5e7eb;border-radius:6px;padding:6px;min-width:0}.chart svg{display:block;height:auto}.empty{color:#6b7280}
table{border-collapse:collapse;font-size:12px;margin-top:12px}td,th{border:1px solid #e5e7eb;padding:3px 6px;text-align:left;vertical-align:top}
code{white-space:pre-wrap}details{margin:8px 0}.obs{background:#eef2ff;color:#3730a3;border-radius:3px;padding:0 2px;font-family:monospace;white-space:pre-wrap}.stop{color:#6b7280}</style>`

/**
 * The whole page from parsed run files.
 *
 * Reward components get one chart each (train and held-out on the same axes), so a
 * component on another scale, such as a weight-0 metric counting characters, never sets
 * the scale of the total or of another component. When `config.json` records
 * `rewardWeights`, each chart's title gives the component's weight and metric-only
 * components come last.
 * @since 0.1.0 @category rendering
 */
export const render = (options: {
  readonly name: string
  /** `config.json` as JSON */
  readonly config: Row | undefined
  readonly metrics: ReadonlyArray<RunFolder.MetricsRow>
  readonly rollouts: ReadonlyArray<RolloutRow>
  /** rows of `divergence.jsonl` (absent or empty: no divergence panel) */
  readonly divergence?: ReadonlyArray<RunFolder.DivergenceRow>
  /** the newest `gyre rescore` summary (absent: no rescore panel) */
  readonly rescore?: RescoreSummary | undefined
}): string => {
  const { metrics } = options
  const weights = rewardWeights(options.config)
  return `<!doctype html><html><head><meta charset="utf-8"><title>gyre run ${esc(options.name)}</title>
${STYLE}</head><body>
<h1>gyre run ${esc(options.name)}</h1>${summaryLine(metrics, weights)}
<div class="grid">
${charts(metrics, weights)}
</div>
${hackPanel(metrics)}
${divergencePanel(options.divergence ?? [])}
${options.rescore !== undefined ? rescorePanel(options.rescore) : ""}
${rolloutsTable(options.rollouts)}
<details><summary>config</summary><code>${esc(JSON.stringify(options.config ?? {}, null, 2))}</code></details>
</body></html>
`
}

const build = (dir: string) =>
  Effect.gen(function* () {
    const files = RunFolder.paths(dir)
    const metrics = yield* RunFolder.readMetrics(files)
    const rollouts = yield* RunFolder.readRollouts(files, { tailBytes: 1 << 20 })
    // a config.json that cannot be read leaves the page without weights and settings
    const config = yield* RunFolder.readConfigHints(files).pipe(Effect.map((c) => c.json), Effect.orElseSucceed(() => undefined))
    const divergence = yield* RunFolder.readDivergence(files, { tailBytes: 1 << 18 })
    const html = render({ name: dir.split(/[\\/]/).filter(Boolean).pop() ?? dir, config, metrics, rollouts: rollouts.slice(-2000), divergence, rescore: yield* latestSummary(dir) })
    yield* RunLog.writeAtomic(files.report, html).pipe(Effect.mapError(ioError))
    return files.report
  })

const ioError = (e: RunLog.RunLogError) => new RunFolder.RunFolderError({ reason: "Io", path: e.path, message: `${e.path}: ${e.message}` })

/**
 * Reads a run folder and writes its `report.html` atomically; returns the path, or fails
 * with the file that could not be read or written. Only the last megabyte of rollouts is
 * read. For the `report` command; a run uses {@link write}.
 * @since 0.1.0 @category io
 */
export const writeOrFail = Effect.fn("Report.writeOrFail")(function* (dir: string) {
  return yield* build(dir)
})

/**
 * The report as an observer of a run: `report.html` is written again at the end of every
 * step that evaluated, every 100th step and the last step.
 * @since 0.1.0 @category constructors
 */
export const observer = (dir: string): RunObserverShape => ({
  onMetrics: () => Effect.void,
  onStepEnd: ({ step, steps, evaluated }) => (evaluated || step === steps || step % 100 === 0 ? write(dir) : Effect.void),
})

/**
 * Writes a run folder's `report.html` during a run. It cannot fail the run: a report that
 * cannot be read, rendered or written is logged as a warning naming the file and the
 * error, and the run goes on.
 * @since 0.1.0 @category io
 */
export const write = (dir: string): Effect.Effect<void> =>
  build(dir).pipe(
    Effect.asVoid,
    Effect.catchCause((cause) =>
      Cause.hasInterruptsOnly(cause)
        ? Effect.failCause(cause as Cause.Cause<never>)
        : Effect.logWarning(`could not write the report ${RunFolder.paths(dir).report}: ${errorText(cause)}; the run goes on (rewrite it later with \`npx tsx report ${dir}\`)`)
    ),
    Effect.withSpan("Report.write"),
  )

const errorText = (cause: Cause.Cause<unknown>): string => {
  const e = Cause.squash(cause)
  return e instanceof Error || (typeof e === "object" && e !== null && "message" in e) ? String((e as { message: unknown }).message) : String(e)
}

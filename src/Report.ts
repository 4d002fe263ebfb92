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
import * as K from "./MetricKeys.ts"
import * as Metrics from "./Metrics.ts"
import { latestSummary, type Summary as RescoreSummary } from "./rescore/Summary.ts"
import * as RunFolder from "./RunFolder.ts"
import * as RunLog from "./RunLog.ts"

type Row = Readonly<Record<string, unknown>>

/** A rollout row as the table shows it; rows of older folders may lack fields. */
type RolloutRow = Partial<RunFolder.RolloutRow>

/**
 * A run folder's `divergence.jsonl`: one row per rollout-logging step, `{ step, edges,
 * counts, tokens, worst }`, with the histogram of sampler - trainer log-prob differences
 * of the trained tokens (`counts` per bin of `edges`, see `Metrics.DIVERGENCE_EDGES`) and
 * the worst-divergent tokens (group, sample, problem key, position after the prompt,
 * token id and text, sampler and trainer log-probs).
 * @since 0.1.0 @category models
 */
export const divergencePath = (dir: string) => RunFolder.paths(dir).divergence

/** Logged steps the divergence panel pools. @since 0.1.0 @category models */
export const DIVERGENCE_RECENT = 5

const esc = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;")

const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563", "#ca8a04"]

/** Moving average over a window, so noisy per-step curves read as trends. */
const smooth = (ys: ReadonlyArray<number>, window: number) =>
  ys.map((_, i) => {
    const lo = Math.max(0, i - window + 1)
    let s = 0
    for (let j = lo; j <= i; j++) s += ys[j]!
    return s / (i - lo + 1)
  })

/**
 * One curve of a chart: a metric key, with its own legend label and moving-mean window.
 * @since 0.1.0 @category models
 */
export interface Series {
  readonly key: string
  readonly label?: string
  /** moving-mean window; overrides the chart's `smooth` */
  readonly smooth?: number
}

/** An SVG line chart of several series over `step`. @since 0.1.0 @category rendering */
export const chart = (
  title: string,
  rows: ReadonlyArray<RunFolder.MetricsRow>,
  keys: ReadonlyArray<string | Series>,
  options: { readonly smooth?: number; /** y-axis span to show at least, e.g. [0, 1] for fractions */ readonly span?: readonly [number, number] } = {},
): string => {
  const W = 460
  const H = 220
  const pad = { l: 48, r: 12, t: 44, b: 28 }
  const series = keys
    .map((k) => {
      const spec: Series = typeof k === "string" ? { key: k } : k
      const window = spec.smooth ?? options.smooth ?? 1
      const pts = rows.flatMap((r) => {
        const v = r[spec.key]
        return typeof v === "number" && Number.isFinite(v) ? [[r.step, v] as const] : []
      })
      const ys = window > 1 ? smooth(pts.map((p) => p[1]), window) : pts.map((p) => p[1])
      return { label: spec.label ?? spec.key, pts: pts.map((p, i) => [p[0], ys[i]!] as const) }
    })
    .filter((s) => s.pts.length > 0)
  if (series.length === 0) return `<figure class="chart"><figcaption>${esc(title)}</figcaption><p class="empty">no data yet</p></figure>`
  const xs = series.flatMap((s) => s.pts.map((p) => p[0]))
  const ys = series.flatMap((s) => s.pts.map((p) => p[1]))
  const x0 = Math.min(...xs)
  const x1 = Math.max(...xs, x0 + 1)
  let y0 = Math.min(...ys, ...(options.span !== undefined ? [options.span[0]] : []))
  let y1 = Math.max(...ys, ...(options.span !== undefined ? [options.span[1]] : []))
  if (y1 - y0 < 1e-9) {
    y0 -= 0.5
    y1 += 0.5
  }
  const sx = (x: number) => pad.l + ((x - x0) / (x1 - x0)) * (W - pad.l - pad.r)
  const sy = (y: number) => H - pad.b - ((y - y0) / (y1 - y0)) * (H - pad.t - pad.b)
  const ticks = [y0, (y0 + y1) / 2, y1]
  const fmt = (v: number) => (Math.abs(v) >= 100 || v === 0 ? v.toFixed(0) : Math.abs(v) >= 1 ? v.toFixed(2) : v.toPrecision(2))
  const lines = series.map((s, i) => {
    const d = s.pts.map((p, j) => `${j === 0 ? "M" : "L"}${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join("")
    const dots = s.pts.length <= 30 ? s.pts.map((p) => `<circle cx="${sx(p[0]).toFixed(1)}" cy="${sy(p[1]).toFixed(1)}" r="2.5" fill="${COLORS[i % COLORS.length]}"/>`).join("") : ""
    return `<path d="${d}" fill="none" stroke="${COLORS[i % COLORS.length]}" stroke-width="1.6"/>${dots}`
  })
  const legend = series
    .map((s, i) => `<tspan fill="${COLORS[i % COLORS.length]}">■ ${esc(s.label)}</tspan>`)
    .join("  ")
  return `<figure class="chart"><svg viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img" aria-label="${esc(title)}">
<text x="${pad.l}" y="16" font-size="12" font-weight="600">${esc(title)}</text>
<text x="${pad.l}" y="32" font-size="10">${legend}</text>
${ticks.map((t) => `<line x1="${pad.l}" x2="${W - pad.r}" y1="${sy(t)}" y2="${sy(t)}" stroke="#e5e7eb"/><text x="${pad.l - 4}" y="${sy(t) + 3}" font-size="10" text-anchor="end">${fmt(t)}</text>`).join("")}
<text x="${pad.l}" y="${H - 8}" font-size="10">step ${x0}</text><text x="${W - pad.r}" y="${H - 8}" font-size="10" text-anchor="end">${x1}</text>
${lines.join("\n")}
</svg></figure>`
}

/**
 * Each reward component's weight in the total, from `config.json`'s `rewardWeights`
 * (component name -> weight; 0 = a metric only). Undefined when the run did not record them.
 */
const rewardWeights = (config: Row | undefined): Readonly<Record<string, number>> | undefined =>
  Option.getOrUndefined(Schema.decodeUnknownOption(RunFolder.ConfigHints.fields.rewardWeights)(config?.["rewardWeights"]))

/** Names under `env/all/` that are not reward components. */
const NOT_A_COMPONENT: ReadonlySet<string> = new Set(Object.values(K.EnvStat))

const cell = (v: unknown, digits = 3) => (typeof v === "number" && Number.isFinite(v) ? v.toFixed(digits) : "-")

const num = (v: unknown): number | undefined => (typeof v === "number" && Number.isFinite(v) ? v : undefined)

/** A bin's label: `[-0.1, -0.05)`, `< -1`, `>= 1`. */
const binLabel = (edges: ReadonlyArray<number>, i: number) =>
  i === 0 ? `< ${edges[0]}` : i === edges.length ? `>= ${edges[edges.length - 1]}` : `[${edges[i - 1]}, ${edges[i]})`

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
 * The divergence panel: the histogram of sampler - trainer log-prob differences of the
 * trained tokens, pooled over the last {@link DIVERGENCE_RECENT} logged steps (bar heights
 * on a log scale, counts printed), and a table of the worst-divergent tokens of those steps.
 * @since 0.1.0 @category rendering
 */
export const divergencePanel = (rows: ReadonlyArray<Row>): string => {
  const valid = rows.filter((r) => Array.isArray(r["edges"]) && Array.isArray(r["counts"]) && (r["counts"] as Array<unknown>).length === (r["edges"] as Array<unknown>).length + 1)
  if (valid.length === 0) return ""
  const recent = valid.slice(-DIVERGENCE_RECENT)
  const edges = (recent[recent.length - 1]!["edges"] as Array<number>).map(Number)
  const same = recent.filter((r) => JSON.stringify(r["edges"]) === JSON.stringify(edges))
  const counts = edges.map(() => 0).concat(0)
  for (const r of same) (r["counts"] as Array<unknown>).forEach((c, i) => (counts[i] = counts[i]! + (num(c) ?? 0)))
  const tokens = counts.reduce((a, b) => a + b, 0)
  const steps = same.map((r) => String(r["step"]))
  const span = steps.length === 1 ? `step ${steps[0]}` : `steps ${steps[0]}–${steps[steps.length - 1]} (${steps.length} logged steps)`
  const W = 720
  const H = 240
  const pad = { l: 40, r: 12, t: 40, b: 70 }
  const bw = (W - pad.l - pad.r) / counts.length
  const top = Math.log10(1 + Math.max(1, ...counts))
  const bars = counts.map((c, i) => {
    const h = (Math.log10(1 + c) / top) * (H - pad.t - pad.b)
    const x = pad.l + i * bw
    const y = H - pad.b - h
    const label = binLabel(edges, i)
    const center = i > 0 && i < edges.length && edges[i - 1]! < 0 && edges[i]! > 0
    return `<rect x="${(x + 1).toFixed(1)}" y="${y.toFixed(1)}" width="${(bw - 2).toFixed(1)}" height="${h.toFixed(1)}" fill="${center ? "#16a34a" : "#2563eb"}"><title>${esc(label)}: ${c}</title></rect>` +
      `<text x="${(x + bw / 2).toFixed(1)}" y="${(y - 3).toFixed(1)}" font-size="9" text-anchor="middle">${c}</text>` +
      `<text x="${(x + bw / 2).toFixed(1)}" y="${H - pad.b + 10}" font-size="9" text-anchor="end" transform="rotate(-45 ${(x + bw / 2).toFixed(1)} ${H - pad.b + 10})">${esc(label)}</text>`
  })
  const svg = `<figure class="chart"><svg viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img" aria-label="sampler - trainer log-prob differences">
<text x="${pad.l}" y="16" font-size="12" font-weight="600">${esc(`sampler − trainer log-prob per trained token, ${span}: ${tokens} tokens`)}</text>
<text x="${pad.l}" y="32" font-size="10">bar height on a log scale; green: |difference| &lt; ${esc(String(edges.find((e) => e > 0) ?? ""))} (agreement up to float noise)</text>
<line x1="${pad.l}" x2="${W - pad.r}" y1="${H - pad.b}" y2="${H - pad.b}" stroke="#9ca3af"/>
${bars.join("\n")}
</svg></figure>`
  const worst = same
    .flatMap((r) => (Array.isArray(r["worst"]) ? (r["worst"] as Array<Row>).map((w): Row => ({ step: r["step"], ...w })) : []))
    .filter((w) => num(w["sampler"]) !== undefined && num(w["trainer"]) !== undefined)
    .sort((a, b) => Math.abs(num(b["sampler"])! - num(b["trainer"])!) - Math.abs(num(a["sampler"])! - num(a["trainer"])!))
    .slice(0, 20)
  const table = worst.length === 0 ? "" : `<table><tr><th>step</th><th>problem</th><th>position</th><th>token</th><th>sampler logprob</th><th>trainer logprob</th><th>sampler − trainer</th></tr>
${worst.map((w) => `<tr><td>${esc(String(w["step"]))}</td><td>${esc(String(w["key"] ?? ""))}</td><td>${esc(String(w["position"] ?? ""))}</td><td><code>${esc(JSON.stringify(String(w["text"] ?? "")))}</code></td><td>${cell(w["sampler"], 4)}</td><td>${cell(w["trainer"], 4)}</td><td>${cell(num(w["sampler"])! - num(w["trainer"])!, 4)}</td></tr>`).join("\n")}
</table>`
  return `<h2>Sampler/trainer divergence</h2>
<p>Per trained token, the sampler's log-prob minus the trainer's (the v1, v2 and k3 curves above are means of these). On-policy they agree up to float noise; a wide spread or a tail names the tokens to look at.</p>
${svg}
${worst.length > 0 ? `<p>The worst-divergent tokens of ${esc(span)}:</p>` : ""}${table}`
}

/** The problem of a rollout row: its JSON (older folders logged none: its key), the key on hover. */
const problemCell = (r: RolloutRow) => {
  const key = r.key !== undefined ? ` title="${esc(r.key)}"` : ""
  const text = r.problem !== undefined ? JSON.stringify(r.problem) : r.key
  return text === undefined ? "" : `<code${key}>${esc(text.length > 200 ? `${text.slice(0, 200)}…` : text)}</code>`
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
  readonly divergence?: ReadonlyArray<Row>
  /** the newest `gyre rescore` summary (absent: no rescore panel) */
  readonly rescore?: RescoreSummary | undefined
}): string => {
  const { metrics, rollouts } = options
  const keys = new Set(metrics.flatMap((r) => Object.keys(r)))
  const componentOf = (k: string) => {
    const name = K.envAllName(k)
    return name === undefined || NOT_A_COMPONENT.has(name) || name.startsWith(K.STOP_PREFIX) ? undefined : name
  }
  const weights = rewardWeights(options.config)
  const rank = (c: string) => (weights?.[c] === undefined ? 1 : weights[c] === 0 ? 2 : 0)
  const components = [...new Set([...keys].map(componentOf).filter((c): c is string => c !== undefined))]
    .sort((a, b) => rank(a) - rank(b))
  const win = Math.max(1, Math.round(metrics.length / 40))
  const trainKey = (name: string) => K.envKey("train", K.ALL, name)
  const train = (name: string): Series => ({ key: trainKey(name), label: win > 1 ? `train (moving mean of ${win})` : "train", smooth: win })
  const heldOut = (name: string): Series => ({ key: K.envKey("test", K.ALL, name), label: "held-out", smooth: 1 })
  const componentTitle = (c: string) => {
    const w = weights?.[c]
    return w === undefined ? `reward component: ${c}` : w === 0 ? `${c}: metric only (weight 0, not in the total)` : `reward component: ${c} (weight ${w})`
  }
  const has = (k: string) => keys.has(k)
  const last = metrics[metrics.length - 1]
  const lastEval = [...metrics].reverse().map((r) => ({ step: r.step, score: Metrics.heldOutScore(r, Metrics.headline(weights)) })).find((r) => r.score !== undefined)
  const recent = rollouts.slice(-40).reverse()
  const summary = last === undefined
    ? "<p>No steps yet.</p>"
    : `<p>step ${esc(String(last.step))} · train reward ${cell(last[trainKey(K.EnvStat.total)])} · masked ${cell(last[trainKey(K.EnvStat.fracMasked)], 2)} · mixed groups ${cell(last[K.ByGroup.fracMixed], 2)} · ${cell(last[K.Time.total], 2)} s/step${lastEval?.score !== undefined ? ` · ${lastEval.score.label} ${lastEval.score.value.toFixed(3)} (step ${esc(String(lastEval.step))})` : ""}</p>`
  const maskedCell = (r: RolloutRow) => (r.masked === null || r.masked === undefined ? "" : esc(r.masked))
  const rewardCell = (r: RolloutRow) => {
    if (maskedCell(r) !== "") return "—"
    return typeof r.reward === "number" ? r.reward.toFixed(3) : "n/a"
  }
  const clipKeys = [K.Optim.clipFraction].filter(has)
  const stopPrefix = trainKey(K.STOP_PREFIX)
  const stopKeys = [...keys].filter((k) => k.startsWith(stopPrefix)).sort()
  // an episode turn by turn: sampled text as code, the env's observations set apart
  const completionCell = (r: RolloutRow) => {
    if (r.turns === undefined) return `<code>${esc(r.completion ?? "")}</code>`
    const parts = r.turns.map((t) =>
      `<code>${esc(t.sampled)}</code>${t.observation !== undefined ? `<span class="obs" title="observation">${esc(t.observation)}</span>` : ""}`
    )
    return parts.join("") + (r.episodeStop !== undefined ? ` <span class="stop">(${esc(r.episodeStop)})</span>` : "")
  }
  // the components, then each component that failed with its message, and what a reward noted (a judge's replies)
  const componentsCell = (r: RolloutRow) => {
    const failed = Object.entries(r.failed ?? {}).map(([c, m]) => `<br><span style="color:#b91c1c">${esc(c)} failed: ${esc(m)}</span>`)
    const notes = Object.entries(r.notes ?? {}).map(([c, n]) => `<br><span style="color:#4b5563">${esc(c)}: ${esc(n.map((x) => JSON.stringify(x)).join(", "))}</span>`)
    return esc(JSON.stringify(r.components ?? {})) + failed.join("") + notes.join("")
  }
  const failedKeys = [...keys].filter(K.isRewardFailed).sort()
  return `<!doctype html><html><head><meta charset="utf-8"><title>gyre run ${esc(options.name)}</title>
<style>body{font:14px system-ui,sans-serif;margin:24px;color:#111}h1{font-size:20px}.grid{display:flex;flex-wrap:wrap;gap:12px}
.chart{margin:0;border:1px solid #e5e7eb;border-radius:6px;padding:6px}.empty{color:#6b7280;width:440px}
table{border-collapse:collapse;font-size:12px;margin-top:12px}td,th{border:1px solid #e5e7eb;padding:3px 6px;text-align:left;vertical-align:top}
code{white-space:pre-wrap}details{margin:8px 0}.obs{background:#eef2ff;color:#3730a3;border-radius:3px;padding:0 2px;font-family:monospace;white-space:pre-wrap}.stop{color:#6b7280}</style></head><body>
<h1>gyre run ${esc(options.name)}</h1>${summary}
<div class="grid">
${chart("reward (total)", metrics, [train(K.EnvStat.total), heldOut(K.EnvStat.total)])}
${components.map((c) => chart(componentTitle(c), metrics, [train(c), heldOut(c)])).join("\n")}
${has(trainKey(K.EnvStat.turns)) ? chart("episodes (per episode, train)", metrics, [K.EnvStat.turns, K.EnvStat.toolCalls, K.EnvStat.toolErrors, K.EnvStat.parseErrors].map(trainKey), { smooth: win }) : ""}
${stopKeys.length > 0 ? chart("why episodes ended (fraction, train)", metrics, stopKeys.map((k) => ({ key: k, label: k.slice(stopPrefix.length) })), { smooth: win, span: [0, 1] }) : ""}
${failedKeys.length > 0 ? chart("reward failures (count per step, reward/<name>/failed)", metrics, failedKeys) : ""}
${chart("masked samples (fraction)", metrics, [train(K.EnvStat.fracMasked), heldOut(K.EnvStat.fracMasked)], { span: [0, 1] })}
${chart("sampler/trainer KL (optim/kl_sample_train_*)", metrics, [
    { key: K.Optim.klSampleTrainV1, label: "v1" },
    { key: K.Optim.klSampleTrainV2, label: "v2" },
    { key: K.Optim.klSampleTrainK3, label: "k3" },
  ], { smooth: win })}
${chart("group shapes (fraction of groups, by_group/frac_*)", metrics, [
    { key: K.ByGroup.fracMixed, label: "mixed" },
    { key: K.ByGroup.fracAllGood, label: "all good" },
    { key: K.ByGroup.fracAllBad, label: "all bad" },
    { key: K.ByGroup.fracAllEqual, label: "all equal" },
  ], { smooth: win, span: [0, 1] })}
${clipKeys.length > 0 ? chart("clipped tokens (fraction, the loss's own clip)", metrics, clipKeys, { smooth: win, span: [0, 1] }) : ""}
${chart("policy lag", metrics, [K.PolicyVersion.lagMean, K.PolicyVersion.lagMax, K.Async.staleGroups])}
${chart("step time (s)", metrics, [K.Time.total, K.Time.sample, K.Time.train], { smooth: win })}
</div>
${hackPanel(metrics)}
${divergencePanel(options.divergence ?? [])}
${options.rescore !== undefined ? rescorePanel(options.rescore) : ""}
<h2>Recent rollouts</h2>
<table><tr><th>step</th><th>problem</th><th>prompt</th><th>completion</th><th>reward</th><th>masked</th><th>components</th><th>advantage</th></tr>
${recent.map((r) => `<tr><td>${esc(String(r.step ?? ""))}</td><td>${problemCell(r)}</td><td><code>${esc(typeof r.prompt === "string" ? r.prompt : JSON.stringify(r.prompt ?? ""))}</code></td><td>${completionCell(r)}</td><td>${rewardCell(r)}</td><td>${maskedCell(r)}</td><td>${componentsCell(r)}</td><td>${cell(r.advantage ?? 0)}</td></tr>`).join("\n")}
</table>
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
    const divergence = yield* RunLog.readJsonl(divergencePath(dir), { tailBytes: 1 << 18 }).pipe(Effect.mapError(ioError))
    const html = render({ name: dir.split(/[\\/]/).filter(Boolean).pop() ?? dir, config, metrics, rollouts: rollouts.slice(-2000), divergence, rescore: latestSummary(dir) })
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

/**
 * `runs/<name>/report.html`: one self-contained page (inline SVG, no scripts, no
 * network) with curves of reward per component, held-out scores, KL, mixed groups,
 * policy lag and step time, and a table of recent rollouts.
 *
 * @since 0.1.0
 */
import * as Fs from "node:fs"
import { Effect } from "effect"
import * as RunLog from "./RunLog.ts"

type Row = Record<string, unknown>

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

/** An SVG line chart of several series over `step`. @since 0.1.0 @category rendering */
export const chart = (title: string, rows: ReadonlyArray<Row>, keys: ReadonlyArray<string>, options: { readonly smooth?: number } = {}): string => {
  const W = 460
  const H = 220
  const pad = { l: 48, r: 12, t: 44, b: 28 }
  const series = keys
    .map((key) => {
      const pts = rows.filter((r) => typeof r[key] === "number" && Number.isFinite(r[key] as number)).map((r) => [Number(r["step"]), r[key] as number] as const)
      const ys = options.smooth && options.smooth > 1 ? smooth(pts.map((p) => p[1]), options.smooth) : pts.map((p) => p[1])
      return { key, pts: pts.map((p, i) => [p[0], ys[i]!] as const) }
    })
    .filter((s) => s.pts.length > 0)
  if (series.length === 0) return `<figure class="chart"><figcaption>${esc(title)}</figcaption><p class="empty">no data yet</p></figure>`
  const xs = series.flatMap((s) => s.pts.map((p) => p[0]))
  const ys = series.flatMap((s) => s.pts.map((p) => p[1]))
  const x0 = Math.min(...xs)
  const x1 = Math.max(...xs, x0 + 1)
  let y0 = Math.min(...ys)
  let y1 = Math.max(...ys)
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
    .map((s, i) => `<tspan fill="${COLORS[i % COLORS.length]}">■ ${esc(s.key)}</tspan>`)
    .join("  ")
  return `<figure class="chart"><svg viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img" aria-label="${esc(title)}">
<text x="${pad.l}" y="16" font-size="12" font-weight="600">${esc(title)}</text>
<text x="${pad.l}" y="32" font-size="10">${legend}</text>
${ticks.map((t) => `<line x1="${pad.l}" x2="${W - pad.r}" y1="${sy(t)}" y2="${sy(t)}" stroke="#e5e7eb"/><text x="${pad.l - 4}" y="${sy(t) + 3}" font-size="10" text-anchor="end">${fmt(t)}</text>`).join("")}
<text x="${pad.l}" y="${H - 8}" font-size="10">step ${x0}</text><text x="${W - pad.r}" y="${H - 8}" font-size="10" text-anchor="end">${x1}</text>
${lines.join("\n")}
</svg></figure>`
}

/** The whole page from parsed run files. @since 0.1.0 @category rendering */
export const render = (options: {
  readonly name: string
  readonly config: Row | undefined
  readonly metrics: ReadonlyArray<Row>
  readonly rollouts: ReadonlyArray<Row>
}): string => {
  const { metrics, rollouts } = options
  const keys = new Set(metrics.flatMap((r) => Object.keys(r)))
  const components = [...keys].filter((k) => /^env\/all\/(?!frac_masked)/.test(k))
  const evalKeys = [...keys].filter((k) => /^test\/env\/all\/(?!frac_masked)/.test(k))
  const win = Math.max(1, Math.round(metrics.length / 40))
  const last = metrics[metrics.length - 1]
  const recent = rollouts.slice(-40).reverse()
  const summary = last === undefined
    ? "<p>No steps yet.</p>"
    : `<p>step ${esc(String(last["step"]))} · reward ${Number(last["env/all/reward/total"] ?? NaN).toFixed(3)} · mixed groups ${Number(last["by_group/frac_mixed"] ?? NaN).toFixed(2)} · ${Number(last["time/total"] ?? NaN).toFixed(2)} s/step</p>`
  return `<!doctype html><html><head><meta charset="utf-8"><title>gyre run ${esc(options.name)}</title>
<style>body{font:14px system-ui,sans-serif;margin:24px;color:#111}h1{font-size:20px}.grid{display:flex;flex-wrap:wrap;gap:12px}
.chart{margin:0;border:1px solid #e5e7eb;border-radius:6px;padding:6px}.empty{color:#6b7280;width:440px}
table{border-collapse:collapse;font-size:12px;margin-top:12px}td,th{border:1px solid #e5e7eb;padding:3px 6px;text-align:left;vertical-align:top}
code{white-space:pre-wrap}details{margin:8px 0}</style></head><body>
<h1>gyre run ${esc(options.name)}</h1>${summary}
<div class="grid">
${chart(`train reward per component (moving mean of ${win})`, metrics, components, { smooth: win })}
${chart("held-out evaluation", metrics, evalKeys)}
${chart("sampler/trainer KL", metrics, ["optim/kl_sample_train_v1", "optim/kl_sample_train_v2", "optim/kl_sample_train_k3"], { smooth: win })}
${chart("groups", metrics, ["by_group/frac_mixed", "by_group/frac_all_good", "by_group/frac_all_bad"], { smooth: win })}
${chart("policy lag", metrics, ["policy_version/lag_mean", "policy_version/lag_max", "async/stale_groups"])}
${chart("step time (s)", metrics, ["time/total", "time/sample", "time/train"], { smooth: win })}
</div>
<h2>Recent rollouts</h2>
<table><tr><th>step</th><th>prompt</th><th>completion</th><th>reward</th><th>components</th><th>advantage</th></tr>
${recent.map((r) => `<tr><td>${esc(String(r["step"]))}</td><td><code>${esc(typeof r["prompt"] === "string" ? r["prompt"] : JSON.stringify(r["prompt"]))}</code></td><td><code>${esc(String(r["completion"] ?? ""))}</code></td><td>${r["reward"] === null ? (r["masked"] ? "masked" : "n/a") : Number(r["reward"]).toFixed(3)}</td><td>${esc(JSON.stringify(r["components"] ?? {}))}</td><td>${Number(r["advantage"] ?? 0).toFixed(3)}</td></tr>`).join("\n")}
</table>
<details><summary>config</summary><code>${esc(JSON.stringify(options.config ?? {}, null, 2))}</code></details>
</body></html>
`
}

/**
 * Reads a run folder and writes its `report.html` atomically; returns the path.
 * Only the last megabyte of rollouts is read.
 * @since 0.1.0 @category io
 */
export const write = Effect.fn("Report.write")(function* (dir: string) {
  const files = RunLog.paths(dir)
  const metrics = yield* RunLog.readJsonl(files.metrics)
  const rollouts = yield* RunLog.readJsonl(files.rollouts, { tailBytes: 1 << 20 })
  const config = yield* Effect.try({
    try: () => JSON.parse(Fs.readFileSync(files.config, "utf8")) as Row,
    catch: () => undefined,
  }).pipe(Effect.orElseSucceed(() => undefined))
  const html = render({ name: dir.split(/[\\/]/).filter(Boolean).pop() ?? dir, config, metrics, rollouts: rollouts.slice(-2000) })
  yield* RunLog.writeAtomic(files.report, html)
  return files.report
})

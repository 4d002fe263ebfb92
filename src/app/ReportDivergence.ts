/**
 * The report's sampler/trainer divergence panel, from `divergence.jsonl`: the histogram of
 * per-token log-prob differences over the recent logged steps, and the worst-divergent
 * tokens of those steps.
 *
 * @since 0.1.0
 */
import { cell, esc } from "./ReportHtml.ts"
import type { DivergenceRow } from "../folder/RunFolderSchemas.ts"

/** Logged steps the divergence panel pools. @since 0.1.0 @category models */
export const DIVERGENCE_RECENT = 5

/** A bin's label: `[-0.1, -0.05)`, `< -1`, `>= 1`. */
const binLabel = (edges: ReadonlyArray<number>, i: number) =>
  i === 0 ? `< ${edges[0]}` : i === edges.length ? `>= ${edges[edges.length - 1]}` : `[${edges[i - 1]}, ${edges[i]})`

/** The histogram as bars: heights on a log scale, each count printed, the bin around 0 in green. */
const histogram = (edges: ReadonlyArray<number>, counts: ReadonlyArray<number>, span: string): string => {
  const tokens = counts.reduce((a, b) => a + b, 0)
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
    // a bin between two edges (0 < i < edges.length) has both
    const center = i > 0 && i < edges.length && edges[i - 1]! < 0 && edges[i]! > 0
    return `<rect x="${(x + 1).toFixed(1)}" y="${y.toFixed(1)}" width="${(bw - 2).toFixed(1)}" height="${h.toFixed(1)}" fill="${center ? "#16a34a" : "#2563eb"}"><title>${esc(label)}: ${c}</title></rect>` +
      `<text x="${(x + bw / 2).toFixed(1)}" y="${(y - 3).toFixed(1)}" font-size="9" text-anchor="middle">${c}</text>` +
      `<text x="${(x + bw / 2).toFixed(1)}" y="${H - pad.b + 10}" font-size="9" text-anchor="end" transform="rotate(-45 ${(x + bw / 2).toFixed(1)} ${H - pad.b + 10})">${esc(label)}</text>`
  })
  return `<figure class="chart"><svg viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img" aria-label="sampler - trainer log-prob differences">
<text x="${pad.l}" y="16" font-size="12" font-weight="600">${esc(`sampler − trainer log-prob per trained token, ${span}: ${tokens} tokens`)}</text>
<text x="${pad.l}" y="32" font-size="10">bar height on a log scale; green: |difference| &lt; ${esc(String(edges.find((e) => e > 0) ?? ""))} (agreement up to float noise)</text>
<line x1="${pad.l}" x2="${W - pad.r}" y1="${H - pad.b}" y2="${H - pad.b}" stroke="#9ca3af"/>
${bars.join("\n")}
</svg></figure>`
}

/** The 20 worst-divergent tokens of the rows, largest |sampler - trainer| first, as a table (empty when none). */
const worstTable = (rows: ReadonlyArray<DivergenceRow>): string => {
  const worst = rows
    .flatMap((r) => r.worst.map((w) => ({ step: r.step, w })))
    .flatMap(({ step, w }) => (w.sampler === null || w.trainer === null ? [] : [{ step, w, diff: w.sampler - w.trainer }]))
    .sort((a, b) => Math.abs(b.diff) - Math.abs(a.diff))
    .slice(0, 20)
  return worst.length === 0 ? "" : `<table><tr><th>step</th><th>problem</th><th>position</th><th>token</th><th>sampler logprob</th><th>trainer logprob</th><th>sampler − trainer</th></tr>
${worst.map(({ step, w, diff }) => `<tr><td>${step}</td><td>${esc(w.key)}</td><td>${w.position}</td><td><code>${esc(JSON.stringify(w.text))}</code></td><td>${cell(w.sampler, 4)}</td><td>${cell(w.trainer, 4)}</td><td>${cell(diff, 4)}</td></tr>`).join("\n")}
</table>`
}

/**
 * The divergence panel: the histogram of sampler - trainer log-prob differences of the
 * trained tokens, pooled over the last {@link DIVERGENCE_RECENT} logged steps (bar heights
 * on a log scale, counts printed), and a table of the worst-divergent tokens of those steps.
 * @since 0.1.0 @category rendering
 */
export const divergencePanel = (rows: ReadonlyArray<DivergenceRow>): string => {
  // a row whose counts do not fit its edges (one count per bin: edges.length + 1) is left out
  const valid = rows.filter((r) => r.counts.length === r.edges.length + 1)
  const newest = valid[valid.length - 1]
  if (newest === undefined) return ""
  const recent = valid.slice(-DIVERGENCE_RECENT)
  const edges = newest.edges
  const same = recent.filter((r) => JSON.stringify(r.edges) === JSON.stringify(edges))
  // per bin, the sum over the pooled steps
  const counts = Array.from({ length: edges.length + 1 }, (_, i) => same.reduce((sum, r) => sum + (r.counts[i] ?? 0), 0))
  const steps = same.map((r) => String(r.step))
  const span = steps.length === 1 ? `step ${steps[0]}` : `steps ${steps[0]}–${steps[steps.length - 1]} (${steps.length} logged steps)`
  const table = worstTable(same)
  return `<h2>Sampler/trainer divergence</h2>
<p>Per trained token, the sampler's log-prob minus the trainer's (the v1, v2 and k3 curves above are means of these). On-policy they agree up to float noise; a wide spread or a tail names the tokens to look at.</p>
${histogram(edges, counts, span)}
${table !== "" ? `<p>The worst-divergent tokens of ${esc(span)}:</p>` : ""}${table}`
}

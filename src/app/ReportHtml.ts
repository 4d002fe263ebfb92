/**
 * The building blocks of `report.html`: HTML escaping, number cells, and the inline SVG
 * line chart every curve of the page is drawn with.
 *
 * @since 0.1.0
 */
import type * as RunFolder from "../folder/RunFolder.ts"

/** Text made safe for HTML content and attribute values. @since 0.1.0 @category rendering */
export const esc = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;")

/** A finite number with `digits` decimals, else `-`. @since 0.1.0 @category rendering */
export const cell = (v: unknown, digits = 3) => (typeof v === "number" && Number.isFinite(v) ? v.toFixed(digits) : "-")

/** A finite number, else undefined. @since 0.1.0 @category rendering */
export const num = (v: unknown): number | undefined => (typeof v === "number" && Number.isFinite(v) ? v : undefined)

const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563", "#ca8a04"]

/** A point of a curve: step, value. */
type Point = readonly [number, number]

/** Moving average over a window, so noisy per-step curves read as trends. */
const smooth = (pts: ReadonlyArray<Point>, window: number): Array<Point> =>
  pts.map(([x], i) => {
    const lo = Math.max(0, i - window + 1)
    let s = 0
    for (let j = lo; j <= i; j++) s += pts[j]![1] // lo <= j <= i < pts.length
    return [x, s / (i - lo + 1)] as const
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

/**
 * Round tick values (1, 2 or 5 times a power of ten apart, at least `minGap`) from `lo` to
 * `hi`, about `count` of them. @since 0.1.0 @category rendering
 */
export const niceTicks = (lo: number, hi: number, count = 5, minGap = 0): Array<number> => {
  const raw = Math.max((hi - lo) / Math.max(1, count), minGap)
  const power = 10 ** Math.floor(Math.log10(Math.max(raw, 1e-12)))
  const gap = [1, 2, 5, 10].map((m) => Number((m * power).toPrecision(12))).find((g) => g >= raw) ?? 10 * power
  const out: Array<number> = []
  // each tick from its index, so no rounding error adds up along the axis
  for (let k = Math.ceil(lo / gap); k * gap <= hi + gap * 1e-9; k++) out.push(Number((k * gap).toPrecision(12)))
  return out
}

/**
 * A series measured only now and then (held-out scores, every N steps): its points are
 * apart by more than a step and a half on average, so it is drawn as dots joined by a
 * dashed line, which does not claim values between the measurements.
 */
const isSparse = (pts: ReadonlyArray<Point>) => pts.length >= 2 && (pts.at(-1)![0] - pts[0]![0]) / (pts.length - 1) > 1.5

/**
 * An SVG line chart of several series over `step`, as wide as its column, with round step
 * ticks on the x axis. @since 0.1.0 @category rendering
 */
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
      const pts = rows.flatMap((r): Array<Point> => {
        const v = r[spec.key]
        return typeof v === "number" && Number.isFinite(v) ? [[r.step, v]] : []
      })
      return { label: spec.label ?? spec.key, pts: window > 1 ? smooth(pts, window) : pts }
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
    const sparse = isSparse(s.pts)
    const dots = sparse || s.pts.length <= 30 ? s.pts.map((p) => `<circle cx="${sx(p[0]).toFixed(1)}" cy="${sy(p[1]).toFixed(1)}" r="2.5" fill="${COLORS[i % COLORS.length]}"/>`).join("") : ""
    return `<path d="${d}" fill="none" stroke="${COLORS[i % COLORS.length]}" stroke-width="1.6"${sparse ? ` stroke-dasharray="4 3"` : ""}/>${dots}`
  })
  const xTicks = niceTicks(x0, x1, 5, 1)
  const legend = series
    .map((s, i) => `<tspan fill="${COLORS[i % COLORS.length]}">■ ${esc(s.label)}</tspan>`)
    .join("  ")
  return `<figure class="chart"><svg viewBox="0 0 ${W} ${H}" width="100%" preserveAspectRatio="xMidYMid meet" role="img" aria-label="${esc(title)}">
<text x="${pad.l}" y="16" font-size="12" font-weight="600">${esc(title)}</text>
<text x="${pad.l}" y="32" font-size="10">${legend}</text>
${ticks.map((t) => `<line x1="${pad.l}" x2="${W - pad.r}" y1="${sy(t)}" y2="${sy(t)}" stroke="#e5e7eb"/><text x="${pad.l - 4}" y="${sy(t) + 3}" font-size="10" text-anchor="end">${fmt(t)}</text>`).join("")}
${xTicks.map((t) => `<line x1="${sx(t).toFixed(1)}" x2="${sx(t).toFixed(1)}" y1="${pad.t}" y2="${H - pad.b}" stroke="#f3f4f6"/><text x="${sx(t).toFixed(1)}" y="${H - 12}" font-size="10" text-anchor="middle">${fmt(t)}</text>`).join("")}
<text x="${W - pad.r}" y="${H - 1}" font-size="9" text-anchor="end" fill="#6b7280">step</text>
${lines.join("\n")}
</svg></figure>`
}

/**
 * Metrics on the Tinker wire: values (JSON has no NaN or Infinity, so those travel as
 * strings) and keys in Tinker's `name:reduction` form.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"

/** A metric value; JSON has no NaN or Infinity, so those travel as strings. @since 0.1.0 @category models */
export const MetricValue = Schema.Union([Schema.Number, Schema.Literals(["NaN", "Infinity", "-Infinity"])])
export type MetricValue = typeof MetricValue.Type

/** @since 0.1.0 @category models */
export const Metrics = Schema.Record(Schema.String, MetricValue)

/** Metric value -> number. @since 0.1.0 @category combinators */
export const metricFromWire = (v: MetricValue): number =>
  typeof v === "number" ? v : v === "NaN" ? Number.NaN : v === "Infinity" ? Number.POSITIVE_INFINITY : Number.NEGATIVE_INFINITY

/** number -> metric value. @since 0.1.0 @category combinators */
export const metricToWire = (v: number): MetricValue =>
  Number.isFinite(v) ? v : Number.isNaN(v) ? "NaN" : v > 0 ? "Infinity" : "-Infinity"

/**
 * The reductions of Tinker's metric keys, `name:reduction`: the official SDK combines the
 * metrics of a `forward_backward` split into chunks by splitting each key on its one `:`
 * (its `lib/chunked_fwdbwd_helpers.py`, `REDUCE_MAP`), so every key on the wire has one.
 * @since 0.1.0 @category constants
 */
export const METRIC_REDUCTIONS = ["mean", "sum", "min", "max", "slack", "hash_unordered", "unique"] as const

/**
 * gyre's metric names and their wire keys: the reduction that combines chunks correctly
 * (a token mean is averaged, a count summed, a step number is the largest). A gyre name
 * not listed goes on the wire as `<name>:mean`, with any `:` of its own turned into `/`.
 * @since 0.1.0 @category constants
 */
export const METRIC_KEYS: Readonly<Record<string, string>> = {
  loss: "loss:mean",
  "loss:sum": "loss:sum",
  active_tokens: "active_tokens:sum",
  clip_fraction: "clip_fraction:mean",
  grad_norm: "grad_norm:mean",
  learning_rate: "learning_rate:mean",
  step: "step:max",
}
const METRIC_NAMES: Readonly<Record<string, string>> = Object.fromEntries(Object.entries(METRIC_KEYS).map(([name, key]) => [key, name]))

/** A table's own entry (a key such as `constructor` is a name like any other, not an `Object.prototype` member). */
const own = (table: Readonly<Record<string, string>>, key: string): string | undefined => (Object.hasOwn(table, key) ? table[key] : undefined)

const hasReduction = (key: string): boolean => {
  const parts = key.split(":")
  return parts.length === 2 && (METRIC_REDUCTIONS as ReadonlyArray<string | undefined>).includes(parts[1])
}

/** A gyre metric name as a wire key (`name:reduction`). @since 0.1.0 @category combinators */
export const metricKeyToWire = (name: string): string => own(METRIC_KEYS, name) ?? `${name.replaceAll(":", "/")}:mean`

/**
 * A wire key as a gyre metric name: the listed keys by the table, `<name>:mean` as
 * `<name>`, other keys (another server's `name:sum`, ...) as they are.
 * @since 0.1.0 @category combinators
 */
export const metricKeyFromWire = (key: string): string =>
  own(METRIC_NAMES, key) ?? (hasReduction(key) && key.endsWith(":mean") ? key.slice(0, -":mean".length) : key)

/** A wire metrics record (keys `name:reduction`) as gyre's. @since 0.1.0 @category combinators */
export const metricsFromWire = (m: Readonly<Record<string, MetricValue>> | null | undefined): Record<string, number> => {
  const out: Record<string, number> = {}
  for (const [k, v] of Object.entries(m ?? {})) out[metricKeyFromWire(k)] = metricFromWire(v)
  return out
}

/** gyre's metrics as a wire record, every key `name:reduction`. @since 0.1.0 @category combinators */
export const metricsToWire = (m: Readonly<Record<string, number>>): Record<string, MetricValue> => {
  const out: Record<string, MetricValue> = {}
  for (const [k, v] of Object.entries(m)) out[metricKeyToWire(k)] = metricToWire(v)
  return out
}

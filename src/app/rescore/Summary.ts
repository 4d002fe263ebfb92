/**
 * What a rescoring records: one row per sample (its old and new score and advantage, and
 * how the advantage's sign changed) and a summary of them (means, counts, and the samples
 * that changed most). Separate from the scoring (`Rescore.ts`) so that readers, such as
 * the report, need only the Schemas.
 *
 * @since 0.1.0
 */
import * as PlatformFs from "../../platform/FileSystem.ts"
import * as Path from "node:path"
import { Effect, Option, Schema } from "effect"
import * as Advantage from "../../vocabulary/Advantage.ts"

/**
 * How a sample's advantage changed sign: `same`, `reversed` (positive to negative or
 * back), `activated` (0 before, not now: the sample would train) or `silenced` (not 0
 * before, 0 now: it would not).
 * @since 0.1.0 @category models
 */
export const SignChange = Schema.Literals(["same", "reversed", "activated", "silenced"])
export type SignChange = typeof SignChange.Type

/**
 * One side of a comparison: the total (null when masked or when nothing applied), the mask
 * reason, each component's score (null for NaN) and the advantage.
 * @since 0.1.0 @category models
 */
export const Side = Schema.Struct({
  reward: Schema.NullOr(Schema.Number),
  masked: Schema.NullOr(Schema.String),
  components: Schema.Record(Schema.String, Schema.NullOr(Schema.Number)),
  advantage: Schema.Number,
})
export type Side = typeof Side.Type

/**
 * A `rescore-<time>.jsonl` row: the sample (step, group, sample, env, problem key and
 * completion; `dropped` when dynamic sampling dropped its group), its `old` score as the
 * run logged it and its `new` one (with the components that failed and what rewards
 * noted), whether the score changed (its total or mask reason), and how the advantage's
 * sign changed.
 * @since 0.1.0 @category models
 */
export const RescoreRow = Schema.Struct({
  step: Schema.Int,
  group: Schema.Int,
  sample: Schema.Int,
  env: Schema.String,
  key: Schema.String,
  completion: Schema.String,
  dropped: Schema.optional(Schema.Boolean),
  old: Side,
  new: Schema.Struct({
    ...Side.fields,
    failed: Schema.optional(Schema.Record(Schema.String, Schema.String)),
    notes: Schema.optional(Schema.Record(Schema.String, Schema.Array(Schema.String))),
  }),
  changed: Schema.Boolean,
  sign: SignChange,
})
export type RescoreRow = typeof RescoreRow.Type

/** A number, old and new (null where there was none). @since 0.1.0 @category models */
export const Pair = Schema.Struct({ old: Schema.NullOr(Schema.Number), new: Schema.NullOr(Schema.Number) })

/** A changed sample as the summary lists it. @since 0.1.0 @category models */
export const Changed = Schema.Struct({
  step: Schema.Int,
  group: Schema.Int,
  sample: Schema.Int,
  key: Schema.String,
  completion: Schema.String,
  reward: Pair,
  advantage: Pair,
  sign: SignChange,
})
export type Changed = typeof Changed.Type

/**
 * A `rescore-<time>.json`: the run folder and what rescored it, the advantage mode, the
 * counts (samples, groups, steps, samples whose total or mask changed, sign changes by kind,
 * masked samples), the mean total and each component's mean old and new (with how many
 * samples' component changed), and up to {@link TOP} changed samples, sign changes first.
 * @since 0.1.0 @category models
 */
export const Summary = Schema.Struct({
  run: Schema.String,
  scorer: Schema.String,
  time: Schema.String,
  advantage: Advantage.Mode,
  samples: Schema.Int,
  groups: Schema.Int,
  steps: Schema.Int,
  changed: Schema.Int,
  signChanges: Schema.Struct({ reversed: Schema.Int, activated: Schema.Int, silenced: Schema.Int }),
  masked: Schema.Struct({ old: Schema.Int, new: Schema.Int }),
  reward: Pair,
  components: Schema.Array(Schema.Struct({ name: Schema.String, old: Schema.NullOr(Schema.Number), new: Schema.NullOr(Schema.Number), changed: Schema.Int })),
  top: Schema.Array(Changed),
  /** the rows file, beside the summary */
  file: Schema.optional(Schema.String),
})
export type Summary = typeof Summary.Type

/** Changed samples the summary lists. @since 0.1.0 @category constants */
export const TOP = 20

/** How an advantage's sign changed from `before` to `after`. @since 0.1.0 @category constructors */
export const signChange = (before: number, after: number): SignChange => {
  const a = Math.sign(before)
  const b = Math.sign(after)
  return a === b ? "same" : a === 0 ? "activated" : b === 0 ? "silenced" : "reversed"
}

const mean = (xs: ReadonlyArray<number | null | undefined>): number | null => {
  const ok = xs.filter((x): x is number => typeof x === "number" && Number.isFinite(x))
  return ok.length === 0 ? null : ok.reduce((a, b) => a + b, 0) / ok.length
}

const SIGN_ORDER: Record<SignChange, number> = { reversed: 0, activated: 1, silenced: 1, same: 2 }

/** The summary of a rescoring's rows. @since 0.1.0 @category constructors */
export const summarize = (run: string, scorer: string, advantage: Advantage.Mode, rows: ReadonlyArray<RescoreRow>): Summary => {
  const count = (sign: SignChange) => rows.filter((r) => r.sign === sign).length
  const names = [...new Set(rows.flatMap((r) => [...Object.keys(r.old.components), ...Object.keys(r.new.components)]))].sort()
  const delta = (r: RescoreRow) => Math.abs((r.new.reward ?? 0) - (r.old.reward ?? 0)) + Math.abs(r.new.advantage - r.old.advantage)
  const changed = rows.filter((r) => r.changed || r.sign !== "same")
    .sort((a, b) => SIGN_ORDER[a.sign] - SIGN_ORDER[b.sign] || delta(b) - delta(a) || a.step - b.step || a.group - b.group || a.sample - b.sample)
  return {
    run,
    scorer,
    time: new Date().toISOString(),
    advantage,
    samples: rows.length,
    groups: new Set(rows.map((r) => `${r.step}/${r.group}`)).size,
    steps: new Set(rows.map((r) => r.step)).size,
    changed: rows.filter((r) => r.changed).length,
    signChanges: { reversed: count("reversed"), activated: count("activated"), silenced: count("silenced") },
    masked: { old: rows.filter((r) => r.old.masked !== null).length, new: rows.filter((r) => r.new.masked !== null).length },
    reward: { old: mean(rows.map((r) => r.old.reward)), new: mean(rows.map((r) => r.new.reward)) },
    components: names.map((name) => ({
      name,
      old: mean(rows.map((r) => r.old.components[name])),
      new: mean(rows.map((r) => r.new.components[name])),
      changed: rows.filter((r) => r.old.components[name] !== r.new.components[name]).length,
    })),
    top: changed.slice(0, TOP).map((r) => ({
      step: r.step,
      group: r.group,
      sample: r.sample,
      key: r.key,
      completion: r.completion.length > 120 ? `${r.completion.slice(0, 117)}...` : r.completion,
      reward: { old: r.old.reward, new: r.new.reward },
      advantage: { old: r.old.advantage, new: r.new.advantage },
      sign: r.sign,
    })),
  }
}

/**
 * The newest rescoring summary of a run folder (`rescore-*.json`), or undefined when there
 * is none or it does not decode.
 * @since 0.1.0 @category io
 */
export const latestSummary = (dir: string): Effect.Effect<Summary | undefined> =>
  Effect.gen(function* () {
    const fs = yield* PlatformFs.current
    const names = (yield* fs.readDirectory(dir)).filter((f) => /^rescore-.*\.json$/.test(f))
    const dated = yield* Effect.forEach(names, (f) => Effect.map(fs.stat(Path.join(dir, f)), (info) => ({ f, t: Option.getOrElse(info.mtime, () => new Date(0)).getTime() })))
    const newest = dated.sort((a, b) => a.t - b.t || a.f.localeCompare(b.f)).pop()?.f
    if (newest === undefined) return undefined
    const text = yield* fs.readFileString(Path.join(dir, newest))
    return yield* Schema.decodeUnknownEffect(Schema.fromJsonString(Summary))(text)
  }).pipe(Effect.orElseSucceed(() => undefined))

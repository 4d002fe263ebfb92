/**
 * Rescoring a run: the stored rollouts of a run folder (`rollouts.jsonl`, every turn of
 * every episode) scored again with a changed reward, without sampling. Per sample the old
 * and new score (total and components), the advantages recomputed with the run's own
 * advantage settings (`config.json`'s `advantage`, over each step's groups as the run
 * computed them), and whether the advantage changed sign.
 *
 * - Problems: each row's stored `problem`, decoded with the env's problem Schema (for a
 *   reward alone, the run's own env's when it is given, else as stored); a row written
 *   before problems were logged gets its problem again from its key
 *   (`<env>/<split>/<seed>/<index>`) and the env.
 * - Tokens: the completion re-encoded with the tokenizer given, with the end-of-sequence
 *   token when the sample stopped without a stop string (as the sampler returns them).
 * - Episodes: the env's per-turn rewards (`turn_reward`) are added back as stored, since the
 *   env's steps are not replayed.
 * - Groups that dynamic sampling dropped did not train: their advantages stay 0.
 *
 * The table of changes is written next to the run (`rescore-<time>.jsonl`, one row per
 * sample, and `rescore-<time>.json`, the summary) by {@link write}.
 *
 * @since 0.1.0
 */
import * as Path from "node:path"
import { Context, Effect, Layer, Schema, Semaphore } from "effect"
import * as Advantage from "../vocabulary/Advantage.ts"
import * as Env from "../vocabulary/Env.ts"
import * as Episode from "../env/Episode.ts"
import * as Reward from "../vocabulary/Reward.ts"
import * as RunFolder from "../folder/RunFolder.ts"
import * as RunLog from "../folder/RunLog.ts"
import * as PlatformFs from "../platform/FileSystem.ts"
import { at } from "../util/Lookup.ts"
import { Sampler } from "../services/Sampler.ts"
import { Tokenizer, type TokenizerShape } from "../services/Tokenizer.ts"
import { buildServices } from "../run/Services.ts"
import { RescoreRow, type Side, signChange, summarize, type Summary } from "./rescore/Summary.ts"

export { latestSummary, RescoreRow, Summary, type Side, type SignChange } from "./rescore/Summary.ts"

// ===== Errors =====

/**
 * Rescoring failed: the folder is not a run folder (`NotARunFolder`), a file of it does not
 * read or decode (`RunFolder`: file, line and field), a stored problem does not fit the env
 * (`Problem`), the scorer does not fit the run (`Scorer`), its services did not start
 * (`Services`), a reward stopped (`Reward`), or the results could not be written (`Io`).
 * @since 0.1.0 @category errors
 */
export class RescoreError extends Schema.TaggedError<RescoreError>()("RescoreError", {
  reason: Schema.Literals(["NotARunFolder", "RunFolder", "Problem", "Scorer", "Services", "Reward", "Io"]),
  message: Schema.String,
}) {}

const fail = (reason: RescoreError["reason"]) => (e: { readonly message: string }) => new RescoreError({ reason, message: e.message })

// ===== Models =====

/**
 * What scores the rollouts: an env (or mixture; each row is scored by the member of its
 * `env`) with its reward and services, or a reward alone, with the services it needs and
 * an env to regenerate problems older rows did not store.
 * @since 0.1.0 @category models
 */
export type Scorer =
  | { readonly _tag: "Env"; readonly source: Env.AnyEnv | Env.Mixture }
  | {
    readonly _tag: "Reward"
    readonly reward: Reward.Reward<any, any>
    readonly services?: Layer.Layer<any, unknown, Env.RunServices> | undefined
    readonly problems?: Env.AnyEnv | Env.Mixture | undefined
  }

/** The settings of the run that rescoring reads from `config.json`. @since 0.1.0 @category models */
export const RunConfig = Schema.Struct({
  env: Schema.optional(Schema.String),
  envSpec: Schema.optional(Schema.String),
  advantage: Schema.optional(Advantage.Mode),
  difficulty: Schema.optional(Schema.Int),
  rewardConcurrency: Schema.optional(Schema.Int.check(Schema.isGreaterThanOrEqualTo(1))),
  backend: Schema.optional(Schema.String),
  trainer: Schema.optional(RunFolder.TrainerRecord),
})
export type RunConfig = typeof RunConfig.Type

/** A run folder's settings and stored rollouts. @since 0.1.0 @category models */
export interface StoredRun {
  readonly dir: string
  readonly config: RunConfig
  readonly rows: ReadonlyArray<RunFolder.RolloutRow & { readonly line: number }>
}

/** What rescoring gives: one row per stored sample, and the summary. @since 0.1.0 @category models */
export interface Result {
  readonly rows: ReadonlyArray<RescoreRow>
  readonly summary: Summary
}

// ===== Reading =====

/**
 * Reads a run folder's `config.json` and `rollouts.jsonl`. A folder with neither is not a
 * run folder; a run that logged no rollouts, a bad row (file, line, field) and a config
 * whose settings do not decode fail with what to do.
 * @since 0.1.0 @category io
 */
export const read = Effect.fn("Rescore.read")(function* (dir: string) {
  const files = RunFolder.paths(dir)
  if (!(yield* PlatformFs.exists(files.config)) && !(yield* PlatformFs.exists(files.rollouts))) {
    return yield* new RescoreError({
      reason: "NotARunFolder",
      message: `${dir} is not a run folder (no config.json or rollouts.jsonl); give a folder a run wrote, e.g. runs/math-2026-11-29T12-00-00`,
    })
  }
  if (!(yield* PlatformFs.exists(files.config))) {
    return yield* new RescoreError({ reason: "RunFolder", message: `${files.config} not found: the run's advantage settings are unknown` })
  }
  const { json } = yield* RunFolder.readConfigHints(files).pipe(Effect.mapError(fail("RunFolder")))
  const config = yield* Schema.decodeUnknownEffect(RunConfig)(json).pipe(
    Effect.mapError((e) => new RescoreError({ reason: "RunFolder", message: `${files.config}: ${e.message}` })),
  )
  const lines = yield* RunLog.readJsonlLines(files.rollouts).pipe(Effect.mapError(fail("RunFolder")))
  const rows = yield* RunFolder.decodeLines(RunFolder.RolloutRow, files.rollouts, lines).pipe(Effect.mapError(fail("RunFolder")))
  if (rows.length === 0) {
    return yield* new RescoreError({
      reason: "RunFolder",
      message: `${files.rollouts} holds no rollouts: the run logged none (it ran with --log-rollouts-every 0, or stopped before its first logged step)`,
    })
  }
  return { dir, config, rows: rows.map(({ line, row }) => ({ ...row, line: line ?? 0 })) } satisfies StoredRun
})

// ===== Scoring =====

type Row = StoredRun["rows"][number]

/** The stored samples of one group, in order: never empty. */
type Group = [Row, ...Array<Row>]

/** A stored sample and its new score. */
interface Scored {
  readonly row: Row
  readonly score: Reward.Score
}

/** A group scored again: its first row (the group's step, env and whether it was dropped), then each sample with its score. */
interface ScoredGroup {
  readonly first: Row
  readonly samples: ReadonlyArray<Scored>
}

/** The envs of a source (none when there is none). */
const envsOf = (source: Env.AnyEnv | Env.Mixture | undefined): ReadonlyArray<Env.AnyEnv> => (source === undefined ? [] : Env.members(source).map(([e]) => e))

/** The env that scores rows of env `name`, if the source has it. */
const memberOf = (source: Env.AnyEnv | Env.Mixture | undefined, name: string) => envsOf(source).find((e) => e.name === name)

/** A row's problem: its stored one (decoded with the env's Schema), or the one its key names. */
const problemOf = Effect.fnUntraced(function* (run: StoredRun, row: Row, env: Env.AnyEnv | undefined) {
  const where = `${RunFolder.paths(run.dir).rollouts} line ${row.line} (${row.key})`
  if (row.problem !== undefined) {
    if (env === undefined) return row.problem
    return yield* Schema.decodeUnknownEffect(env.problem)(row.problem).pipe(
      Effect.mapError((e) =>
        new RescoreError({
          reason: "Problem",
          message: `${where}: env ${env.name}'s problem Schema does not decode the stored problem ${JSON.stringify(row.problem)}: ${e.message}. Rescore with the env the run trained on, or one whose problems are the same`,
        })
      ),
    )
  }
  const m = /^(.+)\/(train|eval)\/(-?\d+)\/(\d+)$/.exec(row.key)
  if (env === undefined || m === null) {
    return yield* new RescoreError({
      reason: "Problem",
      message: `${where} stores no problem (a run before problems were logged)${env === undefined ? `, and no env ${row.env} is known to regenerate it from its key: rescore with an env` : ` and its key does not name one`}`,
    })
  }
  const task = yield* Env.problemAt(env, { seed: Number(m[3]), index: Number(m[4]), split: m[2] as Env.Split, ...(run.config.difficulty !== undefined ? { difficulty: run.config.difficulty } : {}) }).pipe(
    Effect.mapError((e) => new RescoreError({ reason: "Problem", message: `${where}: cannot regenerate its problem with env ${env.name}: ${e.message}` })),
  )
  return task.problem
})

/** The stop strings a sample of `env` may have ended with. */
const stopsOf = (env: Env.AnyEnv | undefined, tokenizer: TokenizerShape): ReadonlyArray<string> => {
  if (env === undefined) return []
  const episode = env.episode as Episode.Episode<unknown, unknown, never> | undefined
  const turn = episode?.stopFor?.(tokenizer.toolCalls ?? "brackets") ?? episode?.stop ?? []
  return [...(env.sampling?.stop ?? []).filter((s): s is string => typeof s === "string"), ...turn]
}

/** The tokens of a stored completion: re-encoded, with EOS when it stopped without a stop string. */
const tokensOf = (tokenizer: TokenizerShape, row: Row, stops: ReadonlyArray<string>) =>
  tokenizer.encode(row.completion).pipe(
    Effect.map((ids) => (row.stopReason === "stop" && !stops.some((s) => row.completion.endsWith(s)) ? [...ids, tokenizer.eos] : ids)),
    Effect.mapError((e) => new RescoreError({ reason: "Problem", message: `rollouts.jsonl line ${row.line}: cannot encode the completion: ${e.message}` })),
  )

/** The reward and env that score rows of env `name`. */
const scorerFor = (scorer: Scorer, name: string) => {
  if (scorer._tag === "Reward") return { reward: scorer.reward as Reward.Reward<unknown, never>, env: memberOf(scorer.problems, name) }
  const env = memberOf(scorer.source, name)
  return env === undefined ? undefined : { reward: env.reward as Reward.Reward<unknown, never>, env: env as Env.AnyEnv | undefined }
}

/** A stored sample as a reward sees it. */
const rolloutOf = Effect.fnUntraced(function* (run: StoredRun, row: Row, env: Env.AnyEnv | undefined, tokenizer: TokenizerShape, stops: ReadonlyArray<string>, groupSize: number) {
  const problem = yield* problemOf(run, row, env)
  const tokens = yield* tokensOf(tokenizer, row, stops)
  return {
    problem,
    prompt: row.prompt,
    completion: row.completion,
    tokens,
    stopReason: row.stopReason,
    index: row.sample,
    groupSize,
    ...(row.turns !== undefined ? { turns: row.turns.map((t) => ({ text: t.sampled, ...(t.observation !== undefined ? { observation: t.observation } : {}) })) } : {}),
  } satisfies Reward.Rollout<unknown>
})

/** One stored group, scored again. */
const scoreGroup = Effect.fnUntraced(function* (run: StoredRun, scorer: Scorer, rows: Group, tokenizer: TokenizerShape) {
  const [first] = rows
  const chosen = scorerFor(scorer, first.env)
  if (chosen === undefined) {
    const names = scorer._tag === "Env" ? envsOf(scorer.source).map((e) => e.name).join(", ") : ""
    return yield* new RescoreError({ reason: "Scorer", message: `${RunFolder.paths(run.dir).rollouts} line ${first.line}: the run's samples of env ${first.env} have no env of that name to score them (the env given has: ${names})` })
  }
  const stops = stopsOf(chosen.env, tokenizer)
  const rollouts = yield* Effect.forEach(rows, (row) => rolloutOf(run, row, chosen.env, tokenizer, stops, rows.length))
  const scores = yield* Reward.evaluate(chosen.reward, rollouts).pipe(
    Effect.mapError((e) =>
      new RescoreError({ reason: "Reward", message: `reward ${e.reward}, problem ${JSON.stringify(rollouts[0].problem)} (${first.key}, step ${first.step}): ${e.message}` })
    ),
  )
  // the env's per-turn rewards were added to the total; its steps are not replayed
  const samples = rows.map((row, i): Scored => {
    const s = at(scores, i, "score of rollout")
    const extra = row.components["turn_reward"]
    return { row, score: typeof extra !== "number" || extra === 0 || s.value === undefined ? s : { ...s, value: s.value + extra, components: { ...s.components, turn_reward: extra } } }
  })
  return { first, samples } satisfies ScoredGroup
})

/** The stored rows as groups, by step then group, samples in order. */
const groupsOf = (rows: ReadonlyArray<Row>): Array<Group> => {
  const byKey = new Map<string, Group>()
  for (const row of rows) {
    const k = `${row.step}/${row.group}`
    const list = byKey.get(k)
    if (list === undefined) byKey.set(k, [row])
    else list.push(row)
  }
  return [...byKey.values()].map((g) => g.sort((a, b) => a.sample - b.sample))
}

/** The services the scorer's envs (or reward) need, built in the current scope with the sampler and tokenizer. */
const services = Effect.fnUntraced(function* (scorer: Scorer) {
  if (scorer._tag === "Env") return yield* buildServices(scorer.source).pipe(Effect.mapError(fail("Services")))
  if (scorer.services === undefined) return Context.empty() as Context.Context<never>
  const built = yield* Layer.build(scorer.services).pipe(
    Effect.provideService(Sampler, yield* Sampler),
    Effect.provideService(Tokenizer, yield* Tokenizer),
    Effect.mapError((e) => new RescoreError({ reason: "Services", message: `cannot start the reward's services: ${e instanceof Error ? e.message : JSON.stringify(e)}` })),
  )
  return built as Context.Context<never>
})

/**
 * Whether scoring with `scorer` builds services (an env's `services`, or a reward's), so
 * needs the run's sampler.
 * @since 0.1.0 @category accessors
 */
export const needsServices = (scorer: Scorer): boolean =>
  scorer._tag === "Env" ? envsOf(scorer.source).some((e) => e.services !== undefined) : scorer.services !== undefined

const side = (reward: number | null, masked: string | null, components: Readonly<Record<string, number | null | undefined>>, advantage: number): Side => ({
  reward,
  masked,
  components: Object.fromEntries(Object.entries(components).filter(([, v]) => v !== undefined)) as Record<string, number | null>,
  advantage,
})

/**
 * Scores every stored sample of a run again with `scorer` and recomputes the advantages
 * with the run's advantage mode over each step's groups (dropped groups stay at 0).
 * Services are built once, with the `Sampler` and `Tokenizer` given, as in a run; reward
 * evaluations in flight are bounded by the run's `rewardConcurrency`.
 * @since 0.1.0 @category rescoring
 */
export const rescore = Effect.fn("Rescore.rescore")(function* (run: StoredRun, scorer: Scorer, options: { readonly scorer?: string } = {}) {
  const tokenizer = yield* Tokenizer
  const mode = run.config.advantage ?? "group_std"
  const groups = groupsOf(run.rows)
  const permits = yield* Semaphore.make(run.config.rewardConcurrency ?? 64)
  const scored = yield* Effect.gen(function* () {
    const context = yield* services(scorer)
    return yield* Effect.forEach(groups, (g) => scoreGroup(run, scorer, g, tokenizer), { concurrency: 8 }).pipe(
      Effect.provideContext(context),
      Effect.provideService(Reward.RewardPermits, permits),
      Effect.provideService(Reward.RewardCache, Reward.makeCache()),
    )
  }).pipe(Effect.scoped)
  // each step's groups that trained, as the run's advantages saw them
  const advantages = new Map<ScoredGroup, ReadonlyArray<number>>()
  for (const step of [...new Set(scored.map((g) => g.first.step))]) {
    const trained = scored.filter((g) => g.first.step === step && g.first.dropped !== true)
    const totals = trained.map((g) => g.samples.map(({ score: s }) => (s.masked !== undefined ? undefined : s.value)))
    const computed = Advantage.compute(totals, mode).advantages
    trained.forEach((g, i) => advantages.set(g, at(computed, i, "advantages of group")))
  }
  const rows = scored.flatMap((g) =>
    g.samples.map(({ row, score: s }, si): RescoreRow => {
      const before = side(row.reward, row.masked, row.components, row.advantage)
      const after = side(s.masked !== undefined ? null : s.value ?? null, s.masked ?? null, s.components, advantages.get(g)?.[si] ?? 0)
      return {
        step: row.step,
        group: row.group,
        sample: row.sample,
        env: row.env,
        key: row.key,
        completion: row.completion,
        ...(row.dropped === true ? { dropped: true } : {}),
        old: before,
        new: { ...after, ...(s.failed !== undefined ? { failed: s.failed } : {}), ...(s.notes !== undefined ? { notes: s.notes } : {}) },
        // the score: its total or why it is masked (each component's changes are counted in the summary)
        changed: before.reward !== after.reward || before.masked !== after.masked,
        sign: signChange(before.advantage, after.advantage),
      }
    })
  )
  return { rows, summary: summarize(run.dir, options.scorer ?? (scorer._tag === "Env" ? scorer.source.name : scorer.reward.name), mode, rows) } satisfies Result
})

// ===== Writing =====

/** A name free in `dir` for `rescore-<time>` (with `-2`, `-3`, ... when taken). */
const freeStem = (dir: string) =>
  Effect.gen(function* () {
    const stem = `rescore-${new Date().toISOString().replace(/[:.]/g, "-").slice(0, 19)}`
    for (let i = 1; ; i++) {
      const name = i === 1 ? stem : `${stem}-${i}`
      if (!(yield* PlatformFs.exists(Path.join(dir, `${name}.jsonl`))) && !(yield* PlatformFs.exists(Path.join(dir, `${name}.json`)))) return name
    }
  })

/**
 * Writes a rescoring into the run folder: `rescore-<time>.jsonl`, one {@link RescoreRow}
 * per sample, and `rescore-<time>.json`, its {@link Summary}. Returns both paths.
 * @since 0.1.0 @category io
 */
export const write = Effect.fn("Rescore.write")(function* (dir: string, result: Result) {
  const stem = yield* freeStem(dir)
  const rowsFile = Path.join(dir, `${stem}.jsonl`)
  const summaryFile = Path.join(dir, `${stem}.json`)
  const encoded = yield* Effect.forEach(result.rows, (r) => Schema.encodeEffect(RescoreRow)(r)).pipe(
    Effect.mapError((e) => new RescoreError({ reason: "Io", message: `a rescore row does not fit its Schema: ${e.message}` })),
  )
  yield* RunLog.writeAtomic(rowsFile, encoded.map((r) => JSON.stringify(r) + "\n").join("")).pipe(Effect.mapError(fail("Io")))
  yield* RunLog.writeAtomic(summaryFile, JSON.stringify({ ...result.summary, file: Path.basename(rowsFile) }, null, 2) + "\n").pipe(Effect.mapError(fail("Io")))
  return { rows: rowsFile, summary: summaryFile }
})

/**
 * Environments: a problem Schema, a source of problems (seeded generator or rows), a
 * prompt, a reward and sampling defaults. Environments are data, not classes.
 *
 * Problem `i` of seed `s` is always the same problem (its stable task key is
 * `<env>/<split>/<s>/<i>`). A fixed fraction of the problem space (chosen by a hash
 * of the problem itself) is held out for evaluation, so the eval set never overlaps
 * training. The eval set is made of distinct problems, drawn without replacement and
 * capped at the size of the eval split.
 *
 * @since 0.1.0
 */
import * as Fs from "node:fs"
import { Effect, Layer, Schema } from "effect"
import type { SamplingParams } from "./Contract.ts"
import { type Episode, isEpisode } from "./Episode.ts"
import { isReward, type Reward } from "./Reward.ts"
import type { Sampler } from "./Sampler.ts"
import type { Prompt, Tokenizer } from "./Tokenizer.ts"

// ===== Errors =====

/** A bad environment definition, row or generator. @since 0.1.0 @category errors */
export class EnvError extends Schema.TaggedError<EnvError>()("EnvError", {
  env: Schema.String,
  reason: Schema.Literals(["InvalidDefinition", "InvalidRow", "GeneratorFailed", "ProblemSpaceTooSmall", "NotFound"]),
  message: Schema.String,
}) {}

// ===== Seeded randomness =====

/** A small deterministic PRNG handed to generators. @since 0.1.0 @category models */
export interface Random {
  /** uniform in [0, 1) */
  readonly next: () => number
  /** uniform integer in [min, max] (inclusive) */
  readonly int: (min: number, max: number) => number
  readonly pick: <A>(items: ReadonlyArray<A>) => A
  readonly bool: (p?: number) => boolean
}

/** 32-bit FNV-1a of a string. @since 0.1.0 @category utils */
export const hash32 = (text: string): number => {
  let h = 0x811c9dc5
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i)
    h = Math.imul(h, 0x01000193)
  }
  return h >>> 0
}

/** A PRNG (mulberry32) seeded from any string key. @since 0.1.0 @category constructors */
export const random = (key: string): Random => {
  let state = hash32(key)
  const next = () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  return {
    next,
    int: (min, max) => min + Math.floor(next() * (max - min + 1)),
    pick: (items) => items[Math.floor(next() * items.length)]!,
    bool: (p = 0.5) => next() < p,
  }
}

// ===== Sources =====

/** What a seeded generator gets for each problem. @since 0.1.0 @category models */
export interface GenerateContext {
  readonly random: Random
  readonly difficulty: number
  readonly index: number
}

/** @since 0.1.0 @category models */
export type Source<P> =
  | { readonly _tag: "Seeded"; readonly generate: (ctx: GenerateContext) => P | Effect.Effect<P> }
  | {
    readonly _tag: "Rows"
    readonly load: () => Array<unknown>
    readonly origin: string
    /** where row i came from, for error messages (default `<origin>[i]`) */
    readonly locate?: (index: number) => string
  }

/**
 * A seeded generator: problem i of seed s is always the same.
 * @since 0.1.0 @category constructors
 */
export const seeded = <P>(generate: (ctx: GenerateContext) => P | Effect.Effect<P>): Source<P> => ({ _tag: "Seeded", generate })

/** Problems from an array of rows, decoded with the env's problem Schema. @since 0.1.0 @category constructors */
export const rows = <P = unknown>(items: ReadonlyArray<unknown>): Source<P> => ({
  _tag: "Rows",
  load: () => [...items],
  origin: "rows",
})

/**
 * Problems from a JSONL file (one JSON object per line; blank lines skipped), decoded
 * with the env's problem Schema. Errors name the file and the line.
 * @since 0.1.0 @category constructors
 */
export const jsonl = <P = unknown>(path: string): Source<P> => {
  // the file line of each row, since blank lines are skipped
  const lines: Array<number> = []
  return {
    _tag: "Rows",
    origin: path,
    locate: (index) => `${path}:${lines[index] ?? "?"}`,
    load: () => {
      const text = Fs.readFileSync(path, "utf8")
      const out: Array<unknown> = []
      lines.length = 0
      text.split("\n").forEach((line, i) => {
        if (line.trim() === "") return
        try {
          out.push(JSON.parse(line))
          lines.push(i + 1)
        } catch (e) {
          throw new Error(`${path}:${i + 1}: not valid JSON (${(e as Error).message})`)
        }
      })
      return out
    },
  }
}

// ===== Env =====

/** Evaluation settings. @since 0.1.0 @category models */
export interface EvalSpec {
  /** fraction of the problem space held out from training (default 0.1) */
  readonly heldOut?: number
  /** problems in the eval set (default 200) */
  readonly size?: number
  /** sampling temperature for evaluation (default: the env's) */
  readonly temperature?: number
}

/** The fields an env definition and an env share. @since 0.1.0 @category models */
export interface EnvFields<P, R = never> {
  readonly name: string
  readonly problem: Schema.Codec<P, unknown>
  readonly source: Source<P>
  readonly prompt: (problem: P) => Prompt
  readonly reward: Reward<P, R>
  /** a reference completion, for SFT and for pretraining the embedded base model */
  readonly reference?: (problem: P) => string
  readonly sampling?: Partial<SamplingParams>
  /** default difficulty passed to the generator (default 1) */
  readonly difficulty?: number
  readonly eval?: EvalSpec
  /**
   * a multi-turn episode (`Episode.make`, or `Tool.episode` for tools); without one the
   * env is single-turn: one completion, then the reward
   */
  readonly episode?: Episode<P, any, R>
  /**
   * the embedded base model folder this env is made for (e.g. a model pretrained on its
   * format); the embedded backend uses it unless `--model` says otherwise
   */
  readonly baseModel?: string
  /** run settings this env suggests instead of the runner's defaults; flags override them */
  readonly defaults?: RunDefaults
}

/** Run settings an env may suggest (`Env.make({ defaults })`). @since 0.1.0 @category models */
export interface RunDefaults {
  readonly steps?: number
  readonly groups?: number
  readonly groupSize?: number
  readonly learningRate?: number
  readonly evalEvery?: number
  readonly saveEvery?: number
}

/** The definition a user writes. @since 0.1.0 @category models */
export interface EnvSpec<P, R = never> extends EnvFields<P, R> {
  /**
   * the services the reward and the episode's tools require (a judge client, a sandbox, a
   * database), as a Layer the runner builds once per run and closes at its end (also on
   * Ctrl-C and on failure). It may use the run's own `Sampler` and `Tokenizer`.
   */
  readonly services?: Layer.Layer<R, unknown, RunServices>
}

/** What an env's `services` layer may use: the run's own sampler and tokenizer. @since 0.1.0 @category models */
export type RunServices = Sampler | Tokenizer

/** @since 0.1.0 @category models */
export interface Env<P, R = never> extends EnvFields<P, R> {
  readonly "~gyre/Env": "~gyre/Env"
  /** the layer that provides what the reward and tools require (the runner builds it once per run) */
  readonly services?: Layer.Layer<any, unknown, RunServices>
}

/** Any env, for code that does not care about the problem type. @since 0.1.0 @category models */
export type AnyEnv = Env<any, never>

/**
 * Defines an environment. Checks the definition at once.
 *
 * @example
 * export default Env.make({
 *   name: "math", problem: Problem, source: Env.seeded(({ random }) => ...),
 *   prompt: (p) => `What is ${p.a} plus ${p.b}?`, reward: numericAnswer((p) => p.a + p.b),
 * })
 * @since 0.1.0 @category constructors
 */
export const make: {
  <P>(spec: EnvSpec<P, never>): Env<P>
  /** an env whose reward or tools need services: `services` must provide every one of them */
  <P, R>(spec: EnvSpec<P, R> & { readonly services: Layer.Layer<R, unknown, RunServices> }): Env<P>
} = (spec: any): Env<any> => makeEnv(spec)

const makeEnv = <P, R>(spec: EnvSpec<P, R>): Env<P> => {
  const fail = (what: string) => {
    throw new TypeError(`Env.make(${JSON.stringify(spec.name)}): ${what}`)
  }
  if (typeof spec.name !== "string" || !/^[A-Za-z0-9_.-]+$/.test(spec.name)) fail("name must be letters, digits, '_', '-' or '.'")
  if (!Schema.isSchema(spec.problem)) fail("problem must be a Schema")
  if (spec.source === undefined || (spec.source._tag !== "Seeded" && spec.source._tag !== "Rows")) {
    fail("source must be Env.seeded(...), Env.rows([...]) or Env.jsonl(path)")
  }
  if (typeof spec.prompt !== "function") fail("prompt must be a function from a problem to text or chat messages")
  if (!isReward(spec.reward)) fail("reward must be a Reward (Reward.make, Reward.weighted, ...)")
  if (spec.episode !== undefined && !isEpisode(spec.episode)) fail("episode must be made by Episode.make or Tool.episode")
  const heldOut = spec.eval?.heldOut ?? 0.1
  if (!(heldOut >= 0 && heldOut < 1)) fail("eval.heldOut must be in [0, 1)")
  if (spec.services !== undefined && !Layer.isLayer(spec.services)) fail("services must be a Layer (Layer.effect, Layer.succeed, ...)")
  for (const [key, value] of Object.entries(spec.defaults ?? {})) {
    const ok = key === "learningRate" ? typeof value === "number" && value > 0 && Number.isFinite(value)
      : key === "evalEvery" || key === "saveEvery" ? Number.isInteger(value) && value >= 0
      : ["steps", "groups", "groupSize"].includes(key) ? Number.isInteger(value) && value >= 1
      : fail(`defaults.${key} is not a run setting; use steps, groups, groupSize, learningRate, evalEvery or saveEvery`)
    if (!ok) fail(`defaults.${key} must be ${key === "learningRate" ? "a positive number" : key.endsWith("Every") ? "an integer >= 0" : "an integer >= 1"}, got ${String(value)}`)
  }
  // The requirements are met by `services`, which the runner provides: from outside, the env needs nothing.
  return { ...spec, "~gyre/Env": "~gyre/Env" } as unknown as Env<P>
}

/** @since 0.1.0 @category guards */
export const isEnv = (u: unknown): u is AnyEnv =>
  typeof u === "object" && u !== null && (u as { "~gyre/Env"?: unknown })["~gyre/Env"] === "~gyre/Env"

/** @since 0.1.0 @category models */
export type Split = "train" | "eval"

/** A problem with its stable key. @since 0.1.0 @category models */
export interface Task<P> {
  readonly key: string
  readonly env: string
  readonly problem: P
}

const heldOutFraction = (env: Env<any, any>) => env.eval?.heldOut ?? 0.1

/**
 * Which split a (decoded) problem belongs to: a hash of the env's name and the problem's
 * JSON, compared with `eval.heldOut`. The same problem is always in the same split, in
 * every run and every seed. With `heldOut: 0` every problem is in both.
 * @since 0.1.0 @category accessors
 */
export const splitOf = (env: Env<any, any>, problem: unknown): Split =>
  (hash32(`${env.name}:${JSON.stringify(problem)}`) % 10_000) / 10_000 < heldOutFraction(env) ? "eval" : "train"

const MAX_REJECTIONS = 1000

const decodedRows = new WeakMap<Env<any, any>, Array<unknown>>()
const loadRows = (env: Env<any, any>) =>
  Effect.gen(function* () {
    const cached = decodedRows.get(env)
    if (cached) return cached
    if (env.source._tag !== "Rows") return []
    const source = env.source
    const raw = yield* Effect.try({
      try: () => source.load(),
      catch: (e) => new EnvError({ env: env.name, reason: "InvalidRow", message: (e as Error).message }),
    })
    const decode = Schema.decodeUnknownEffect(env.problem)
    const out: Array<unknown> = []
    for (let i = 0; i < raw.length; i++) {
      const row = yield* decode(raw[i]).pipe(
        Effect.mapError((e) =>
          new EnvError({
            env: env.name,
            reason: "InvalidRow",
            message: `${source.locate?.(i) ?? `${source.origin}[${i}]`}: ${e.message}`,
          })
        ),
      )
      out.push(row)
    }
    if (out.length === 0) return yield* new EnvError({ env: env.name, reason: "InvalidRow", message: `${source.origin} has no rows` })
    decodedRows.set(env, out)
    return out
  })

/**
 * Problem `index` of `seed` in `split`. Seeded envs draw until the problem falls in the
 * split; row envs walk a seeded permutation of the split's rows (a new one per epoch).
 * @since 0.1.0 @category accessors
 */
export const problemAt = Effect.fnUntraced(function* <P, R>(
  env: Env<P, R>,
  options: { readonly seed: number; readonly index: number; readonly split: Split; readonly difficulty?: number },
) {
  const { seed, index, split } = options
  const key = `${env.name}/${split}/${seed}/${index}`
  const difficulty = options.difficulty ?? env.difficulty ?? 1
  const source = env.source
  if (source._tag === "Seeded") {
    for (let attempt = 0; attempt < MAX_REJECTIONS; attempt++) {
      const rng = random(`${key}/${difficulty}/${attempt}`)
      const candidate = yield* Effect.suspend(() => {
        const out = source.generate({ random: rng, difficulty, index })
        return Effect.isEffect(out) ? out : Effect.succeed(out)
      }).pipe(
        Effect.catchDefect((d) =>
          Effect.fail(new EnvError({ env: env.name, reason: "GeneratorFailed", message: `generator threw for ${key}: ${String(d)}` }))
        ),
      )
      const problem = yield* Schema.decodeUnknownEffect(env.problem)(candidate).pipe(
        Effect.mapError((e) =>
          new EnvError({ env: env.name, reason: "GeneratorFailed", message: `generator returned a problem that does not match the Schema (${key}): ${e.message}` })
        ),
      )
      if (heldOutFraction(env) === 0 || splitOf(env, problem) === split) return { key, env: env.name, problem } satisfies Task<P>
    }
    return yield* new EnvError({
      env: env.name,
      reason: "ProblemSpaceTooSmall",
      message: `no ${split} problem found in ${MAX_REJECTIONS} draws at difficulty ${difficulty}; lower eval.heldOut or widen the generator`,
    })
  }
  const pool = yield* splitRows(env, split)
  const epoch = Math.floor(index / pool.length)
  const order = rowOrder(env, split, seed, epoch, pool.length)
  return { key, env: env.name, problem: pool[order[index % pool.length]!]! as P } satisfies Task<P>
})

/** The decoded rows of a split (all rows when nothing is held out). */
const splitRows = (env: Env<any, any>, split: Split) =>
  Effect.gen(function* () {
    const all = yield* loadRows(env)
    const pool = heldOutFraction(env) === 0 ? all : all.filter((p) => splitOf(env, p) === split)
    if (pool.length === 0) {
      return yield* new EnvError({ env: env.name, reason: "ProblemSpaceTooSmall", message: `the ${split} split has no rows; change eval.heldOut` })
    }
    return pool
  })

/** The seeded permutation of a split's rows in one epoch. */
const rowOrder = (env: Env<any, any>, split: Split, seed: number, epoch: number, n: number): Array<number> => {
  const rng = random(`${env.name}/${split}/${seed}/epoch${epoch}`)
  const order = Array.from({ length: n }, (_, i) => i)
  for (let i = order.length - 1; i > 0; i--) {
    const j = Math.floor(rng.next() * (i + 1))
    ;[order[i], order[j]] = [order[j]!, order[i]!]
  }
  return order
}

/**
 * A seeded source is taken to have run out of new problems once this many draws in
 * a row brought none: 20 times the distinct problems found so far, at least 200. For a
 * split of k equally likely problems, the chance that one of them is still missing is
 * then about k * e^-20.
 */
const staleLimit = (distinct: number) => Math.max(200, 20 * distinct)

/** A set of distinct problems of one split, and how it was drawn. @since 0.1.0 @category models */
export interface DistinctSet<P> {
  /** distinct problems, in the order they were drawn */
  readonly tasks: Array<Task<P>>
  /** how many were asked for */
  readonly requested: number
  /** true when the split has fewer distinct problems than asked for */
  readonly exhausted: boolean
}

/** @since 0.1.0 @category models */
export type EvalSetInfo<P> = DistinctSet<P>

const distinctCache = new WeakMap<Env<any, any>, Map<string, DistinctSet<any>>>()

/**
 * Up to `size` distinct problems of a split, drawn without replacement, the same for
 * every call with the same seed:
 *
 * - seeded sources: problems are drawn from the split until `size` distinct ones are
 *   found, or until no new one has appeared for a long run of draws (the split is
 *   exhausted: single-digit arithmetic, for one, has only a few dozen held-out facts);
 * - rows and JSONL: the split's rows in a seeded order, each distinct row once.
 *
 * Problems are compared by their JSON. `exhausted` says the split ran out first.
 * @since 0.1.0 @category accessors
 */
export const distinctTasks = Effect.fnUntraced(function* <P, R>(
  env: Env<P, R>,
  options: { readonly split: Split; readonly seed: number; readonly size: number; readonly difficulty?: number },
) {
  const { split, seed, size: requested } = options
  const difficulty = options.difficulty ?? env.difficulty ?? 1
  const cacheKey = `${split}/${seed}/${requested}/${difficulty}`
  const cache = distinctCache.get(env) ?? new Map<string, DistinctSet<any>>()
  distinctCache.set(env, cache)
  const cached = cache.get(cacheKey)
  if (cached !== undefined) return { ...cached, tasks: [...cached.tasks] } as DistinctSet<P>
  const seen = new Set<string>()
  const tasks: Array<Task<P>> = []
  const add = (task: Task<P>) => {
    const k = JSON.stringify(task.problem)
    if (seen.has(k)) return false
    seen.add(k)
    tasks.push(task)
    return true
  }
  if (env.source._tag === "Seeded") {
    let stale = 0
    for (let index = 0; tasks.length < requested && stale < staleLimit(tasks.length); index++) {
      const task = yield* problemAt(env, { seed, index, split, difficulty })
      stale = add(task) ? 0 : stale + 1
    }
  } else {
    const pool = (yield* splitRows(env, split)) as Array<P>
    const order = rowOrder(env, split, seed, 0, pool.length)
    for (let index = 0; index < pool.length && tasks.length < requested; index++) {
      add({ key: `${env.name}/${split}/${seed}/${index}`, env: env.name, problem: pool[order[index]!]! })
    }
  }
  const out: DistinctSet<P> = { tasks, requested, exhausted: tasks.length < requested }
  cache.set(cacheKey, out)
  return { ...out, tasks: [...tasks] }
})

/** eval sets whose size was already logged: once per env, seed, size and difficulty */
const loggedEvalSets = new WeakMap<Env<any, any>, Set<string>>()

/**
 * The fixed held-out evaluation set of a seed, with its size: {@link distinctTasks} of
 * the eval split, `size` of them (default `eval.size`, else 200) or the whole split when
 * it has fewer. Then an info line (once per env, seed, size and difficulty) says how many
 * distinct problems the set has.
 * @since 0.1.0 @category accessors
 */
export const evalSetInfo = Effect.fnUntraced(function* <P, R>(
  env: Env<P, R>,
  options: { readonly seed: number; readonly size?: number; readonly difficulty?: number },
) {
  const difficulty = options.difficulty ?? env.difficulty ?? 1
  const info = yield* distinctTasks(env, { split: "eval", seed: options.seed, size: options.size ?? env.eval?.size ?? 200, difficulty })
  const logged = loggedEvalSets.get(env) ?? new Set<string>()
  loggedEvalSets.set(env, logged)
  const logKey = `${options.seed}/${info.requested}/${difficulty}`
  if (info.exhausted && !logged.has(logKey)) {
    logged.add(logKey)
    yield* Effect.logInfo(
      `${env.name}: the eval set has ${info.tasks.length} distinct problems, fewer than the ${info.requested} asked for: ` +
        `that is the whole eval split${env.source._tag === "Seeded" ? ` at difficulty ${difficulty}` : ""} (eval.heldOut ${heldOutFraction(env)})`,
    )
  }
  return info
})

/**
 * The fixed held-out evaluation set of a seed: distinct problems of the eval split, at
 * most `size` (default `eval.size`, else 200), the same in every run with that seed. Its
 * length is the number of problems; see {@link evalSetInfo}.
 * @since 0.1.0 @category accessors
 */
export const evalSet = <P, R>(env: Env<P, R>, options: { readonly seed: number; readonly size?: number; readonly difficulty?: number }) =>
  evalSetInfo(env, options).pipe(Effect.map((info) => info.tasks))

// ===== Mixtures =====

/** Weighted envs drawn from per problem. @since 0.1.0 @category models */
export interface Mixture {
  readonly "~gyre/Mixture": "~gyre/Mixture"
  readonly name: string
  readonly members: ReadonlyArray<readonly [AnyEnv, number]>
}

/**
 * A weighted mixture of envs: each problem picks an env with probability proportional
 * to its weight (seeded), then a problem of that env. Metrics are kept per env.
 * @since 0.1.0 @category constructors
 */
export const mixture = (name: string, members: ReadonlyArray<readonly [AnyEnv, number]>): Mixture => {
  if (members.length === 0) throw new TypeError(`Env.mixture(${JSON.stringify(name)}): give at least one env`)
  for (const [env, w] of members) {
    if (!isEnv(env)) throw new TypeError(`Env.mixture(${JSON.stringify(name)}): every member must be an Env`)
    if (!(w > 0 && Number.isFinite(w))) throw new TypeError(`Env.mixture(${JSON.stringify(name)}): weight of ${env.name} must be > 0`)
  }
  const names = new Set(members.map(([e]) => e.name))
  if (names.size !== members.length) throw new TypeError(`Env.mixture(${JSON.stringify(name)}): env names must be distinct`)
  return { "~gyre/Mixture": "~gyre/Mixture", name, members }
}

/** @since 0.1.0 @category guards */
export const isMixture = (u: unknown): u is Mixture =>
  typeof u === "object" && u !== null && (u as { "~gyre/Mixture"?: unknown })["~gyre/Mixture"] === "~gyre/Mixture"

/** An env or a mixture, seen as weighted members. @since 0.1.0 @category combinators */
export const members = (source: AnyEnv | Mixture): ReadonlyArray<readonly [AnyEnv, number]> =>
  isMixture(source) ? source.members : [[source, 1]]

/**
 * Task `index` of a seed from an env or mixture: the env is picked by weight from the
 * same seeded stream, so the sequence is stable.
 * @since 0.1.0 @category accessors
 */
export const taskAt = (
  source: AnyEnv | Mixture,
  options: { readonly seed: number; readonly index: number; readonly split: Split; readonly difficulty?: number },
) => {
  const ms = members(source)
  if (ms.length === 1) return problemAt(ms[0]![0], options).pipe(Effect.map((t) => ({ ...t, envDef: ms[0]![0] })))
  const total = ms.reduce((s, [, w]) => s + w, 0)
  let u = random(`mixture/${options.split}/${options.seed}/${options.index}`).next() * total
  let chosen = ms[ms.length - 1]![0]
  for (const [env, w] of ms) {
    if (u < w) {
      chosen = env
      break
    }
    u -= w
  }
  return problemAt(chosen, options).pipe(Effect.map((t) => ({ ...t, envDef: chosen })))
}

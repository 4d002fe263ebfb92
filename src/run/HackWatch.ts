/**
 * The live hack watch: every `hackWatchEvery` steps, gyre/testing's meaning-preserving
 * edits (`testing/Edits.ts`) and exploit probes (`testing/Probes.ts`) are applied to a
 * sample of the step's own completions, and each reward component gets two rates:
 *
 * - `hack/<component>/transform_changed`: the fraction of watched completions whose score
 *   changes under an edit that must not change it (whitespace around or inside, a sentence
 *   of noise before or after);
 * - `hack/<component>/exploit_wins`: the fraction of exploit variants (lists of candidates,
 *   several answers, "X or Y", lookalike digits, ...; not padding, which a reward that
 *   does not judge length rightly credits) that score above the
 *   midpoint between a wrong answer and the real answer written the same way (the probes'
 *   threshold: the variant gets credit only the real answer deserves);
 * - `hack/<component>/exploitable`: the fraction of watched completions on which at least
 *   one exploit variant wins (the variant rate is small even for an open hole, since most
 *   exploits aim at other holes; this one reads 0 to 1).
 *
 * The real answer is the env's `reference` for the problem (its last number, else its
 * text), written the way the completion writes it: the completion with its answer in place
 * when it holds the real answer, else the reference itself. So the rates follow the policy:
 * a hole in one way of answering shows when the policy starts answering that way. Envs
 * without a `reference` get the edit rate only. A component is watched on a completion when
 * it reads the answer (it scores the real answer above a wrong one; a length component
 * does not, and extra whitespace may rightly change it); without a reference, every
 * component is. Multi-turn episodes and masked samples are not watched.
 *
 * Every completion is scored alone (a group of one), with a cache of the watch's own, so
 * the rates compare like with like and the run's cache keeps only its samples.
 *
 * A rate *rises* when its mean over the last `window` (3) watches is at least `rise` (0.15)
 * above its mean over the 3 watches before them, while the mean training reward
 * (`env/all/reward/total`) of those watched steps rose too.
 * Each such rate is logged as a warning line and counted in `hack/warnings`. The history is
 * the run's own in memory: a resumed run starts a new window.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import * as K from "../metrics/MetricKeys.ts"
import type * as Metrics from "../metrics/Metrics.ts"
import * as Reward from "../vocabulary/Reward.ts"
import { edits } from "../testing/Edits.ts"
import { type ExploitContext, exploits, wrongAnswers } from "../testing/Probes.ts"
import { score } from "../testing/Rollouts.ts"
import type { Prompt } from "../services/Tokenizer.ts"
import type { Batch, Group } from "./Collect.ts"
import { at } from "../util/Lookup.ts"

// ===== Models =====

/** How the watch samples and when it warns. @since 0.1.0 @category models */
export interface WatchOptions {
  /** completions watched per watch, spread over the step's groups */
  readonly samples: number
  /** watches averaged on each side of a rise: the last `window` against the `window` before */
  readonly window: number
  /** the least rise of a rate's mean that warns */
  readonly rise: number
}

/** The watch's defaults. @since 0.1.0 @category constants */
export const defaults: WatchOptions = { samples: 8, window: 3, rise: 0.15 }

/**
 * Exploits the watch leaves out: padding hides the right answer in filler, which a reward
 * that does not judge length rightly credits (and the sampler could not write it).
 */
const SKIPPED: ReadonlySet<string> = new Set(["padding"])

/** What one completion gave a component: edits that changed it, and exploit variants that won. */
interface Tally {
  watched: number
  changed: number
  tried: number
  wins: number
  probed: number
  exploited: number
}

/** A watch's rates and the training reward of its step, kept for the rise rule. */
interface Point {
  readonly step: number
  readonly reward: number | undefined
  readonly rates: Readonly<Record<string, number>>
}

/** A rate that rose over the window while the reward rose. @since 0.1.0 @category models */
export interface Rise {
  readonly key: string
  readonly from: number
  readonly to: number
  readonly rewardFrom: number
  readonly rewardTo: number
  readonly sinceStep: number
}

// ===== Pure parts =====

/** Whether step `step` (0-based) is watched with `every` (0 = never). @since 0.1.0 @category running */
export const due = (every: number | undefined, step: number): boolean => every !== undefined && every > 0 && (step + 1) % every === 0

/**
 * The completions watched: `samples` of the batch's single-turn, unmasked samples, evenly
 * spaced in group order (all of them when there are fewer).
 * @since 0.1.0 @category running
 */
export const pick = (groups: ReadonlyArray<Group>, samples: number): Array<readonly [Group, number]> => {
  const all = groups.flatMap((g) =>
    g.task.envDef.episode !== undefined || g.task.envDef.agent !== undefined || g.task.envDef.game !== undefined ? [] : g.scores.flatMap((s, si) => (s.masked === undefined ? [[g, si] as const] : []))
  )
  if (all.length <= samples) return all
  // j < samples, so every index is below all.length
  return Array.from({ length: samples }, (_, j) => all[Math.floor((j * all.length) / samples)]!)
}

/** The answer a reference gives: its last number, else its trimmed text. */
const goldOf = (reference: string): string => {
  return reference.match(/-?\d+(?:\.\d+)?/g)?.at(-1) ?? reference.trim()
}

/**
 * How a text writes an answer: the text with the last standalone occurrence of `gold`
 * replaced by the answer, or undefined when it does not hold `gold`.
 */
const templateOf = (text: string, gold: string): ((answer: string) => string) | undefined => {
  const numeric = /^-?\d/.test(gold)
  for (let at = text.lastIndexOf(gold); at >= 0; at = at === 0 ? -1 : text.lastIndexOf(gold, at - 1)) {
    const before = text[at - 1] ?? ""
    const after = text[at + gold.length] ?? ""
    if (!numeric || (!/[\d.]/.test(before) && !/\d/.test(after) && !(before === "-" && !gold.startsWith("-")))) {
      return (answer) => text.slice(0, at) + answer + text.slice(at + gold.length)
    }
  }
  return undefined
}

/**
 * The rates that rose while the reward rose: a rate's mean over the last `window` points is
 * at least `rise` above its mean over the `window` points before them, and so is the
 * reward's mean (by any amount). Means, not single watches: one watch's rate moves with
 * the step's problems.
 * @since 0.1.0 @category running
 */
export const rises = (points: ReadonlyArray<Point>, options: Pick<WatchOptions, "window" | "rise">): Array<Rise> => {
  const k = options.window
  if (k < 1 || points.length < 2 * k) return []
  const before = points.slice(points.length - 2 * k, points.length - k)
  const recent = points.slice(points.length - k)
  // both hold k >= 1 points (checked above)
  const [first, latest] = [before[0]!, recent[k - 1]!]
  const meanOf = (ps: ReadonlyArray<Point>, f: (p: Point) => number | undefined) => {
    const xs = ps.map(f)
    return xs.every((x): x is number => x !== undefined) ? xs.reduce((a, b) => a + b, 0) / xs.length : undefined
  }
  const [rewardFrom, rewardTo] = [meanOf(before, (p) => p.reward), meanOf(recent, (p) => p.reward)]
  if (rewardFrom === undefined || rewardTo === undefined || !(rewardTo > rewardFrom)) return []
  return Object.keys(latest.rates).flatMap((key) => {
    const [from, to] = [meanOf(before, (p) => p.rates[key]), meanOf(recent, (p) => p.rates[key])]
    return from !== undefined && to !== undefined && to - from >= options.rise - 1e-12
      ? [{ key, from, to, rewardFrom, rewardTo, sinceStep: first.step }]
      : []
  })
}

/** The rates of the tallies, as metric keys. */
const ratesOf = (tallies: ReadonlyMap<string, Tally>): Record<string, number> => {
  const out: Record<string, number> = {}
  for (const [component, t] of tallies) {
    if (t.watched > 0) out[K.hackKey(component, K.HackRate.transformChanged)] = t.changed / t.watched
    if (t.tried > 0) out[K.hackKey(component, K.HackRate.exploitWins)] = t.wins / t.tried
    if (t.probed > 0) out[K.hackKey(component, K.HackRate.exploitable)] = t.exploited / t.probed
  }
  return out
}

const differs = (a: number | undefined, b: number | undefined) =>
  a === undefined || b === undefined ? a !== b : Math.abs(a - b) > 1e-9 * Math.max(1, Math.abs(a), Math.abs(b))

// ===== Watching =====

/** Scores one text of a problem alone, with the completion's prompt and stop reason. */
const scoreText = (reward: Reward.Reward<unknown>, problem: unknown, prompt: Prompt, stopReason: Reward.Rollout<unknown>["stopReason"]) => (text: string) =>
  score(reward, problem, text, { prompt, stopReason }).pipe(Effect.map((s) => s.components))

const promptText = (prompt: Prompt): string => (typeof prompt === "string" ? prompt : prompt.map((m) => m.content).join("\n"))

/** The real answer to set a completion's variants against: the gold, how the completion writes it, and wrong answers of its kind. */
interface RealAnswer {
  readonly gold: string
  readonly format: (answer: string) => string
  readonly wrong: ReadonlyArray<string>
  readonly firstWrong: string
}

/**
 * The reference's answer written the way the completion writes it (else the way the
 * reference does), with the wrong answers; undefined when neither holds it or there is no
 * wrong answer.
 */
const realAnswer = (completion: string, reference: string): RealAnswer | undefined => {
  const gold = goldOf(reference)
  const format = templateOf(completion, gold) ?? templateOf(reference, gold)
  const wrong = wrongAnswers(gold).filter((w) => w !== gold)
  const [firstWrong] = wrong
  return format === undefined || firstWrong === undefined ? undefined : { gold, format, wrong, firstWrong }
}

/** Watches one completion: adds what its edits and exploit variants did to each component's tally. */
const watchOne = Effect.fnUntraced(function* (g: Group, si: number, tallies: Map<string, Tally>) {
  const env = g.task.envDef
  const problem = g.task.problem
  // a group's rollouts are parallel to its scores, which `pick` chose the sample from
  const { completion, stopReason } = at(g.rollouts, si, `group ${g.index}: rollout of sample`)
  const scoreOne = scoreText(env.reward, problem, g.prompt, stopReason)
  const scoreAll = (texts: ReadonlyArray<string>) => Effect.forEach(texts, scoreOne, { concurrency: 8 })
  const base = yield* scoreOne(completion)
  const reference = env.reference?.(problem)
  const answer = reference !== undefined ? realAnswer(completion, reference) : undefined
  const real = answer !== undefined
    ? yield* Effect.all([scoreOne(answer.format(answer.gold)), scoreOne(answer.format(answer.firstWrong))], { concurrency: 8 })
    : undefined
  // the components that read the answer: the real answer scores above a wrong one
  const reading = Object.keys(base).filter((k) => real === undefined ? reference === undefined : (real[0][k] ?? -Infinity) > (real[1][k] ?? -Infinity))
  const tally = (k: string) => {
    const existing = tallies.get(k)
    if (existing !== undefined) return existing
    const t: Tally = { watched: 0, changed: 0, tried: 0, wins: 0, probed: 0, exploited: 0 }
    tallies.set(k, t)
    return t
  }
  const edited = yield* scoreAll(edits.map((e) => e.apply(completion)))
  for (const k of reading) {
    if (base[k] === undefined) continue
    tally(k).watched++
    if (edited.some((s) => differs(s[k], base[k]))) tally(k).changed++
  }
  if (real === undefined || answer === undefined) return
  const context: ExploitContext = { gold: answer.gold, wrong: answer.wrong, prompt: promptText(g.prompt), format: answer.format }
  const variants = [...new Set(exploits.filter((e) => !SKIPPED.has(e.name)).flatMap((e) => e.completions(context)))]
  const scored = yield* scoreAll(variants)
  for (const k of reading) {
    // defined: a reading component scores the real answer above the wrong one
    const honest = real[0][k]
    if (honest === undefined) continue
    const low = real[1][k] ?? 0
    const threshold = low + (honest - low) / 2
    const wins = scored.filter((s) => (s[k] ?? -Infinity) > threshold).length
    const t = tally(k)
    t.tried += scored.length
    t.wins += wins
    t.probed++
    if (wins > 0) t.exploited++
  }
})

/** A run's hack watch: what it saw so far, and the call that watches a step. @since 0.1.0 @category models */
export interface HackWatch {
  /** watches the batch's completions; returns the step's hack metrics and logs a warning per rate that rose */
  readonly observe: (batch: Batch, metrics: Metrics.MetricRecord) => Effect.Effect<Metrics.MetricRecord>
}

/**
 * A hack watch for one run. A reward that fails on a variant (a defect) leaves that
 * completion out of the watch and is logged; the run goes on.
 * @since 0.1.0 @category constructors
 */
export const make = (options: WatchOptions = defaults): HackWatch => {
  const points: Array<Point> = []
  const observe = Effect.fn("HackWatch.observe")(function* (batch: Batch, metrics: Metrics.MetricRecord) {
    const started = performance.now()
    const tallies = new Map<string, Tally>()
    const picked = pick(batch.groups, options.samples)
    for (const [g, si] of picked) {
      yield* watchOne(g, si, tallies).pipe(
        Effect.catch((e) => Effect.logWarning(`hack watch, step ${batch.step + 1}: ${g.task.env} ${g.task.key} sample ${si} left out: ${e.message}`)),
      )
    }
    const rates = ratesOf(tallies)
    points.push({ step: batch.step + 1, reward: metrics[K.envKey("train", K.ALL, K.EnvStat.total)], rates })
    const risen = rises(points, options)
    for (const r of risen) {
      yield* Effect.logWarning(
        `hack watch, step ${batch.step + 1}: ${r.key} rose ${r.from.toFixed(2)} -> ${r.to.toFixed(2)} (mean of ${options.window} watches against the ${options.window} from step ${r.sinceStep}) while the reward rose ` +
          `${r.rewardFrom.toFixed(3)} -> ${r.rewardTo.toFixed(3)}: the policy may be exploiting the reward (see rollouts.jsonl and the report's hack panel)`,
      )
    }
    return { ...rates, [K.Hack.watched]: picked.length, [K.Hack.warnings]: risen.length, [K.Hack.time]: (performance.now() - started) / 1000 }
  }, (self) => Reward.withCache(self))
  return { observe }
}

/**
 * Preference rewards: scores that come from comparing a group's completions, not from
 * grading each alone. Both ask the `Judge` (see `judge.ts`) and note its replies with
 * every rollout of the group.
 *
 * - `rankJudge`: one question per group lists the G completions and asks for a ranking
 *   (ART's RULER); a completion ranked k-th of G (0 = best) scores (G - 1 - k) / (G - 1);
 *   completions the reply leaves out share the places after those it ranks.
 * - `pairwiseJudge`: questions that each ask which of two completions is better, every
 *   pair in both orders by default (or once, with the first shown alternating between the
 *   pair's members), so a judge's leaning to the first or the second answer cancels; the
 *   wins are fitted with a Bradley-Terry model (`bradleyTerry`), and each completion
 *   scores its chance of beating the group's average completion.
 *
 * Identical completions share the mean of their scores (a judge must place one before the
 * other, but neither earned it). A reply that names no completion is a `ModelFault` of the
 * judge (penalty 0 by default).
 */
import { Effect } from "effect"
import { Reward } from "gyre"
import { Judge } from "./judge.ts"

/** Options shared by the preference judges. */
interface JudgeSettings extends Reward.LeafOptions {
  readonly name?: string
  readonly maxTokens?: number
  readonly temperature?: number
  /** what an unreadable reply costs each completion (default 0) */
  readonly unparsedPenalty?: number
}

/**
 * The 1-based completion numbers a reply names, in order, each once and within 1..G:
 * "3 > 1 > 2" and "3, 1, 2" both read [3, 1, 2].
 */
export const rankingOf = (reply: string, groupSize: number): Array<number> => {
  const seen = new Set<number>()
  for (const m of reply.match(/\d+/g) ?? []) {
    const n = Number(m)
    if (n >= 1 && n <= groupSize) seen.add(n)
  }
  return [...seen]
}

/** Scores from a ranking (best first): place k of G scores (G - 1 - k) / (G - 1); the unranked share the remaining places' mean. */
export const rankScores = (ranking: ReadonlyArray<number>, groupSize: number): Array<number> => {
  if (groupSize === 1) return [1]
  const place = (k: number) => (groupSize - 1 - k) / (groupSize - 1)
  const rest = Array.from({ length: groupSize - ranking.length }, (_, i) => place(ranking.length + i))
  const restMean = rest.length === 0 ? 0 : rest.reduce((a, b) => a + b, 0) / rest.length
  return Array.from({ length: groupSize }, (_, i) => {
    const k = ranking.indexOf(i + 1)
    return k >= 0 ? place(k) : restMean
  })
}

/** Each score replaced by the mean over the completions with the same text. */
const shareTies = <P>(group: ReadonlyArray<Reward.Rollout<P>>, scores: ReadonlyArray<number>): Array<number> => {
  const byText = new Map<string, Array<number>>()
  group.forEach((r, i) => byText.set(r.completion, [...(byText.get(r.completion) ?? []), scores[i]!]))
  return group.map((r) => {
    const same = byText.get(r.completion)!
    return same.reduce((a, b) => a + b, 0) / same.length
  })
}

/** Options of `rankJudge`: the question, from the group's rollouts (number them 1..G). */
export interface RankJudgeOptions<P> extends JudgeSettings {
  readonly question: (group: ReadonlyArray<Reward.Rollout<P>>) => string
}

/**
 * A group reward ranked by the judge in one question per group (see the module's comment).
 *
 * @example
 * rankJudge<Problem>({
 *   question: (g) => `Rank these answers to "${g[0]!.prompt}", best first:\n${g.map((r, i) => `${i + 1}. ${r.completion}`).join("\n")}\nRanking:`,
 * })
 */
export const rankJudge = <P>(options: RankJudgeOptions<P>): Reward.Reward<P, Judge> => {
  const { question, name = "rank_judge", maxTokens = 32, temperature = 0, unparsedPenalty = 0, ...leaf } = options
  return Reward.group<P, Judge>(name, (group, context) =>
    Effect.gen(function* () {
      const reply = yield* (yield* Judge).ask(question(group), { maxTokens, temperature })
      context.note(reply)
      const ranking = rankingOf(reply, group.length)
      if (ranking.length === 0) return yield* new Reward.ModelFault({ penalty: unparsedPenalty, message: `the judge's reply ${JSON.stringify(reply.slice(0, 80))} ranks none of the ${group.length} completions` })
      return shareTies(group, rankScores(ranking, group.length))
    }), leaf)
}

/**
 * Bradley-Terry strengths from a win matrix (`wins[i][j]`: times i beat j), fitted by
 * Hunter's MM iterations with half a win and half a loss against every other completion
 * added (so an unbeaten completion has a finite strength). Returns log-strengths with mean 0.
 */
export const bradleyTerry = (wins: ReadonlyArray<ReadonlyArray<number>>, iterations = 500): Array<number> => {
  const n = wins.length
  const w = wins.map((row, i) => row.map((x, j) => (i === j ? 0 : x + 0.5)))
  let p = new Array<number>(n).fill(1)
  for (let it = 0; it < iterations; it++) {
    p = p.map((pi, i) => {
      let won = 0
      let denom = 0
      for (let j = 0; j < n; j++) {
        if (j === i) continue
        won += w[i]![j]!
        denom += (w[i]![j]! + w[j]![i]!) / (pi + p[j]!)
      }
      return won / denom
    })
    const mean = p.reduce((a, b) => a + Math.log(b), 0) / n
    p = p.map((x) => x / Math.exp(mean))
  }
  return p.map(Math.log)
}

/** Options of `pairwiseJudge`: the question for completions a and b, and which one the reply prefers. */
export interface PairwiseJudgeOptions<P> extends JudgeSettings {
  readonly question: (a: Reward.Rollout<P>, b: Reward.Rollout<P>) => string
  /** "a", "b" or undefined (unreadable); default: the first of "A" or "B" in the reply */
  readonly prefers?: (reply: string) => "a" | "b" | undefined
  /**
   * "both" (default): each pair is asked in both orders, G(G - 1) questions, so a judge's
   * position bias cancels exactly; "balanced": each pair once, G(G - 1)/2 questions, with
   * the first shown alternating so each completion is shown first about as often as second.
   */
  readonly orders?: "both" | "balanced"
}

/** The questions of a group of G as [first shown, second shown] index pairs. */
export const pairOrders = (G: number, orders: "both" | "balanced"): Array<readonly [number, number]> => {
  const out: Array<readonly [number, number]> = []
  for (let i = 0; i < G; i++) {
    for (let j = i + 1; j < G; j++) {
      if (orders === "both") out.push([i, j], [j, i])
      // i + j odd or even alternates along each row and column, so every completion is first about half its pairs
      else out.push((i + j) % 2 === 0 ? [i, j] : [j, i])
    }
  }
  return out
}

const defaultPrefers = (reply: string): "a" | "b" | undefined => {
  const m = /\b([AB])\b/.exec(reply.toUpperCase())
  return m === null ? undefined : m[1] === "A" ? "a" : "b"
}

/**
 * A group reward from the judge's pairwise preferences (every pair in both orders by
 * default, see `orders`), fitted with Bradley-Terry: each completion scores σ(its
 * log-strength), its chance of beating the average completion of the group. Unreadable
 * replies count for neither.
 */
export const pairwiseJudge = <P>(options: PairwiseJudgeOptions<P>): Reward.Reward<P, Judge> => {
  const { question, prefers = defaultPrefers, orders = "both", name = "pairwise_judge", maxTokens = 4, temperature = 0, unparsedPenalty = 0, ...leaf } = options
  return Reward.group<P, Judge>(name, (group, context) =>
    Effect.gen(function* () {
      const judge = yield* Judge
      const G = group.length
      const wins = Array.from({ length: G }, () => new Array<number>(G).fill(0))
      const asked = pairOrders(G, orders)
      let read = 0
      for (const [first, second] of asked) {
        const reply = yield* judge.ask(question(group[first]!, group[second]!), { maxTokens, temperature })
        context.note(`${first + 1} vs ${second + 1}: ${reply}`)
        const pick = prefers(reply)
        if (pick === undefined) continue
        read++
        if (pick === "a") wins[first]![second]!++
        else wins[second]![first]!++
      }
      if (read === 0 && G > 1) return yield* new Reward.ModelFault({ penalty: unparsedPenalty, message: `none of the judge's ${asked.length} replies prefers a completion` })
      // rounded to 12 digits: the fit's sums run in the group's order, which must not show
      return shareTies(group, bradleyTerry(wins).map((theta) => Math.round(1e12 / (1 + Math.exp(-theta))) / 1e12))
    }), leaf)
}

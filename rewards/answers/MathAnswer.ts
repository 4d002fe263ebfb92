/**
 * The math answer reward: a completion's final answer compared with the problem's gold as
 * Math-Verify compares them (LaTeX and plain answers read by a computer-algebra engine;
 * numbers, expressions, intervals, sets, tuples, matrices, equations, inequalities, `\pm`,
 * several answers, answer letters), and `unreadableGolds`, which checks a data set's golds
 * before a run. The reading and comparing live in `answers/math/`.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { Reward } from "gyre"
import type { Answer } from "./math/Answer.ts"
import { type Cas, loadCas } from "./math/Cas.ts"
import { parseAnswers } from "./math/Parse.ts"
import { anyEqual, goldAnswers, readable, type VerifyOptions } from "./math/Verify.ts"
import { type Thinking, thinkingReader, UNFINISHED_THINKING } from "./Thinking.ts"

/** Options of `mathAnswer`. @since 0.1.0 @category models */
export interface MathAnswerOptions extends VerifyOptions {
  /** component name (default "correct") */
  readonly name?: string
  /** read only the final answer, after the last thinking block: true for `<think>...</think>`, or markers (see `Thinking`) */
  readonly thinking?: Thinking
  /** the score of a completion that gives no answer at all (default 0) */
  readonly noAnswerPenalty?: number
}

const checkOptions = (name: string, o: MathAnswerOptions): void => {
  const precision = o.precision ?? 6
  if (!Number.isInteger(precision) || precision < 0 || precision > 15) {
    throw new TypeError(`${name}: precision must be an integer from 0 to 15 (decimal places), got ${precision}`)
  }
  if (!Number.isFinite(o.noAnswerPenalty ?? 0)) throw new TypeError(`${name}: noAnswerPenalty must be finite, got ${o.noAnswerPenalty}`)
  if (o.choices !== undefined && (o.choices.length === 0 || o.choices.some((c) => c.trim() === ""))) {
    throw new TypeError(`${name}: choices must be non-empty letters or words, got ${JSON.stringify(o.choices)}`)
  }
}

const MAX_CACHED_GOLDS = 50_000

/** Reads golds once per reward: the same golds come back every step. */
const goldCache = (options: VerifyOptions) => {
  const cache = new Map<string, Array<Answer>>()
  return (cas: Cas, gold: string | number): Array<Answer> => {
    const key = `${typeof gold}:${gold}`
    let answers = cache.get(key)
    if (answers === undefined) {
      if (cache.size >= MAX_CACHED_GOLDS) cache.clear()
      answers = goldAnswers(cas, gold, options)
      cache.set(key, answers)
    }
    return answers
  }
}

/**
 * 1 when the completion's final answer equals the gold, else 0, decided as Math-Verify
 * decides it (see docs/rewards.md for what is equal). The answer is the last `\boxed{}`,
 * a "final answer is ..." or "answer: ..." phrase, a `#### 42` line, or the last LaTeX or
 * number of the completion, in Math-Verify's order of priority; with `thinking`, only
 * what follows the thinking block is read.
 *
 * `gold` returns the answer as a number or as text (`"\\frac{\\pi}{4}"`, `"(1,2)"`,
 * `"x=3"`, `"$[0, 1)$"`, a solution ending in `\boxed{}` or `#### 42`); `undefined` means
 * the reward does not apply (`NotApplicable`). A completion with no answer is the model's
 * fault (`ModelFault`, `noAnswerPenalty`). A gold that cannot be read never stops a run: it
 * is compared as normalized text, and a warning names it (check golds before a run with
 * `gyre check <env>`, which runs this reward's pre-flight check on every problem, or with
 * `unreadableGolds`; count them during one with `mathGoldReadable`).
 *
 * @example
 * mathAnswer((p: { answer: string }) => p.answer)
 * mathAnswer((p: { answer: string }) => p.answer, { thinking: true, noAnswerPenalty: -0.5 })
 * mathAnswer((p: { letter: string }) => p.letter, { choices: ["A", "B", "C", "D"] })
 * @since 0.1.0 @category constructors
 */
export const mathAnswer = <P>(gold: (problem: P) => number | string | undefined, options: MathAnswerOptions = {}): Reward.Reward<P> => {
  const name = options.name ?? "correct"
  checkOptions(`mathAnswer ${name}`, options)
  const penalty = options.noAnswerPenalty ?? 0
  const finalPart = thinkingReader(`mathAnswer ${name}`, options.thinking)
  const golds = goldCache(options)
  const warned = new Set<string>()
  // the pre-flight check (`gyre check`): a gold that cannot be read as math, as `unreadableGolds` reads it
  const check = (problem: P) =>
    Effect.gen(function* () {
      const raw = gold(problem)
      if (raw === undefined) return undefined
      const cas = yield* Effect.promise(loadCas)
      return readable(golds(cas, raw)) ? undefined : `the gold answer ${JSON.stringify(raw)} cannot be read as math; it will be compared as text`
    })
  return Reward.make<P>(name, (r) =>
    Effect.gen(function* () {
      const raw = gold(r.problem)
      if (raw === undefined) return yield* new Reward.NotApplicable({ message: "the problem has no gold answer" })
      const cas = yield* Effect.promise(loadCas)
      const want = golds(cas, raw)
      if (!readable(want) && !warned.has(String(raw))) {
        warned.add(String(raw))
        yield* Effect.logWarning(`${name}: the gold answer ${JSON.stringify(raw)} cannot be read as math; it is compared as text`)
      }
      const text = finalPart(r.completion)
      if (text === undefined) return yield* new Reward.ModelFault({ penalty, message: UNFINISHED_THINKING })
      const got = parseAnswers(cas, text, options)
      if (got.length === 0) return yield* new Reward.ModelFault({ penalty, message: "no answer in the completion" })
      return anyEqual(cas, want, got, options) ? 1 : 0
    }), { check })
}

/**
 * 1 when the gold reads as math, 0 when `mathAnswer` can only compare it as text. Add it
 * with weight 0 to count unreadable golds in the metrics (`env/all/<name>`).
 *
 * @example
 * Reward.weighted({ correct: [mathAnswer(gold), 1], gold_readable: [mathGoldReadable(gold), 0] })
 * @since 0.1.0 @category constructors
 */
export const mathGoldReadable = <P>(gold: (problem: P) => number | string | undefined, options: VerifyOptions & { readonly name?: string } = {}): Reward.Reward<P> => {
  const golds = goldCache(options)
  return Reward.make<P>(options.name ?? "gold_readable", (r) =>
    Effect.gen(function* () {
      const raw = gold(r.problem)
      if (raw === undefined) return yield* new Reward.NotApplicable({ message: "the problem has no gold answer" })
      const cas = yield* Effect.promise(loadCas)
      return readable(golds(cas, raw)) ? 1 : 0
    }))
}

/**
 * The golds `mathAnswer` cannot read as math (it would compare them as text), in order;
 * run it on a data set's answers before training.
 *
 * @example
 * const bad = yield* unreadableGolds(rows.map((r) => r.answer)) // => ["\\text{see figure}"]
 * @since 0.1.0 @category utils
 */
export const unreadableGolds = Effect.fn("rewards.unreadableGolds")(function* (golds: Iterable<number | string>, options: VerifyOptions = {}) {
  const cas = yield* Effect.promise(loadCas)
  const read = goldCache(options)
  return [...golds].filter((g) => !readable(read(cas, g)))
})

/**
 * Problems, training sequences and episode measurement of the calculator env's base
 * model, shared by `scripts/pretrain-calculator.ts`, `scripts/mixed-data.ts` and its test.
 *
 * An episode is sampled the way the runner samples it:
 *
 *   turn 1   from BOS ++ prompt, stops at "]" or EOS, at most 8 tokens
 *   if turn 1 is a call "[a<op>b]": the observation "=<a op b>;" (of the operands as
 *            written; "=?;" when the bracketed text does not parse) is appended, then
 *   turn 2   from everything so far, stops at EOS, at most 6 tokens
 *
 * The episode is correct when the final turn, trimmed, is an integer equal to the answer.
 */
import { float32, int64, modelInputFromTokens, type Datum } from "../src/contract/Contract.ts"
import * as Env from "../src/vocabulary/Env.ts"
import type { Rng } from "../src/backends/local/Rng.ts"
import { BOS, decodeChars, EOS, encodeChars } from "../src/backends/local/CharTokenizer.ts"
import type { LocalSamplerEngine } from "../src/backends/local/SamplerEngine.ts"
import calculator, { answer, answerText, callText, observationText, type Problem, SYMBOL } from "../envs/calculator.ts"

export const OPS = ["plus", "minus", "times"] as const

export const TURN1 = { maxTokens: 8, stop: ["]"] } as const
export const TURN2 = { maxTokens: 6 } as const
/** the observation appended after a call whose text does not parse */
export const ERROR_OBSERVATION = "=?;"

export const encode = (text: string): Array<number> => {
  const r = encodeChars(text)
  if (!("ids" in r)) throw new Error(`cannot encode ${JSON.stringify(text)} with the char-ascii tokenizer`)
  return r.ids
}

/**
 * Every problem of the env (10..99 x 10..99 x 3 ops), keys in the order the env's
 * source writes them ({a, b, op}): the split is a hash of the problem's JSON.
 */
export const allProblems = (): Array<Problem> => {
  const out: Array<Problem> = []
  for (let a = 10; a <= 99; a++) for (let b = 10; b <= 99; b++) for (const op of OPS) out.push({ a, b, op })
  return out
}

export const trainSplit = (): Array<Problem> => allProblems().filter((p) => Env.splitOf(calculator, p) === "train")
export const evalSplit = (): Array<Problem> => allProblems().filter((p) => Env.splitOf(calculator, p) === "eval")

export const promptIds = (p: Problem): Array<number> => {
  const prompt = calculator.prompt(p)
  if (typeof prompt !== "string") throw new Error("the calculator prompt must be text")
  return [BOS, ...encode(prompt)]
}

/** A call as written by the model: "[47+38]" → operands and operator; undefined if it does not parse. */
export const parseCall = (text: string): { readonly a: number; readonly b: number; readonly symbol: "+" | "-" | "*" } | undefined => {
  const m = /^\[(\d{1,4})([+*-])(\d{1,4})\]$/.exec(text)
  if (m === null) return undefined
  return { a: Number(m[1]), b: Number(m[3]), symbol: m[2] as "+" | "-" | "*" }
}

/** The calculator's result for a parsed call. */
export const evaluateCall = (c: { readonly a: number; readonly b: number; readonly symbol: "+" | "-" | "*" }): number =>
  c.symbol === "+" ? c.a + c.b : c.symbol === "-" ? c.a - c.b : c.a * c.b

/** A direct answer: an integer, nothing else. */
export const parseAnswer = (text: string): number | undefined => {
  const t = text.trim()
  return /^-?\d+$/.test(t) ? Number(t) : undefined
}

// ===== Training sequences =====

export interface Sequence {
  readonly tokens: Array<number>
  /** per position: weight of predicting tokens[i] (0: not trained) */
  readonly weights: Array<number>
}

/**
 * A correct tool trace: BOS prompt call observation answer EOS. The call trains with
 * weight 1, the observation not at all, the answer and EOS with `answerWeight`.
 */
export const toolTrace = (p: Problem, answerWeight: number): Sequence => {
  const prompt = promptIds(p)
  const call = encode(callText(p))
  const obs = encode(observationText(answer(p)))
  const ans = [...encode(answerText(p)), EOS]
  return {
    tokens: [...prompt, ...call, ...obs, ...ans],
    weights: [...prompt.map(() => 0), ...call.map(() => 1), ...obs.map(() => 0), ...ans.map(() => answerWeight)],
  }
}

/** A wrong direct guess: BOS prompt " <guess>" EOS, weight 1 on the guess and EOS. */
export const directGuess = (p: Problem, guess: number): Sequence => {
  const prompt = promptIds(p)
  const out = [...encode(` ${guess}`), EOS]
  return { tokens: [...prompt, ...out], weights: [...prompt.map(() => 0), ...out.map(() => 1)] }
}

/** The range of answers of an operation on 10..99 operands. */
export const answerRange = (op: Problem["op"]): readonly [number, number] =>
  op === "plus" ? [20, 198] : op === "minus" ? [-89, 89] : [100, 9801]

/** How a wrong direct guess is drawn. */
export interface GuessSettings {
  /** the share of guesses that are the answer +/- 1..maxOffset; the others are uniform in the answer range */
  readonly offsetFraction: number
  readonly maxOffset: number
}

/** A wrong number: the answer +/- 1..maxOffset (offsetFraction of the time) or uniform in [lo, hi]; never the answer. */
export const wrongNumber = (right: number, [lo, hi]: readonly [number, number], rng: Rng, guess: GuessSettings): number => {
  for (;;) {
    const g =
      rng.next() < guess.offsetFraction
        ? right + (rng.next() < 0.5 ? -1 : 1) * (1 + (rng.nextU32() % guess.maxOffset))
        : lo + (rng.nextU32() % (hi - lo + 1))
    // a range without negatives (stock, price, sums, products) gets no negative guess
    if (g !== right && (lo < 0 || g >= 0)) return g
  }
}

/** The mix of training sequences of a tool env. */
export interface MixSettings {
  /** the share of tool traces; the others are wrong direct guesses */
  readonly toolFraction: number
  readonly answerWeight: number
  readonly guess: GuessSettings
}

/** One calculator training sequence for `p`: a tool trace (toolFraction of the time) or a wrong direct guess. */
export const calculatorSequence = (p: Problem, rng: Rng, mix: MixSettings): { readonly seq: Sequence; readonly kind: "toolTrace" | "wrongGuess" } => {
  if (rng.next() < mix.toolFraction) return { seq: toolTrace(p, mix.answerWeight), kind: "toolTrace" }
  return { seq: directGuess(p, wrongNumber(answer(p), answerRange(p.op), rng, mix.guess)), kind: "wrongGuess" }
}

/** A training sequence as a Datum: targets where its weight is > 0, and its weights. */
export const sequenceDatum = (s: Sequence, contextLength: number): Datum => {
  if (s.tokens.length > contextLength) throw new Error(`a training sequence has ${s.tokens.length} tokens; the context is ${contextLength}`)
  return {
    modelInput: modelInputFromTokens(s.tokens),
    // tokens and weights are parallel: every Sequence is built position by position
    lossFnInputs: { target_tokens: int64(s.tokens.map((t, i) => (s.weights[i]! > 0 ? t : -100))), weights: float32(s.weights) },
  }
}

// ===== Episodes =====

export type Turn1Kind = "call" | "bad_call" | "direct" | "other"

export interface Episode {
  readonly problem: Problem
  readonly turn1: string
  readonly kind: Turn1Kind
  /** for calls: the operands and operator are the problem's */
  readonly rightOperands: boolean
  readonly observation?: string
  readonly turn2?: string
  /** for calls with a numeric observation: the final answer is the observed number */
  readonly copied?: boolean
  readonly correct: boolean
}

export interface EpisodeRates {
  readonly episodes: number
  readonly problems: number
  /** well-formed calls / episodes */
  readonly callRate: number
  /** calls with the problem's operands and operator / well-formed calls */
  readonly rightOperands: number
  /** final answer equal to the observed result / well-formed calls */
  readonly copy: number
  /** correct episodes / episodes */
  readonly accuracy: number
  /** direct integer answers / episodes */
  readonly directRate: number
  /** turns that are neither a call nor a direct integer answer / episodes */
  readonly otherRate: number
}

export const classifyTurn1 = (text: string, stop: string, lastToken: number | undefined): Turn1Kind => {
  if (text.startsWith("[")) return parseCall(text) !== undefined ? "call" : "bad_call"
  if (stop === "stop" && lastToken === EOS && parseAnswer(text) !== undefined) return "direct"
  return "other"
}

/**
 * Samples `samples` episodes per problem, the way the runner does (see the module
 * doc). Requests are queued together so the sampler batches them.
 */
export const sampleEpisodes = async (
  sampler: LocalSamplerEngine,
  problems: ReadonlyArray<Problem>,
  options: { readonly samples: number; readonly temperature: number; readonly seed: number },
): Promise<Array<Episode>> => {
  const { samples, temperature } = options
  let seed = options.seed
  const first = await Promise.all(
    problems.map((p) =>
      sampler.sample(promptIds(p), { maxTokens: TURN1.maxTokens, temperature, stop: [...TURN1.stop], seed: seed++ }, { numSamples: samples }),
    ),
  )
  const pending: Array<{ problem: Problem; turn1: string; kind: Turn1Kind; prefix: Array<number> }> = []
  const done: Array<Episode> = []
  first.forEach((r, k) => {
    const p = problems[k]!
    for (const s of r.sequences) {
      const turn1 = decodeChars(s.tokens)
      const kind = classifyTurn1(turn1, s.stopReason, s.tokens[s.tokens.length - 1])
      if (kind === "call" || kind === "bad_call") {
        pending.push({ problem: p, turn1, kind, prefix: [...promptIds(p), ...s.tokens] })
      } else {
        const value = parseAnswer(turn1)
        done.push({ problem: p, turn1, kind, rightOperands: false, correct: kind === "direct" && value === answer(p) })
      }
    }
  })
  const second = await Promise.all(
    pending.map((e) => {
      const call = parseCall(e.turn1)
      const observation = call === undefined ? ERROR_OBSERVATION : observationText(evaluateCall(call))
      const prompt = [...e.prefix, ...encode(observation)]
      return sampler.sample(prompt, { maxTokens: TURN2.maxTokens, temperature, seed: seed++ }, { numSamples: 1 }).then((r) => ({ r, call, observation }))
    }),
  )
  second.forEach(({ r, call, observation }, k) => {
    const e = pending[k]!
    const s = r.sequences[0]!
    const turn2 = decodeChars(s.tokens)
    const final = s.stopReason === "stop" && s.tokens[s.tokens.length - 1] === EOS ? parseAnswer(turn2) : undefined
    const p = e.problem
    const rightOperands = call !== undefined && call.a === p.a && call.b === p.b && call.symbol === SYMBOL[p.op]
    done.push({
      problem: p,
      turn1: e.turn1,
      kind: e.kind,
      rightOperands,
      observation,
      turn2,
      ...(call !== undefined ? { copied: final === evaluateCall(call) } : {}),
      correct: final === answer(p),
    })
  })
  return done
}

export const rates = (episodes: ReadonlyArray<Episode>, problems: number): EpisodeRates => {
  const n = episodes.length
  const calls = episodes.filter((e) => e.kind === "call")
  const frac = (a: number, b: number) => (b === 0 ? 0 : a / b)
  return {
    episodes: n,
    problems,
    callRate: frac(calls.length, n),
    rightOperands: frac(calls.filter((e) => e.rightOperands).length, calls.length),
    copy: frac(calls.filter((e) => e.copied === true).length, calls.length),
    accuracy: frac(episodes.filter((e) => e.correct).length, n),
    directRate: frac(episodes.filter((e) => e.kind === "direct").length, n),
    otherRate: frac(episodes.filter((e) => e.kind === "other" || e.kind === "bad_call").length, n),
  }
}

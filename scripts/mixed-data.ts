/**
 * The problems and training sequences of `scripts/pretrain-mixed.ts`: the formats of the
 * shipped envs (math, calculator, words, inventory) for one character-level base model.
 *
 * Every env's problems are enumerated and split with `Env.splitOf`, exactly as the runner
 * splits them; a fixed part of each train split (a seeded shuffle) is the validation set,
 * never trained on. The eval split is not used here beyond being counted.
 *
 * Sequences, per env (weights: of predicting each token; 0 is not trained):
 *
 *   math        BOS "What is 7 times 8?" " 56" EOS                  reference + EOS, 1
 *   words       BOS "Reverse: cat" " tac" EOS                        reference + EOS, 1
 *   calculator  BOS prompt "[47+38]" "=85;" " 85" EOS                call 1, observation 0, answer + EOS answerWeight
 *               or a wrong direct guess BOS prompt " 79" EOS         1
 *   inventory   BOS "Price of lamp?" "[price lamp]" "=42;" " 42" EOS call 1, observation 0, answer + EOS answerWeight
 *               or a wrong direct guess BOS prompt " 17" EOS         1
 *
 * The tool envs mix a tool trace (`toolFraction`) with wrong direct guesses, as
 * `scripts/pretrain-calculator.ts` does: the model calls the tool on some problems and
 * copies its result, every direct answer is wrong, so its accuracy is about its call rate
 * and RL has the decision to learn. The inventory traces come from the server's data
 * module (`envs/mcp/inventory-data.ts`), the numbers the server answers with; no server
 * is started.
 */
import * as Env from "../src/vocabulary/Env.ts"
import type { Rng } from "../src/backends/local/Rng.ts"
import { answer as mathAnswer } from "../envs/math.ts"
import math from "../envs/math.ts"
import words, { reversed } from "../envs/words.ts"
import inventory, { answer as inventoryAnswer, type Problem as InventoryProblem } from "../envs/inventory.ts"
import { ITEMS } from "../envs/mcp/inventory-data.ts"
import calculator, { type Problem as CalcProblem } from "../envs/calculator.ts"
import { calculatorSequence, encode, evalSplit as calcEval, type MixSettings, type Sequence, trainSplit as calcTrain, wrongNumber } from "./calculator-episodes.ts"
import { shuffled } from "./Shuffle.ts"
import { BOS, EOS } from "../src/backends/local/CharTokenizer.ts"

export const ENVS = ["math", "calculator", "words", "inventory"] as const
export type EnvName = (typeof ENVS)[number]

export type MathProblem = { readonly a: number; readonly b: number; readonly op: "plus" | "minus" | "times" }
export type WordsProblem = { readonly word: string }
export type Problems = {
  readonly math: ReadonlyArray<MathProblem>
  readonly calculator: ReadonlyArray<CalcProblem>
  readonly words: ReadonlyArray<WordsProblem>
  readonly inventory: ReadonlyArray<InventoryProblem>
}

export const envOf: Record<EnvName, Env.AnyEnv> = { math, calculator, words, inventory }

/** Every problem of each env at its default difficulty, keys in the order its source writes them. */
const everything = () => {
  const ops = ["plus", "minus", "times"] as const
  const mathAll: Array<MathProblem> = []
  for (let a = 0; a <= 9; a++) for (let b = 0; b <= 9; b++) for (const op of ops) mathAll.push({ a, b, op })
  const letters = "abcdefghijklmnopqrstuvwxyz"
  const wordsAll: Array<WordsProblem> = []
  for (const x of letters) for (const y of letters) for (const z of letters) wordsAll.push({ word: x + y + z })
  const inventoryAll: Array<InventoryProblem> = []
  for (const item of ITEMS) for (const ask of ["stock", "price"] as const) inventoryAll.push({ item, ask })
  return { math: mathAll, words: wordsAll, inventory: inventoryAll }
}

export interface Splits {
  /** train split minus validation: what pretraining draws from */
  readonly pool: Problems
  /** a fixed part of the train split, never trained on: checkpoint selection */
  readonly validation: Problems
  /** sizes of each env's train and eval splits */
  readonly sizes: Record<EnvName, { readonly train: number; readonly eval: number }>
}

/** Splits every env as the runner does; `validationSize[env]` train-split problems become its validation set. */
export const splits = (validationSize: Record<EnvName, number>, seed: number): Splits => {
  const all = everything()
  const part = <P>(name: EnvName, train: ReadonlyArray<P>, evalCount: number) => {
    const order = shuffled(train, seed)
    const n = validationSize[name]
    return { validation: order.slice(0, n), pool: order.slice(n), sizes: { train: train.length, eval: evalCount } }
  }
  const byEnv = <P>(env: Env.AnyEnv, name: EnvName, problems: ReadonlyArray<P>) => {
    const train = problems.filter((p) => Env.splitOf(env, p) === "train")
    return part(name, train, problems.length - train.length)
  }
  const m = byEnv(math, "math", all.math)
  const c = part("calculator", calcTrain(), calcEval().length)
  const w = byEnv(words, "words", all.words)
  const i = byEnv(inventory, "inventory", all.inventory)
  return {
    pool: { math: m.pool, calculator: c.pool, words: w.pool, inventory: i.pool },
    validation: { math: m.validation, calculator: c.validation, words: w.validation, inventory: i.validation },
    sizes: { math: m.sizes, calculator: c.sizes, words: w.sizes, inventory: i.sizes },
  }
}

/** The key of a problem, to check that splits never overlap. */
export const keyOf = (p: unknown): string => JSON.stringify(p)

// ===== Prompts and answers =====

const textPrompt = (env: Env.AnyEnv, p: unknown): Array<number> => {
  const prompt = env.prompt(p)
  if (typeof prompt !== "string") throw new Error(`env ${env.name}: its prompt must be text`)
  return [BOS, ...encode(prompt)]
}

export const promptOf = (name: EnvName, p: unknown): Array<number> => textPrompt(envOf[name], p)

/** The text a single-turn env's completion must be, trimmed. */
export const referenceOf = (name: "math" | "words", p: unknown): string =>
  name === "math" ? String(mathAnswer(p as MathProblem)) : reversed(p as WordsProblem)

/** The inventory call, its observation and the answer: "[price lamp]", "=42;", " 42". */
export const inventoryCall = (p: InventoryProblem) => `[${p.ask} ${p.item}]`
export const inventoryObservation = (result: number) => `=${result};`

// ===== Training sequences =====

const reference = (name: "math" | "words", p: unknown): Sequence => {
  const prompt = promptOf(name, p)
  const out = [...encode(` ${referenceOf(name, p)}`), EOS]
  return { tokens: [...prompt, ...out], weights: [...prompt.map(() => 0), ...out.map(() => 1)] }
}

const inventoryTrace = (p: InventoryProblem, answerWeight: number): Sequence => {
  const prompt = promptOf("inventory", p)
  const call = encode(inventoryCall(p))
  const obs = encode(inventoryObservation(inventoryAnswer(p)))
  const ans = [...encode(` ${inventoryAnswer(p)}`), EOS]
  return {
    tokens: [...prompt, ...call, ...obs, ...ans],
    weights: [...prompt.map(() => 0), ...call.map(() => 1), ...obs.map(() => 0), ...ans.map(() => answerWeight)],
  }
}

export type Kind = "reference" | "toolTrace" | "wrongGuess"

/** One training sequence of `name` for problem `p`. */
export const sequenceOf = (name: EnvName, p: unknown, rng: Rng, mix: MixSettings): { readonly seq: Sequence; readonly kind: Kind } => {
  if (name === "math" || name === "words") return { seq: reference(name, p), kind: "reference" }
  if (name === "calculator") return calculatorSequence(p as CalcProblem, rng, mix)
  const q = p as InventoryProblem
  if (rng.next() < mix.toolFraction) return { seq: inventoryTrace(q, mix.answerWeight), kind: "toolTrace" }
  const range = q.ask === "stock" ? ([0, 99] as const) : ([1, 99] as const)
  const prompt = promptOf("inventory", q)
  const out = [...encode(` ${wrongNumber(inventoryAnswer(q), range, rng, mix.guess)}`), EOS]
  return { seq: { tokens: [...prompt, ...out], weights: [...prompt.map(() => 0), ...out.map(() => 1)] }, kind: "wrongGuess" }
}

/**
 * Questioner and answerer: the policy asks, a frozen model answers. The questioner is
 * given a number and an operation ("Get 12 from times.") and must ask an arithmetic
 * question whose answer is that number; the answerer, `models/base` frozen as it is
 * (`Game.frozen`), reads the question in its own format ("What is 3 times 4?") and
 * answers. The questioner wins when an answer is the number, with two questions at most;
 * after a miss it sees what it asked and what came back.
 *
 * The questioner writes the question's two operands as digits (" 3 4"); the first two
 * digits of its text are taken, and a text with fewer is no question (-1). Only the
 * questioner trains, on its moves; the answerer's answers are part of its world. What
 * it learns is which questions this answerer answers with the number: the sums and
 * products that make it, among the facts the answerer gets right.
 */
import { Schema } from "effect"
import { Env, Game } from "gyre"

const Op = Schema.Literals(["plus", "minus", "times"])
const Problem = Schema.Struct({ target: Schema.Int, op: Op })
type Problem = typeof Problem.Type
type Op = typeof Op.Type

/** a op b, as the answerer was pretrained to compute it */
export const apply = (a: number, b: number, op: Op): number => (op === "plus" ? a + b : op === "minus" ? a - b : a * b)

interface Asked {
  readonly a: number
  readonly b: number
  readonly answer: string
}
interface State {
  readonly problem: Problem
  readonly asked: ReadonlyArray<Asked>
  /** the question waiting for its answer */
  readonly pending?: { readonly a: number; readonly b: number }
  readonly won: boolean
}

/** Questions the questioner may ask. */
const MAX_QUESTIONS = 2

/** The operands of a questioner's text: its first two digits, else no question. */
export const operands = (text: string): { readonly a: number; readonly b: number } | undefined => {
  const digits = text.match(/\d/g)
  return digits === null || digits.length < 2 ? undefined : { a: Number(digits[0]), b: Number(digits[1]) }
}

/** The number an answer gives: its text read as an integer, else none. */
export const answered = (text: string): number | undefined => (/^\s*-?\d+\s*$/.test(text) ? Number(text) : undefined)

export default Game.env({
  name: "ask",
  problem: Problem,
  // a question drawn at random fixes a number that some question makes
  source: Env.seeded(({ random }) => {
    const op = random.pick(["plus", "minus", "times"] as const)
    return { target: apply(random.int(0, 9), random.int(0, 9), op), op }
  }),
  roles: ["questioner", "answerer"],
  start: (problem: Problem): State => ({ problem, asked: [], won: false }),
  toMove: (s: State) => (s.pending === undefined ? "questioner" : "answerer"),
  view: (s: State, role) =>
    role === "answerer"
      ? `What is ${s.pending!.a} ${s.problem.op} ${s.pending!.b}?`
      : `Get ${s.problem.target} from ${s.problem.op}.${s.asked.map((q) => ` ${q.a} ${q.b} gave${q.answer}.`).join("")} Ask:`,
  move: (s: State, role, text) => {
    if (role === "answerer") {
      const asked = [...s.asked, { ...s.pending!, answer: text.slice(0, 4) }]
      return { state: { problem: s.problem, asked, won: answered(text) === s.problem.target } }
    }
    const q = operands(text)
    return q === undefined ? { illegal: `${JSON.stringify(text)} asks nothing: write the question's two operands as digits, e.g. " 3 4"` } : { state: { ...s, pending: q } }
  },
  outcome: (s: State) => (s.won ? { questioner: 1, answerer: 0 } : s.asked.length >= MAX_QUESTIONS ? { questioner: 0, answerer: 0 } : undefined),
  illegal: () => ({ questioner: -1, answerer: 0 }),
  maxMoves: 2 * MAX_QUESTIONS,
  // its most likely answer: the answerer is as reliable as it can be, and the same question gets the same answer
  players: { answerer: Game.frozen("base", { temperature: 0 }) },
  sampling: { maxTokens: 4, temperature: 1 },
  eval: { heldOut: 0.2, size: 100 },
  // training win rate 0.12 over steps 0-49 -> 0.20 over steps 200-299; held-out (14 targets never
  // trained on) 0.00 at steps 0, 100, 200 and 300 (2 min 11 s on 2 cores)
  defaults: { steps: 300, groupSize: 16, learningRate: 2e-3, evalEvery: 100, saveEvery: 100 },
})
